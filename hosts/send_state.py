"""What one message's sender keeps (used by :mod:`hosts.sender`): its report, the answers to
its chunks' probes (filled in by the receive thread) and the packets still to send."""

from __future__ import annotations

import functools
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from hosts.messages import MessageKey
from hosts.wire import Flags


@dataclass
class SendTiming:
    """Where one message's time went (monotonic seconds; 0.0: never happened). The waits
    are summed over the sender's loop: for window room (packets pending, the window full),
    for answers (nothing it may send), and held on purpose (reorder allowances before a
    final or confirming probe)."""

    created: float = 0.0  # the sender began (its thread picked the message up)
    first_sent: float = 0.0
    last_sent: float = 0.0
    completed: float = 0.0  # the first answer saying the receiver holds the message
    last_answer: float = 0.0
    ended: float = 0.0
    room_wait_s: float = 0.0
    answer_wait_s: float = 0.0
    held_s: float = 0.0
    cwnd_start: float = 0.0  # the endpoint's window when the sender began and ended
    cwnd_end: float = 0.0
    finals: int = 0  # last-flagged probes over the whole message (within the bound, not complete)
    confirms: int = 0  # confirmations of loss over the bound before a new round
    inline_answers: int = 0  # answers taken on the receive thread while the sender slept
    wakes: int = 0  # times the receive thread woke the sender for an answer
    inline_chunks: int = 0  # chunks the receive thread sent while the sender slept


@dataclass
class SendReport:
    """What sending one message took."""

    key: MessageKey
    packets: int
    payload_bytes: int
    retransmitted: int
    rounds: int
    probes: int
    missing: int  # elements the receiver lacks at the end (zero-filled there), as its last answers showed
    eligible: int  # packets marked drop-eligible
    seconds: float
    ecn_echoes: int = 0  # bitmap answers that echoed CE marks
    timeouts: int = 0  # probes re-sent because their answer did not come within the RTO
    chunks: int = 0
    lost_by_class: dict[int, int] = field(default_factory=dict)  # missing elements by magnitude class
    eligible_elements: int = 0  # values in packets marked drop-eligible
    reordered: int = 0  # packets an answer showed missing that arrived later without a resend (late, not lost)
    #: of `missing`, the elements of a message whose final holdings the receiver's answers did
    #: not show (they were lost or late): the receiver zero-filled at most these
    unconfirmed: int = 0
    timing: SendTiming | None = None

    @property
    def loss_rate(self) -> float:
        return self.missing / (self.payload_bytes // 4) if self.payload_bytes else 0.0


class AnswerTaker(Protocol):
    """A sender that takes its chunks' answers on the receive thread while it sleeps."""

    def on_answer(self) -> bool: ...


@functools.lru_cache(maxsize=1024)
def _all_arrived(nbits: int) -> tuple[bytes, np.ndarray]:
    """The bitmap of `nbits` packets that all arrived (LSB-first, padding bits clear, as the
    receiver packs it) and its unpacked form (read-only, shared)."""
    every = np.ones(nbits, dtype=bool)
    every.flags.writeable = False
    return np.packbits(every, bitorder="little").tobytes(), every


class ChunkWait:
    """The answer to a chunk's probe, filled in by the receive thread."""

    __slots__ = ("first", "nbits", "bits", "full", "answered", "complete", "empty", "echo", "nonce", "wake", "owner")

    def __init__(self, first: int, nbits: int) -> None:
        self.first = first  # sequence number
        self.nbits = nbits
        self.bits: np.ndarray | None = None
        self.full = False  # every packet it asked about arrived (`bits` is then a shared read-only array)
        self.answered = 0.0  # monotonic time of the answer, 0 while unanswered
        self.complete = False
        self.empty = False
        self.echo = False
        self.nonce = -1
        self.wake: threading.Condition | None = None  # the sender's, notified by the answer
        #: The sender, whose ``on_answer`` the receive thread calls with the lock held (None: notify `wake`).
        self.owner: AnswerTaker | None = None

    def fill(self, start: int, nbits: int, payload: memoryview, flags: int, nonce: int, now: float) -> bool:
        """Take a bitmap answer; False when it does not fit this chunk."""
        if self.answered or start != self.first:
            return False
        if nbits:
            if nbits != self.nbits or len(payload) * 8 < nbits:
                return False
            ones, every = _all_arrived(nbits)
            if payload[:len(ones)] == ones:  # the usual answer: no unpacking
                self.bits, self.full = every, True
            else:
                self.bits = np.unpackbits(np.frombuffer(payload, np.uint8), count=nbits, bitorder="little").view(bool)
        else:
            self.empty = True
        self.complete = bool(flags & Flags.LAST)
        self.echo = bool(flags & Flags.ECN_ECHO)
        self.nonce = nonce
        self.answered = now
        return True


class Pending:
    """Packets still to send, in order: a queue of index arrays (no Python work per packet)."""

    __slots__ = ("_parts", "_size")

    def __init__(self, first: np.ndarray) -> None:
        self._parts: deque[np.ndarray] = deque([first] if first.size else [])
        self._size = int(first.size)

    def __len__(self) -> int:
        return self._size

    def __bool__(self) -> bool:
        return self._size > 0

    def clear(self) -> None:
        self._parts.clear()
        self._size = 0

    def push_front(self, packets: np.ndarray) -> None:
        if packets.size:
            self._parts.appendleft(np.asarray(packets, dtype=np.int64))
            self._size += int(packets.size)

    def push_back(self, packets: np.ndarray) -> None:
        if packets.size:
            self._parts.append(np.asarray(packets, dtype=np.int64))
            self._size += int(packets.size)

    def peek(self, k: int) -> np.ndarray:
        """The first `k` packets (fewer when fewer are left), without taking them."""
        first = self._parts[0]
        if first.size >= k or len(self._parts) == 1:
            return first[:k]
        parts, have = [], 0
        for part in self._parts:
            parts.append(part)
            have += part.size
            if have >= k:
                break
        return np.concatenate(parts)[:k]

    def pop(self, k: int) -> np.ndarray:
        """Take the first `k` packets."""
        taken = []
        while k > 0 and self._parts:
            first = self._parts[0]
            if first.size <= k:
                taken.append(self._parts.popleft())
                k -= first.size
            else:
                taken.append(first[:k])
                self._parts[0] = first[k:]
                k = 0
        out = taken[0] if len(taken) == 1 else np.concatenate(taken)
        self._size -= int(out.size)
        return out
