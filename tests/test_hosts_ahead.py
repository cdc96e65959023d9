"""The peek before a batch (``hosts/ahead.c``): which message the next datagram is of.

With two messages in flight their runs alternate; a batch that starts with the other registered
message's packet is read into that message (the hint pointed there), not into the slots; a batch
that starts with a message nothing is registered for is short, so the message is opened and its
next packets are read in place. Checked on one receiver over loopback, with each value at its
own offset, and with the peek turned off (``GRADFABRIC_C_AHEAD=0``).
"""

from __future__ import annotations

import logging
import select
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest

from hosts import fastpath
from hosts.fastpath import PLACE_AHEAD, BatchReceiver, native
from hosts.packetize import PacketBatch, packetize
from hosts.wire import MsgType

NAT = native()
pytestmark = pytest.mark.skipif(NAT is None, reason="the C data path cannot be built here (hosts.fastpath log)")
COUNT = 16_000  # values per packet: more than half a 64 kB slot, so one packet per datagram


class _Message:
    """A message's values, its packets and an empty array (with its maps) to rebuild it in."""

    def __init__(self, seed: int, packets: int) -> None:
        assert NAT is not None
        self.values = np.random.default_rng(seed).standard_normal(packets * COUNT, dtype=np.float32)
        self.batch: PacketBatch = packetize(self.values, kind=MsgType.GRADIENT, job_id=1, worker_id=1,
                                            tensor_id=seed, iteration=1, count=COUNT)
        self.msg = np.full(self.values.size, np.nan, dtype=np.float32)
        self.have, self.seqs = bytearray(self.values.size), bytearray(self.values.size)
        self.cptrs: Any = (NAT.ptr(self.msg), NAT.ptr(self.have), NAT.ptr(self.seqs))


@contextmanager
def _loopback() -> Iterator[tuple[socket.socket, socket.socket]]:
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 23)
    rx.setsockopt(socket.IPPROTO_IP, socket.IP_RECVTOS, 1)
    rx.bind(("127.0.0.1", 0))
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        yield rx, tx
    finally:
        rx.close()
        tx.close()


def _receive(rx: BatchReceiver, sock: socket.socket) -> int:
    """The next batch (loopback queues a datagram before sendto returns)."""
    assert select.select([sock], [], [], 10)[0], "nothing arrived on loopback"
    return rx.recv()


def _open(rx: BatchReceiver, m: _Message, n: int) -> int:
    """Register message `m` (its first packet is the batch's first) and place the batch's `n` packets
    in mode PLACE_AHEAD, as hosts/batchruns.py does for a message's first run; its slot."""
    slot = rx.register(0, m.values.size, m.cptrs, 1, PLACE_AHEAD, 0, 0, m)
    assert slot is not None
    received = int(rx.place(0, n, m.values.size, m.cptrs, 0, PLACE_AHEAD, 1, owner=m)[fastpath.R_RECEIVED])
    rx.set_received(slot, received)
    return slot


def _send(tx: socket.socket, sock: socket.socket, m: _Message, packets: range) -> None:
    for k in packets:
        tx.sendto(m.batch.packet(k), sock.getsockname())


