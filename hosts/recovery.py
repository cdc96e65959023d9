"""Loss recovery of one message's sender (:class:`hosts.sender.MessageSender` is one): what an
answer shows (packets arrived, missing, the window's credit and growth or cut), early
confirmation and resending once the loss is sure to exceed the bound, and what to do when every
chunk is answered and the message is not complete (last-flagged probes, confirmations, a new
round). The rules are in :mod:`hosts.sender`'s doc and hosts/README.md. Also the interface a
sender needs from its endpoint (:class:`SenderHost`) and the record of one chunk."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from hosts.errors import TransportError
from hosts.liveness import Liveness
from hosts.messages import MessageKey, within_bound
from hosts.pacing import Pacer, RttEstimator, Window
from hosts.packetize import PacketBatch
from hosts.receiver import Address
from hosts.send_state import ChunkWait, Pending, SendTiming
from hosts.wire import BITMAP_BITS_PER_PACKET, MsgType


class SenderHost(Protocol):
    """What a :class:`MessageSender` needs from whoever owns the socket (an endpoint): the
    shared window and its lock, the packets in flight, the timers' settings and a way to
    send. The sender knows nothing else of it."""

    window: Window
    _lock: threading.RLock
    _cond: threading.Condition
    in_flight: int
    liveness: Liveness
    reorder_grace: float
    max_confirms: int
    max_rounds: int | None
    max_rto: float
    peer_timeout: float
    aborted: str | None
    answers_on_receive: bool

    pacer: Pacer

    def _transmit(self, batch: PacketBatch, indices: np.ndarray, dest: Address) -> None: ...
    def _send_control(self, data: bytes, dest: Address) -> None: ...
    def _next_nonce(self) -> int: ...
    def _rtt(self, peer: Address) -> RttEstimator: ...
    def _rtt_sample(self, peer: Address, seconds: float) -> None: ...
    def _register(self, dest: Address, key: MessageKey, nonce: int, wait: ChunkWait) -> None: ...
    def _unregister(self, dest: Address, key: MessageKey, nonces: Iterable[int], wait: ChunkWait) -> None: ...
    def _wait_room(self, wake: threading.Condition, prio: int, need: int = 1, taker: object = None) -> None: ...
    def _room_freed(self) -> None: ...
    def _room_wait_done(self, wake: threading.Condition) -> None: ...


#: Most packets in one chunk (one probe per chunk).
MAX_CHUNK = 1024
#: Last-flagged probes a message within its bound sends, each after a reorder allowance,
#: before it resends what it misses (the receiver did not complete it: its tensor lacks data).
FINALS = 2


@dataclass(eq=False)
class Chunk:
    first: int  # index into the batch of the first packet covered
    nbits: int
    packets: np.ndarray  # batch indices sent in this chunk (empty: a probe only)
    last: bool
    wait: ChunkWait
    confirms: np.ndarray | None = None  # packets this probe-only chunk confirms as lost
    sent: dict[int, float] = field(default_factory=dict)  # nonce -> when the probe left
    attempts: int = 0
    deadline: float = 0.0


class Recovery:
    """The loss-recovery half of a message's sender: its state lives on the sender (declared
    here for the type checker), its sending half calls ``_open``."""

    ep: SenderHost
    dest: Address
    batch: PacketBatch
    key: MessageKey
    bound: float
    elements: int
    n: int
    counts: np.ndarray
    received: np.ndarray
    final: np.ndarray
    sent_once: np.ndarray
    shown_missing: np.ndarray
    any_shown: bool  # an answer showed a packet missing (shown_missing has one set)
    resent: np.ndarray
    confirmed_lost: np.ndarray
    resend_queued: np.ndarray
    pending: Pending
    complete: bool
    held_probe_sent: float
    finals: int
    confirms: int
    confirm_missing: int
    round_lost: int
    cut_this_round: bool
    deferring: bool  # loss shown over the bound this round waits for its confirmation to cut
    tentative: tuple[float, float, int, float] | None
    suspects: dict[int, float]
    confirming: set[int]
    rounds: int
    retransmitted: int
    echoes: int
    last_sent: float
    timing: SendTiming

    def _open(self, first: int, nbits: int, packets: np.ndarray, last: bool,
              confirms: np.ndarray | None = None) -> None:
        raise NotImplementedError

    def _answered(self, chunk: Chunk, wait: ChunkWait) -> None:
        ep = self.ep
        sent_at = chunk.sent.get(wait.nonce)
        if sent_at is not None:
            ep._rtt_sample(self.dest, wait.answered - sent_at)
        lo, hi = chunk.first, chunk.first + chunk.nbits
        newly = 0  # packets this answer shows arrived for the first time (late ones included)
        late = False  # of them, some an earlier answer showed missing and were not resent (reordering)
        if wait.empty:
            # Answers may come out of order (sprayed paths, a probe re-sent after its RTO): an empty
            # one to a probe sent before another whose answer showed data is stale, and a
            # completed message is never empty. Taken as news, it wiped what the sender knew, and
            # it then reported as zero-filled values the receiver held.
            if not self.complete and sent_at is not None and sent_at > self.held_probe_sent:
                self.received[:] = False  # the receiver holds nothing of the message (it gave it up)
        elif wait.bits is not None:
            if sent_at is not None and (wait.complete or wait.full or wait.bits.any()):
                self.held_probe_sent = max(self.held_probe_sent, sent_at)
            seen = self.received[lo:hi]
            if self.any_shown:
                arrived = (wait.bits if not wait.full else self.sent_once[lo:hi]) & ~seen
                late = bool((arrived & self.shown_missing[lo:hi] & ~self.resent[lo:hi]).any())
            if wait.full:  # every packet asked about arrived (the usual answer): fewer array passes
                newly = int(np.count_nonzero(self.sent_once[lo:hi] > seen))
                seen.fill(True)
            else:
                newly = int(np.count_nonzero(wait.bits & ~seen & self.sent_once[lo:hi]))
                seen |= wait.bits
            if wait.complete:  # what the receiver completed with: nothing arrives there any more
                self.final[lo:hi] = True
        self.timing.last_answer = wait.answered
        if wait.complete:
            self.complete = True
            self.timing.completed = self.timing.completed or wait.answered
        if chunk.packets.size and not wait.full and not self.received[lo:hi].all():  # its packets lie in lo..hi - 1
            missing = chunk.packets[~self.received[chunk.packets]]
            self.round_lost += int(self.counts[missing].sum())
            self.shown_missing[missing] = True
            self.any_shown = True
            for packet in missing.tolist():
                self.suspects.setdefault(packet, wait.answered)
        congested = confirmed = False
        if chunk.confirms is not None:  # an early confirmation: what is still missing is lost
            self.confirming.difference_update(chunk.confirms.tolist())
            lost_now = chunk.confirms[~self.received[chunk.confirms]]
            self.confirmed_lost[lost_now] = True
            resend = self._over_bound(lost_now)
            if resend.size and not self.complete:
                self._retransmit(resend)
                self.tentative = None  # confirmed loss over the bound: the cut stands
                confirmed = True
                if not self.cut_this_round:
                    self.cut_this_round = congested = True
        echo = False
        if wait.echo:
            self.echoes += 1
            echo = not congested
        tentative = False
        if not self.cut_this_round and not self.deferring and not within_bound(self.round_lost, self.elements,
                                                                              self.bound):
            # Answers show loss over the bound: cut now, as TCP does on SACK; the cut is undone
            # if the packets turn out to have been only late (reordering is no congestion). On
            # a path seen to reorder the confirmation decides instead (`_early`, `_decide`).
            with ep._cond:
                self.deferring = self.ep.max_confirms > 0 and not wait.echo and ep.window.defer_cut()
            if not self.deferring:
                self.cut_this_round = congested = True
                tentative = self.ep.max_confirms > 0 and not wait.echo
        with ep._cond:
            if late:
                ep.window.saw_reordering()
            if confirmed:
                ep.window.loss_confirmed()
            limited = ep.in_flight >= ep.window.flight_cap / 2  # grow only a window that is in use (RFC 7661)
            ep.in_flight -= chunk.packets.size
            ep.window.on_marks(newly, newly if wait.echo else 0)
            if congested:
                before = (ep.window.cwnd, ep.window.ssthresh)
                if ep.window.on_congestion() and tentative:
                    self.tentative = (*before, ep.window.decreases, ep.window.beta)
            elif echo:
                ep.window.on_ecn()
            elif limited:
                ep.window.on_ack(newly)
            if self.tentative is not None and self._only_late():
                ep.window.undo(*self.tentative)
                self.tentative = None
                self.cut_this_round = False
            ep._room_freed()

    def _only_late(self) -> bool:
        """Whether what answers showed missing has arrived, but for loss within the bound
        and none confirmed: the loss that cut the window was reordering."""
        if (self.confirmed_lost & ~self.received).any():
            return False
        return within_bound(int(self.counts[self.shown_missing & ~self.received].sum()), self.elements, self.bound)

    def _early(self) -> None:
        """Once the message is sure to exceed its bound, confirm (after `reorder_grace`)
        and resend what answers showed missing, without waiting for the end of the round."""
        if not self.suspects or within_bound(self.round_lost, self.elements, self.bound):
            return
        now = time.monotonic()
        for packet in [p for p in self.suspects if self.received[p]]:
            del self.suspects[packet]
        ripe = np.asarray(sorted(p for p, t in self.suspects.items() if now - t >= self.ep.reorder_grace
                                 or self.ep.max_confirms == 0), dtype=np.int64)
        if not ripe.size:
            return
        for packet in ripe.tolist():
            del self.suspects[packet]
        if self.ep.max_confirms == 0:
            self._retransmit(ripe)
            return
        lo = int(ripe[0])
        ripe = ripe[ripe - lo < BITMAP_BITS_PER_PACKET]
        for packet in ripe.tolist():
            self.confirming.add(packet)
        self._open(lo, int(ripe[-1]) - lo + 1, np.zeros(0, dtype=np.int64), last=False, confirms=ripe)

    def _over_bound(self, candidates: np.ndarray) -> np.ndarray:
        """The fewest of `candidates` (largest magnitude first) to resend so that the loss
        confirmed and not yet resent is within the bound again."""
        unresolved = self.confirmed_lost & ~self.received & ~self.resend_queued
        excess = int(self.counts[unresolved].sum()) - math.floor(self.bound * self.elements + 1e-9)
        if excess <= 0 or not candidates.size:
            return candidates[:0]
        order = candidates[np.argsort(-self.batch.headers["mag_class"][candidates].astype(np.int64), kind="stable")]
        upto = int(np.searchsorted(np.cumsum(self.counts[order]), excess)) + 1
        return np.sort(order[:upto])

    def _retransmit(self, packets: np.ndarray) -> None:
        self.resend_queued[packets] = True
        self.pending.push_front(packets)
        self.rounds = max(self.rounds, 1)

    def _decide(self) -> bool:
        """Every chunk is answered and the message is not complete: True when done. It ends
        only complete or (a part) held whole after a last-flagged answer; within the bound it
        asks `FINALS` times, each after a reorder allowance, then resends (hosts/README.md)."""
        missing = int(self.counts[~self.received].sum())
        if within_bound(missing, self.elements, self.bound):
            if self.finals and not missing:
                return True
            if self.finals >= FINALS:
                self._new_round(cut=False)
                return False
            if missing:
                wait = self.last_sent + self._reorder_allowance() - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                    self.timing.held_s += wait
                self.last_sent = time.monotonic()  # the next ask gives the data another allowance
            self.finals += 1
            self.timing.finals += 1
            self._probe_missing(np.arange(self.n))
            return False
        if self.confirms < self.ep.max_confirms and (self.confirms == 0 or missing < self.confirm_missing):
            self.confirms += 1
            self.confirm_missing = missing
            self.timing.confirms += 1
            time.sleep(self.ep.reorder_grace)
            self.timing.held_s += self.ep.reorder_grace
            self._probe_missing(np.flatnonzero(~self.received))
            return False
        self._new_round(cut=not self.cut_this_round)
        return False

    def _new_round(self, cut: bool) -> None:
        """Resend every packet the receiver lacks (`cut`: halve the window first)."""
        if cut:
            with self.ep._cond:
                self.ep.window.on_congestion()
                if self.deferring:
                    self.ep.window.loss_confirmed()
        self.rounds += 1
        if self.ep.max_rounds is not None and self.rounds > self.ep.max_rounds:
            missing = int(self.counts[~self.received].sum())
            raise TransportError(f"{message_name(self.key)} to {self.dest[0]}:{self.dest[1]} still misses {missing} of "
                                 f"{self.elements} elements after {self.ep.max_rounds} retransmission rounds")
        missing_idx = np.flatnonzero(~self.received)
        self.resend_queued[missing_idx] = True
        self.pending.push_back(missing_idx)
        self.suspects.clear()
        self.confirms = self.finals = self.round_lost = 0
        self.cut_this_round = self.deferring = False
        self.tentative = None

    def _reorder_allowance(self) -> float:
        """How long data sent may still be on its way behind a probe that overtook it: the
        peer's smoothed RTT (queues on sprayed paths show in it), at least `reorder_grace`."""
        rtt = self.ep._rtt(self.dest)
        srtt = rtt.srtt if rtt.srtt is not None else 0.0
        return min(self.ep.max_rto, max(self.ep.reorder_grace, srtt))

    def _probe_missing(self, indices: np.ndarray) -> None:
        """Last-flagged probes (no data) over the range of `indices`, in pieces of one answer."""
        lo, hi = int(indices.min()), int(indices.max()) + 1
        starts = list(range(lo, hi, BITMAP_BITS_PER_PACKET))
        for i, start in enumerate(starts):
            end = min(hi, start + BITMAP_BITS_PER_PACKET)
            self._open(start, end - start, np.zeros(0, dtype=np.int64), last=i == len(starts) - 1)


def message_name(key: MessageKey) -> str:
    kind = "gradient" if key.kind == MsgType.GRADIENT else "parameter"
    return f"{kind} message (worker {key.worker_id}, tensor {key.tensor_id}, iteration {key.iteration})"

