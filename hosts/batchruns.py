"""The reassembler's side of the C receive path (:mod:`hosts.fastpath`, :mod:`hosts.rxloop`).

:class:`BatchRuns` is mixed into :class:`hosts.receiver.Reassembler`: a run of one message's data
placed at once from a batch (:meth:`BatchRuns.handle_run`), the counts and completions of what
the C placed in registered messages (:meth:`BatchRuns.absorbed`), and the messages whose probes
the C answers once they completed.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import Any

from hosts.assembly import Address, Assembly, DropReason, ReceiverStats
from hosts.fastpath import ADD, COUNT_OTHER, PLACE, PLACE_AHEAD
from hosts.messages import Delivered, MessageKey
from hosts.wire import HEADER_STRUCT, MsgType

_KINDS = (MsgType.GRADIENT, MsgType.PARAMETER)


class BatchRuns:
    """Batches' runs of data for :class:`hosts.receiver.Reassembler` (which sets the attributes
    and the methods below)."""

    job_id: int | None
    bounds: dict[MsgType, float]
    max_tensor_len: int
    max_open_elements: int
    stats: ReceiverStats
    _open: dict[MessageKey, Assembly]
    _done: OrderedDict[MessageKey, tuple[int, Address]]
    _echo: set[MessageKey]
    _done_c: dict[MessageKey, tuple[Any, int]]

    def admit(self, worker: int, source: Address, pin: bool = False) -> bool:
        raise NotImplementedError

    def _note_ce(self, key: MessageKey) -> None:
        raise NotImplementedError

    def _expects_other_length(self, key: MessageKey, tensor_len: int) -> bool:
        raise NotImplementedError

    def _assembly(self, key: MessageKey, tensor_len: int, source: Address) -> Assembly | None:
        raise NotImplementedError

    def _complete(self, asm: Assembly) -> Delivered:
        raise NotImplementedError

    def handle_run(self, rx: Any, i: int, j: int, source: Address, ce: int = 0) -> list[Delivered]:
        """Packets ``i .. j-1`` of the batch receiver `rx` (:class:`hosts.fastpath.BatchReceiver`):
        data of one message from `source`, well-formed headers that agree (``rx.run_end``),
        `ce` of them CE-marked. Counts, drops, places and completes exactly as :meth:`handle`
        does packet by packet, with the per-packet work in C; returns the completed message."""
        n = j - i
        _vt, _f, job, worker, tensor, iteration, _o, tensor_len = HEADER_STRUCT.unpack_from(rx.packet(i))[:8]
        if self.job_id is not None and job != self.job_id:
            self.stats.drops[DropReason.WRONG_JOB.value] += n
            return []
        if not self.admit(worker, source, pin=True):
            self.stats.drops[DropReason.UNKNOWN_PEER.value] += n
            return []
        key = MessageKey(job, worker, iteration, tensor, _KINDS[_vt & 0x0F])
        for _ in range(ce):
            self._note_ce(key)
        if tensor_len == 0 or tensor_len > self.max_tensor_len:
            self.stats.drops[DropReason.TOO_LARGE.value] += n
            return []
        delivered: list[Delivered] = []
        k = i
        while k < j:
            asm = self._open.get(key)
            reject = (DropReason.LATE if key in self._done else
                      DropReason.TOO_LARGE if tensor_len > self.max_open_elements else
                      DropReason.INCONSISTENT if asm is None and self._expects_other_length(key, tensor_len) else None)
            asm = asm if reject is None else None
            if reject is None and asm is None:  # allocate only for a packet that passes the checks
                k = self._place_counts(rx.place(k, j, tensor_len, None, 0, PLACE))
                if k >= j:
                    break
                asm = self._assembly(key, tensor_len, source)
                assert asm is not None
            if asm is not None and asm.values.size != tensor_len:
                reject = DropReason.INCONSISTENT
            if reject is not None:
                res = rx.place(k, j, tensor_len, None, 0, COUNT_OTHER)
                self._place_counts(res)
                self.stats.drops[reject.value] += int(res[6])
                if reject is DropReason.LATE:
                    self.stats.duplicates += int(res[6])
                break
            assert asm is not None
            if asm.cptrs is None:
                asm.cptrs = (rx.nat.ptr(asm.values), rx.nat.ptr(asm.have), rx.nat.ptr(asm.seqs))
            # values that never arrive are set at completion (fill): later packets may be read in place
            mode = ADD if asm.add else PLACE if asm.fill is None else PLACE_AHEAD
            first = k
            res = rx.place(k, j, tensor_len, asm.cptrs, asm.received, mode, asm.mark, owner=asm)
            k = self._place_counts(res)
            self.stats.data_packets += int(res[1])
            self.stats.duplicates += int(res[2])
            asm.received += int(res[5])
            if asm.received == tensor_len:
                delivered.append(self._complete(asm))
                if asm.source == source and rx.answers is not None:  # its later probes answered in C
                    self._done_in_c(rx, first, key)
            elif asm.answers is not None:
                rx.set_received(asm.answers[1], asm.received)
            elif asm.source == source:  # its probes answered (and its runs placed) in C from now on
                allowed = math.floor(self.bounds.get(key.kind, 0.0) * tensor_len + 1e-9)  # within_bound's
                slot = rx.register(first, tensor_len, asm.cptrs, asm.mark, mode, allowed, asm.received, asm)
                if slot is not None:
                    asm.answers = (rx, slot)
                    if key in self._echo:  # the echo owed is C's while it answers
                        self._echo.discard(key)
                        rx.owe_echo(slot, True)
        return delivered

    def absorbed(self, rx: Any) -> tuple[list[Delivered], list[Address]]:
        """Count what the C of batch receiver `rx` placed of its batch in registered messages
        (:meth:`hosts.fastpath.BatchReceiver.absorbed`), as :meth:`handle_run` would have; (the
        messages it completed, the sources it placed data of)."""
        (data, dup, oob, payload, late, ce), touched, full = rx.absorbed()
        stats = self.stats
        stats.data_packets += data
        stats.placed_in_c += data
        stats.duplicates += dup + late
        stats.ce_marked += ce
        for reason, count in ((DropReason.OUT_OF_BOUNDS, oob), (DropReason.BAD_PAYLOAD, payload),
                              (DropReason.LATE, late)):
            if count:
                stats.drops[reason.value] += count
        for asm, received in touched:
            asm.received = received
        delivered = []
        for asm, slot in full:
            if self._open.get(asm.key) is not asm:
                continue
            got = rx.register_done(None, asm.values.size, asm.key, slot)  # before its entry is forgotten
            delivered.append(self._complete(asm))
            self._adopt_done(rx, got, asm.key)
        return delivered, [asm.source for asm, _r in touched]

    def _done_in_c(self, rx: Any, i: int, key: MessageKey) -> None:
        """Let `rx`'s C answer the probes of `key` (data packet `i`'s message), completed with every element."""
        self._adopt_done(rx, rx.register_done(i, self._done[key][0], key), key)

    def _adopt_done(self, rx: Any, got: tuple[int, Any, bool] | None, key: MessageKey) -> None:
        if got is None:
            return
        slot, old, old_echo = got
        if old is not None and self._done_c.pop(old, None) is not None and old_echo:
            self._echo.add(old)
        self._done_c[key] = (rx, slot)
        if key in self._echo:
            self._echo.discard(key)
            rx.done_echo(slot, True)

    def completed_in_c(self, asm: Assembly) -> Delivered | None:
        """Complete `asm`, whose probe flagged *last* the C answered as completing it
        (:meth:`hosts.fastpath.BatchReceiver.completed`); None when it is no longer open."""
        if self._open.get(asm.key) is not asm:
            return None
        self.stats.completed_in_c += 1
        return self._complete(asm)

    def _place_counts(self, res: Any) -> int:
        """Note the packet-level drops of a gfh_place result; the index it stopped at."""
        if res[3]:
            self.stats.drops[DropReason.OUT_OF_BOUNDS.value] += int(res[3])
        if res[4]:
            self.stats.drops[DropReason.BAD_PAYLOAD.value] += int(res[4])
        return int(res[0])
