"""The receiving side of the bounded-loss transport, free of sockets.

:class:`Reassembler` takes raw DLCP datagrams and returns the replies to send back and the
messages that completed. Values are placed by offset in any order; duplicates are ignored;
a probe is answered with one bitmap of the data packets it covers (never more than its size
class allows, and without allocating anything: a message nothing arrived of gets a 28-byte
answer with no bits); a message completes when every element arrived, or at a probe with
the *last* flag once at least (1 - bound) of its elements arrived; a completed message
answers every later probe with a bitmap flagged *last* (it needs nothing more) that tells
which packets it completed with, so the sender can report what was really zero-filled. Only
the job's members (``peers``, else the first address each worker id sent data from) are
heard. Data that arrived with IP ECN = CE (``handle(..., ce=True)``) sets the ECN-echo flag
of the message's next bitmap answer, so the sender's window shrinks before the switch has
to drop.
A tensor may be sent in parts (each part its own probe); sequence numbers are unique per
tensor, so the parts share one assembly. Lost gradient values are zero; lost parameter
values keep what ``prior(key)`` returned (the previous iteration's values). A message may be
rebuilt in its caller's array (:meth:`Reassembler.expect`), or added into it: each value that
arrives is then added, once, to what the array holds, and a value lost leaves it as it was (a
reduce step's sum without that value, as a zero-filled message added to it would). Anything
malformed or unexpected is counted by reason and dropped: nothing in a packet can make it
write outside a tensor, and the memory held by incomplete messages is bounded (the oldest
are given up first).
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np

from hosts.arrays import ArrayPool
from hosts.assembly import MARK_BYTES, Address, Assembly, DropReason, Map, ReceiverStats
from hosts.batchruns import BatchRuns
from hosts.messages import DEFAULT_BOUNDS, Delivered, MessageKey, within_bound
from hosts.wire import (BITMAP_BITS_PER_PACKET, HEADER_LEN, HEADER_STRUCT, RESERVED_FLAGS, VERSION, Flags,
                        MsgType, pack_bitmap, probe_capacity)

__all__ = ["Address", "Assembly", "DropReason", "Reassembler", "ReceiverStats"]

_KINDS = (MsgType.GRADIENT, MsgType.PARAMETER)
_F32 = np.dtype("<f4")
SPARE_MAPS = 32  # completed messages whose have/seqs maps are kept for reuse...
SPARE_MAP_BYTES = 128 << 20  # ...holding at most this many bytes in all


@functools.lru_cache(maxsize=1024)
def _ones(nbits: int) -> bytes:
    """The bitmap of `nbits` packets that all arrived (LSB-first, as :func:`pack_bitmap`)."""
    return b"\xff" * (nbits // 8) + (bytes([(1 << (nbits % 8)) - 1]) if nbits % 8 else b"")


class Reassembler(BatchRuns):
    """Rebuilds DLCP messages from datagrams (see the module doc; :class:`hosts.batchruns.BatchRuns`
    its runs of a batch on the C receive path)."""

    def __init__(
        self,
        *,
        job_id: int | None = None,
        bounds: dict[MsgType, float] | None = None,
        max_tensor_len: int = 1 << 26,
        max_open: int = 4096,
        max_open_elements: int = 1 << 27,
        done_memory: int = 65536,
        prior: Callable[[MessageKey], np.ndarray | None] | None = None,
        peers: dict[int, Address] | None = None,
    ) -> None:
        """`peers` (worker id -> address) is the job's membership: data and probes from
        anyone else are dropped. Without it, the first address a worker id is heard from
        with data is that worker's for good (trust on first use)."""
        self.job_id = job_id
        self.peers = peers
        self._pinned: dict[int, Address] = {}
        self.bounds = dict(DEFAULT_BOUNDS if bounds is None else bounds)
        self.max_tensor_len = max_tensor_len
        self.max_open = max_open
        self.max_open_elements = max_open_elements
        self._open_elements = 0
        self.done_memory = done_memory
        self.prior = prior
        self.stats = ReceiverStats()
        self._open: dict[MessageKey, Assembly] = {}
        self._spare_maps: list[tuple[Map, Map, int]] = []  # have/seqs/mark of completed messages
        self._arrays = ArrayPool()  # new messages' arrays, reused once their users dropped them
        self._spare_bytes = 0  # their bytes
        self._done: OrderedDict[MessageKey, tuple[int, Address]] = OrderedDict()  # key -> (tensor_len, source)
        #: CE-marked data seen since the last answer (of messages whose probes C answers: the C's echo flag)
        self._echo: set[MessageKey] = set()
        self._done_bits: dict[MessageKey, np.ndarray] = {}  # packets a message completed with, if not all
        #: Completed messages whose probes a batch receiver's C answers: key -> (receiver, done slot)
        self._done_c: dict[MessageKey, tuple[Any, int]] = {}
        self._into: OrderedDict[MessageKey, tuple[np.ndarray, bool]] = OrderedDict()  # where expected ones go

    @property
    def open_messages(self) -> int:
        return len(self._open)

    def handle(self, data: bytes | memoryview, source: Address,
               ce: bool = False) -> tuple[list[bytes], list[Delivered]]:
        """Process one datagram: (replies to send to `source`, completed messages).

        `ce`: the datagram arrived with IP ECN = CE (congestion experienced)."""
        if len(data) < HEADER_LEN:
            return self._drop(DropReason.TRUNCATED)
        vt, flags, job, worker, tensor, iteration, offset, tensor_len, count, mag, _prio, seq = (
            HEADER_STRUCT.unpack_from(data)
        )
        if vt >> 4 != VERSION:
            return self._drop(DropReason.BAD_VERSION)
        if flags & RESERVED_FLAGS:
            return self._drop(DropReason.BAD_FLAGS)
        if self.job_id is not None and job != self.job_id:
            return self._drop(DropReason.WRONG_JOB)
        msg_type = vt & 0x0F
        if msg_type <= 1:
            if not self.admit(worker, source, pin=True):
                return self._drop(DropReason.UNKNOWN_PEER)
            key = MessageKey(job, worker, iteration, tensor, _KINDS[msg_type])
            if ce:
                self._note_ce(key)
            return self._data(key, data, offset, tensor_len, count, seq, source)
        if msg_type == 2:
            if mag > 1:
                return self._drop(DropReason.BAD_TYPE)
            if tensor_len == 0 and seq == 0:  # keep-alive: answer members (anyone without a membership)
                if self.peers is not None and not self.admit(worker, source):
                    return self._drop(DropReason.UNKNOWN_PEER)
                return [HEADER_STRUCT.pack((VERSION << 4) | MsgType.BITMAP, 0, job, worker, tensor, iteration,
                                           0, 0, 0, mag, 7, 0)], []
            if not self.admit(worker, source):
                return self._drop(DropReason.UNKNOWN_PEER)
            if seq > probe_capacity(len(data)):
                return self._drop(DropReason.PROBE_TOO_WIDE)
            key = MessageKey(job, worker, iteration, tensor, _KINDS[mag])
            return self._probe(key, tensor_len, offset, seq, source, bool(flags & Flags.LAST), count)
        if msg_type == 3:
            return self._drop(DropReason.UNEXPECTED)
        return self._drop(DropReason.BAD_TYPE)

    def expect(self, key: MessageKey, out: np.ndarray, add: bool = False) -> None:
        """Rebuild message `key` in `out` (a contiguous float32 array of its length) instead of
        new memory, if its first packet arrives after this call; the delivered values are then
        `out` itself. Lost elements are 0 (or the prior's) in `out` too, written at completion.

        `add`: add each value that arrives to what `out` holds (once, however often its packet
        comes); a lost value leaves `out` as it was. `out` must not change otherwise until the
        message is delivered (or :meth:`unexpect`), and such a message is never given up to
        make room (the memory is the caller's; giving it up would add its values twice)."""
        self._into[key] = (out, add)
        while len(self._into) > 4096:  # expectations never met (a peer gone) do not pile up
            self._into.popitem(last=False)

    def unexpect(self, keys: list[MessageKey]) -> None:
        """Forget the expectations of `keys` whose first packet has not arrived (a message
        already open keeps its array)."""
        for key in keys:
            self._into.pop(key, None)

    def admit(self, worker: int, source: Address, pin: bool = False) -> bool:
        """Whether `source` may speak for `worker` (see the constructor)."""
        if self.peers is not None:
            return self.peers.get(worker) == source
        pinned = self._pinned.get(worker)
        if pinned is None:
            if pin:
                self._pinned[worker] = source
            return True
        return pinned == source

    # -- data -------------------------------------------------------------------------------

    def _data(self, key: MessageKey, data: bytes | memoryview, offset: int, tensor_len: int,
              count: int, seq: int, source: Address) -> tuple[list[bytes], list[Delivered]]:
        if tensor_len == 0 or tensor_len > self.max_tensor_len:
            return self._drop(DropReason.TOO_LARGE)
        if count == 0 or offset + count > tensor_len or seq >= tensor_len:
            return self._drop(DropReason.OUT_OF_BOUNDS)
        if len(data) != HEADER_LEN + 4 * count:
            return self._drop(DropReason.BAD_PAYLOAD)
        if key in self._done:
            self.stats.duplicates += 1
            return self._drop(DropReason.LATE)
        if key not in self._open and self._expects_other_length(key, tensor_len):
            return self._drop(DropReason.INCONSISTENT)
        asm = self._assembly(key, tensor_len, source)
        if asm is None:
            return [], []
        if asm.values.size != tensor_len:
            return self._drop(DropReason.INCONSISTENT)
        self.stats.data_packets += 1
        seqs, mark = asm.seqs, asm.mark
        if seqs[seq] == mark:
            self.stats.duplicates += 1
            return [], []
        seqs[seq] = mark
        end = offset + count
        have = asm.have
        if have.find(MARK_BYTES[mark], offset, end) < 0:  # the usual case: nothing of it arrived yet
            if asm.add:
                asm.values[offset:end] += np.frombuffer(data, _F32, count, HEADER_LEN)
            else:
                asm.raw[offset * 4:end * 4] = data[HEADER_LEN:]
            asm.received += count
        else:  # overlaps elements that arrived in another packet: keep those
            fresh = np.frombuffer(have, np.uint8, count, offset) != mark
            values = np.frombuffer(data, _F32, count, HEADER_LEN)
            target = asm.values[offset:end]
            if asm.add:
                target[fresh] += values[fresh]
            else:
                target[fresh] = values[fresh]
            asm.received += int(fresh.sum())
        np.frombuffer(have, np.uint8, count, offset).fill(mark)
        if asm.received == tensor_len:
            return [], [self._complete(asm)]
        if asm.answers is not None:
            asm.answers[0].set_received(asm.answers[1], asm.received)
        return [], []

    def _expects_other_length(self, key: MessageKey, tensor_len: int) -> bool:
        """Whether the caller's array for `key` (:meth:`expect`) is not `tensor_len` long: such a
        (corrupt or forged) header must not open the message, or its real packets would be dropped."""
        into = self._into.get(key)
        return into is not None and into[0].size != tensor_len

    def _assembly(self, key: MessageKey, tensor_len: int, source: Address) -> Assembly | None:
        asm = self._open.get(key)
        if asm is not None:
            return asm
        if tensor_len > self.max_open_elements:
            self._drop(DropReason.TOO_LARGE)
            return None
        # Make room by giving up the oldest incomplete messages (their sender is gone or
        # will probe again and start over), but none being added into its caller's array.
        while len(self._open) >= self.max_open or self._open_elements + tensor_len > self.max_open_elements:
            oldest = next((k for k, a in self._open.items() if not a.add), None)
            if oldest is None:
                break
            gone = self._open.pop(oldest)
            self._open_elements -= gone.values.size
            self._forget_answers(gone)
            self.stats.evicted += 1
        initial = self.prior(key) if (self.prior is not None and key.kind == MsgType.PARAMETER) else None
        maps = next((m for m in self._spare_maps if len(m[0]) == tensor_len), None)
        if maps is not None:
            self._spare_maps.remove(maps)
            self._spare_bytes -= 2 * tensor_len
        out, add = self._into.pop(key, (None, False))
        asm = Assembly(key, tensor_len, initial, source, out, maps, add, self._arrays)
        self._open[key] = asm
        self._open_elements += tensor_len
        return asm

    # -- probes -----------------------------------------------------------------------------

    def _probe(self, key: MessageKey, tensor_len: int, first: int, n_packets: int,
               source: Address, last: bool, nonce: int) -> tuple[list[bytes], list[Delivered]]:
        if tensor_len > self.max_tensor_len:
            return self._drop(DropReason.TOO_LARGE)
        if n_packets == 0 or first + n_packets > tensor_len:
            return self._drop(DropReason.OUT_OF_BOUNDS)
        done = self._done.get(key)
        if done is not None:
            if done != (tensor_len, source):
                return self._drop(DropReason.INCONSISTENT)
            self.stats.probes += 1
            # A completed message needs nothing more; the bitmap tells what it completed with.
            return self._bitmaps(key, tensor_len, first, self._final_bits(key, first, n_packets), nonce,
                                 complete=True, nbits=n_packets), []
        asm = self._open.get(key)
        if asm is None:  # nothing of it arrived: say so in 28 bytes, allocate nothing
            self.stats.probes += 1
            return self._bitmaps(key, tensor_len, first, np.zeros(0, dtype=bool), nonce), []
        if asm.values.size != tensor_len or asm.source != source:
            return self._drop(DropReason.INCONSISTENT)
        self.stats.probes += 1
        bits = np.frombuffer(asm.seqs, dtype=np.uint8, count=n_packets, offset=first) == asm.mark
        if last and within_bound(tensor_len - asm.received, tensor_len, self.bounds.get(key.kind, 0.0)):
            delivered = self._complete(asm)
            return self._bitmaps(key, tensor_len, first, bits, nonce, complete=True), [delivered]
        return self._bitmaps(key, tensor_len, first, bits, nonce), []

    def _final_bits(self, key: MessageKey, first: int, n_packets: int) -> np.ndarray | None:
        """Which of packets first .. first + n_packets - 1 a completed message holds (None:
        all of them, as it completed with every element)."""
        packed = self._done_bits.get(key)
        if packed is None:
            return None
        bits = np.unpackbits(packed, bitorder="little").astype(bool)
        out = np.zeros(n_packets, dtype=bool)
        part = bits[first:first + n_packets]
        out[:part.size] = part
        return out

    def _note_ce(self, key: MessageKey) -> None:
        self.stats.ce_marked += 1
        if len(self._echo) >= self.max_open + self.done_memory:  # senders that never probe
            self._echo.clear()  # (an echo owed in C stays owed)
        asm = self._open.get(key)
        if asm is not None and asm.answers is not None:  # the C's answers carry it
            asm.answers[0].owe_echo(asm.answers[1], True)
        elif (done := self._done_c.get(key)) is not None:
            done[0].done_echo(done[1], True)
        else:
            self._echo.add(key)

    def _forget_answers(self, asm: Assembly) -> None:
        """C no longer answers for `asm`; an echo it still owes becomes Python's."""
        if asm.answers is not None:
            rx, slot = asm.answers
            if rx.echo_owed(slot):
                self._echo.add(asm.key)
            rx.forget(slot)
            asm.answers = None

    def _bitmaps(self, key: MessageKey, tensor_len: int, first: int, bits: np.ndarray | None, nonce: int = 0,
                 complete: bool = False, nbits: int = 0) -> list[bytes]:
        """The answers to a probe: `bits` says which packets arrived (None: all `nbits`)."""
        replies = []
        flags = Flags.LAST if complete else 0
        asm = self._open.get(key)
        echo = key in self._echo
        if asm is not None and asm.answers is not None and asm.answers[0].echo_owed(asm.answers[1]):
            asm.answers[0].owe_echo(asm.answers[1], False)  # owed in C (a probe C left): sent here
            echo = True
        elif (done := self._done_c.get(key)) is not None and done[0].done_echo_owed(done[1]):
            done[0].done_echo(done[1], False)
            echo = True
        if echo:
            self._echo.discard(key)
            flags |= Flags.ECN_ECHO
            self.stats.ecn_echoes += 1
        size = nbits if bits is None else bits.size
        for start in range(0, max(size, 1), BITMAP_BITS_PER_PACKET):
            count = min(BITMAP_BITS_PER_PACKET, size - start) if size else 0
            header = HEADER_STRUCT.pack(
                (VERSION << 4) | MsgType.BITMAP, flags, key.job_id, key.worker_id, key.tensor_id,
                key.iteration, first + start, tensor_len, count, int(key.kind), 7,
                nonce + start // BITMAP_BITS_PER_PACKET,
            )
            replies.append(header + (_ones(count) if bits is None else pack_bitmap(bits[start:start + count])))
        self.stats.bitmaps_sent += len(replies)
        return replies

    # -- completion -------------------------------------------------------------------------

    def _complete(self, asm: Assembly) -> Delivered:
        del self._open[asm.key]
        self._open_elements -= asm.values.size
        self._done[asm.key] = (asm.values.size, asm.source)
        lost_at = None
        if asm.received < asm.values.size:  # keep what it completed with, for later probes (packed)
            lost = np.frombuffer(asm.have, np.uint8, asm.values.size) != asm.mark
            lost_at = np.flatnonzero(lost)
            if asm.fill is not None:  # the values that never arrived: 0, or the prior's
                asm.values[lost] = asm.fill if isinstance(asm.fill, float) else asm.fill[lost]
            top = asm.seqs.rfind(MARK_BYTES[asm.mark]) + 1
            self._done_bits[asm.key] = np.packbits(np.frombuffer(asm.seqs, np.uint8, top) == asm.mark,
                                                   bitorder="little")
        while len(self._done) > self.done_memory:
            old = self._done.popitem(last=False)[0]
            self._done_bits.pop(old, None)
            if (done := self._done_c.pop(old, None)) is not None and done[0].forget_done(done[1], old):
                self._echo.add(old)  # the echo it owed stays owed, as in Python
        self.stats.completed += 1
        # The maps are the reassembler's own: reused by a later message of the same length, which
        # spares the allocation's page faults and zeroing pass (a third of the receiver's CPU on
        # 4 MB messages over loopback, hosts/README.md).
        # As many as there are lengths in a round of all-reduces (a ring receives 2 (N - 1)
        # chunks of each bucket, of up to N lengths, and several buckets are in flight), or a
        # new one often finds none of its length and pays a fresh allocation.
        self._spare_maps.append((asm.have, asm.seqs, asm.mark))
        self._spare_bytes += 2 * len(asm.have)
        while len(self._spare_maps) > SPARE_MAPS or self._spare_bytes > SPARE_MAP_BYTES:
            self._spare_bytes -= 2 * len(self._spare_maps.pop(0)[0])
        asm.cptrs = None  # also ends BatchReceiver's reading of this message's packets in place
        self._forget_answers(asm)
        return Delivered(key=asm.key, values=asm.values, received=asm.received, source=asm.source, lost=lost_at)

    def _drop(self, reason: DropReason) -> tuple[list[bytes], list[Delivered]]:
        self.stats.drops[reason.value] += 1
        return [], []

