"""Probes answered and data runs placed in C (``hosts/answers.c``): the part of
:class:`hosts.fastpath.BatchReceiver` that keeps the C's table of open and completed messages.

Python registers an open message (:meth:`CAnswers.register`) once a run of its data leaves it
incomplete, and a message completed with every element in a ring of the latest ones
(:meth:`CAnswers.register_done`); from then on the C answers their probes (with the ECN echo
they owe; a probe flagged *last* within the bound completes the message) and places their
runs of data as the batch is received (:meth:`CAnswers.absorbed`), and Python takes what it
needs of that once per batch.
"""

from __future__ import annotations

import heapq
from typing import Any


class CAnswers:
    """The C answers of a batch receiver (mixed into :class:`hosts.fastpath.BatchReceiver`,
    which sets the attributes below)."""

    #: `bad` of a probe C answers (:meth:`answer`), of one it left to the caller, and of one whose
    #: answer (flagged *last*) completed its message.
    ANSWERED, LEFT, ANSWERED_LAST = 2, 3, 4
    #: `bad` of a data packet whose run C placed in its registered message (:meth:`absorbed`).
    PLACED = 5
    #: Open messages whose probes C answers at once (hosts/answers.c).
    ANSWER_SLOTS = 256
    #: Messages completed with every element whose later probes C answers (the latest ones).
    DONE_SLOTS = 128

    nat: Any
    answers: Any  # struct gfh_answers * (None: off)
    hint: Any
    buf: Any
    off: Any
    src_ip: Any
    src_port: Any
    view: memoryview
    fd: int
    _c: tuple[Any, ...]
    _hinted: tuple[Any, Any] | None
    _free: list[int]
    _owners: list[Any]
    _done_keys: list[Any]
    _members: list[dict[int, tuple[str, int]]]

    def address(self, ip: int, port: int) -> tuple[str, int]:
        raise NotImplementedError

    def marked(self) -> int:
        """Probes of the last batch that C will answer (:meth:`answer`), flagged ANSWERED in `bad`."""
        return int(self.answers.marked) if self.answers is not None else 0

    def register(self, i: int, tensor_len: int, arrays: tuple[Any, Any, Any], mark: int, mode: int,
                 allowed: int = 0, received: int = 0, owner: Any = None) -> int | None:
        """Let C answer the probes of the message of data packet `i` of the batch (its source and
        header's job, worker, tensor, iteration and kind) from its packet map, and place its later
        runs (:meth:`absorbed`): `arrays` its values, element and packet maps (C pointers, alive until
        :meth:`forget`), where `mark` means arrived, placed in gfh_place's `mode`; `received` of its
        elements arrived (:meth:`set_received` keeps it current), `allowed` missing ones within its
        bound (a probe flagged *last* completes it then: :meth:`completed` gives `owner` back). Its
        slot; None when off or full."""
        a = self.answers
        if a is None or not self._free:
            return None
        k = heapq.heappop(self._free)
        e = a.e[k]
        o = int(self.off[i])
        e.values, e.have, e.seqs = arrays
        e.src_ip, e.src_port, e.tensor_len = int(self.src_ip[i]), int(self.src_port[i]), tensor_len
        e.received, e.allowed, e.mode = received, allowed, mode
        self.nat.ffi.memmove(e.key, self.view[o + 2:o + 12], 10)
        e.kind, e.echo, e.left, e.mark = int(self.buf[o]) & 0x0F, 0, 0, mark
        e.used = 1
        self._owners[k] = owner
        if k >= a.top:
            a.top = k + 1
        return k

    def forget(self, slot: int) -> None:
        """C no longer answers for the message in `slot` (it completed or was given up)."""
        a = self.answers
        assert a is not None
        a.e[slot].used = 0
        self._owners[slot] = None
        heapq.heappush(self._free, slot)
        while a.top and not a.e[a.top - 1].used:
            a.top -= 1

    def set_received(self, slot: int, received: int) -> None:
        """`received` elements of the message in `slot` arrived."""
        assert self.answers is not None
        self.answers.e[slot].received = received

    def owe_echo(self, slot: int, owed: bool) -> None:
        """The message in `slot` owes an ECN echo (its next answer carries it) or not."""
        assert self.answers is not None
        self.answers.e[slot].echo = int(owed)

    def echo_owed(self, slot: int) -> bool:
        """Whether the message in `slot` owes an ECN echo."""
        assert self.answers is not None
        return bool(self.answers.e[slot].echo)

    def register_done(self, i: int | None, tensor_len: int, key: Any, entry: int = -1) -> tuple[int, Any, bool] | None:
        """Let C answer the later probes of `key`, the message of data packet `i` of the batch (None:
        of open entry `entry`), which completed with all `tensor_len` elements (flagged LAST, every
        bit set). (Its slot, the key whose entry that slot held before or None, and whether that one
        owed an echo); None when off."""
        a = self.answers
        if a is None:
            return None
        k = a.dnext
        old, echo = self._done_keys[k], bool(a.d[k].used and a.d[k].echo)
        c = self._c
        slot = (self.nat.lib.gfh_done(a, c[0], c[1], c[3], c[4], i, tensor_len) if i is not None else
                self.nat.lib.gfh_done_entry(a, entry))
        self._done_keys[slot] = key
        return slot, old, echo

    def forget_done(self, slot: int, key: Any) -> bool:
        """C no longer answers for `key` in done entry `slot` (if it still holds it); whether it owed an echo."""
        a = self.answers
        assert a is not None
        if self._done_keys[slot] != key:
            return False
        self._done_keys[slot] = None
        a.d[slot].used = 0
        return bool(a.d[slot].echo)

    def done_echo(self, slot: int, owed: bool) -> None:
        """The completed message in done entry `slot` owes an ECN echo or not."""
        assert self.answers is not None
        self.answers.d[slot].echo = int(owed)

    def done_echo_owed(self, slot: int) -> bool:
        assert self.answers is not None
        return bool(self.answers.d[slot].echo)

    def members_changed(self, peers: dict[int, tuple[str, int]]) -> None:
        """The job's membership is now `peers` (worker id -> address; thread-safe): before its next
        answers, C leaves to Python the probes of registered messages whose source is not their
        worker's member address (Python drops them as from an unknown peer)."""
        self._members.append(peers)

    def _apply_members(self) -> None:
        a = self.answers
        assert a is not None
        while self._members:
            peers = self._members.pop(0)
            for e in [a.e[k] for k in range(a.top)] + [a.d[k] for k in range(self.DONE_SLOTS)]:
                if e.used and peers.get((e.key[2] << 8) | e.key[3]) != self.address(e.src_ip, e.src_port):
                    e.left = 1

    def answer(self, n: int) -> tuple[int, int, int, int]:
        """Answer the probes of packets 0..n-1 flagged ANSWERED, all in one sendmmsg: (answered,
        left, failed, echoed). Those left (flagged LEFT: message gone, its source no longer the
        member's, shape disagrees) are the caller's to handle as any probe; those whose answer
        completed their message are flagged ANSWERED_LAST (:meth:`completed`)."""
        a = self.answers
        assert a is not None
        if self._members:
            self._apply_members()
        c = self._c
        self.nat.lib.gfh_answer(self.fd, c[0], c[1], c[2], c[3], c[4], c[7], n, a)
        return int(a.answered), int(a.left), int(a.failed), int(a.echoed)

    def completed(self) -> list[Any]:
        """The owners of the messages the last :meth:`answer` completed (a probe flagged *last*
        within their bound), in the order of those probes."""
        a = self.answers
        assert a is not None
        return [self._owners[a.done[d]] for d in range(a.ndone)]


    def _absorb(self, n: int) -> None:
        """Place the batch's runs of registered messages in C (gfh_absorb; :meth:`absorbed`)."""
        a = self.answers
        if self._members:
            self._apply_members()  # a moved member's data go to Python (dropped there)
        if not a.top:
            a.nplaced = 0
            return
        c = self._c
        if self.nat.lib.gfh_absorb(a, c[0], c[1], c[2], c[3], c[4], c[5], c[7], c[8], n, self.hint):
            if self.hint.values == self.nat.ffi.NULL:
                self._hinted = None
            elif a.hinted >= 0:
                owner = self._owners[a.hinted]
                self._hinted = (owner, owner.cptrs)

    def placed(self) -> int:
        """Packets of the last batch C placed in registered messages (flagged PLACED in `bad`)."""
        return int(self.answers.nplaced) if self.answers is not None else 0

    def absorbed(self) -> tuple[tuple[int, ...], list[tuple[Any, int]], list[tuple[Any, int]]]:
        """Of the packets C placed in the last batch: (data packets, duplicates, out of bounds, bad
        payload, late, CE-marked), each message it placed into with its elements received now, and
        the messages it completed with their slots (the C no longer answers for them)."""
        a = self.answers
        assert a is not None
        counts = (int(a.data), int(a.dup), int(a.oob), int(a.payload), int(a.late), int(a.ce))
        touched = [(self._owners[k], int(a.e[k].received)) for k in {int(a.touched[t]) for t in range(a.ntouched)}]
        full = [(self._owners[a.full[f]], int(a.full[f])) for f in range(a.nfull)]
        return counts, touched, full