def test_a_batch_of_the_other_registered_message_is_read_into_it_at_its_offsets() -> None:
    """A and B registered, the hint at B: A's next packets are read straight into A (the hint
    pointed there, A's owner kept), each value at its offset; with the peek off they come
    through the slots (read into B's places, copied back)."""
    assert NAT is not None
    for peek in (1, 0):
        a, b = _Message(3, 8), _Message(4, 8)
        with _loopback() as (sock, tx):
            rx = BatchReceiver(NAT, sock)
            rx.hint.peek = peek
            _send(tx, sock, a, range(2))
            n = _receive(rx, sock)
            slot_a = _open(rx, a, n)
            _send(tx, sock, b, range(2))
            n = _receive(rx, sock)
            assert n == 2 and rx.placed() == 0
            _open(rx, b, n)
            assert rx._hinted is not None and rx._hinted[0] is b  # the hint at B's next packet
            _send(tx, sock, a, range(2, 6))
            n = _receive(rx, sock)
            assert n == 4 and rx.placed() == 4  # A's run placed by the C as it was received
            if peek:
                assert rx.hint.entry == slot_a and rx._hinted is not None and rx._hinted[0] is a
                assert np.count_nonzero(rx.pay[:n]) == 4, "read where A's packets belong"
                base = int(NAT.ffi.cast("uintptr_t", a.cptrs[0]))
                assert [int(p) for p in rx.pay[:n]] == [base + 4 * COUNT * k for k in range(2, 6)]
            else:
                assert rx.hint.entry == -1 and not rx.pay[:n].any()
            assert a.msg[:6 * COUNT].tobytes() == a.values[:6 * COUNT].tobytes()
            assert np.isnan(a.msg[6 * COUNT:]).all()
            assert b.msg[:2 * COUNT].tobytes() == b.values[:2 * COUNT].tobytes()
            # without the peek A's values were read into B's empty places first (then copied back)
            assert np.isnan(b.msg[2 * COUNT:]).all() == bool(peek)


def test_a_message_nothing_is_registered_for_starts_with_a_short_batch() -> None:
    """Ten queued packets of a message C knows nothing of: the first batch is FIRST_SLOTS (2),
    without the peek all ten; once it is registered the rest is read in place."""
    assert NAT is not None
    for peek, first in ((1, 2), (0, 10)):
        m = _Message(5, 10)
        with _loopback() as (sock, tx):
            rx = BatchReceiver(NAT, sock)
            rx.hint.peek = peek
            _send(tx, sock, m, range(10))
            n = _receive(rx, sock)
            assert n == first and not rx.pay[:n].any()
            _open(rx, m, n)
            if peek:
                n = _receive(rx, sock)
                assert n == 8 and rx.placed() == 8 and np.count_nonzero(rx.pay[:n]) == 8
            assert m.msg.tobytes() == m.values.tobytes()


def test_no_peek_after_a_batch_of_small_packets() -> None:
    """After a batch of packets too small to be read in place (the 1,500-byte MTU's), the next batch
    is read without the peek's syscall: a new message's ten large packets come in one batch."""
    assert NAT is not None
    small = packetize(np.ones(4 * 361, dtype=np.float32), kind=MsgType.GRADIENT, job_id=1, worker_id=1,
                      tensor_id=9, iteration=1, count=361)
    m = _Message(6, 10)
    with _loopback() as (sock, tx):
        rx = BatchReceiver(NAT, sock)
        for k in range(4):
            tx.sendto(small.packet(k), sock.getsockname())
        assert _receive(rx, sock) == 4 and rx.hint.maxlen == 28 + 4 * 361  # small: never capped
        _send(tx, sock, m, range(10))
        assert _receive(rx, sock) == 10, "no peek: the batch is not capped for a new message"
        assert rx.hint.maxlen == 28 + 4 * COUNT
        other = _Message(7, 10)
        _send(tx, sock, other, range(10))
        assert _receive(rx, sock) == 2, "after large packets the peek is back"


def test_the_peek_off_says_why_once(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    assert NAT is not None
    monkeypatch.setenv("GRADFABRIC_C_AHEAD", "0")
    monkeypatch.setattr(fastpath, "_said_off", set())
    with caplog.at_level(logging.INFO, logger="hosts.fastpath"), _loopback() as (sock, _tx):
        rxs = [BatchReceiver(NAT, sock), BatchReceiver(NAT, sock)]
    assert [r.hint.peek for r in rxs] == [0, 0]
    assert [r.message for r in caplog.records].count(
        "hosts data path: no peek at the next datagram's message (GRADFABRIC_C_AHEAD=0)") == 1
    monkeypatch.setenv("GRADFABRIC_C_AHEAD", "1")
    with _loopback() as (sock, _tx):
        assert BatchReceiver(NAT, sock).hint.peek == 1
        assert BatchReceiver(NAT, sock, answers=False).hint.peek == 0  # nothing registered to point at
