"""Values read straight into the message (``hosts/fastpath.c``, gfh_recv with a hint).

Once a run of a message has been placed in mode ``PLACE_AHEAD``, the next datagrams are read
with their header in a slot and their values where the message's next packets belong. Only
the packet expected there (source, header, offset, count, length) may stay; anything else
must end up whole in its slot as if read there, and a message's elements that held something
are never written. Checked at the level of one receiver and end to end through a relay that
loses, duplicates and reorders, with a stranger sending look-alike packets at the same
places.
"""

from __future__ import annotations

import select
import socket
import time
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest

from hosts import fastpath
from hosts.endpoint import Endpoint
from hosts.fastpath import PLACE_AHEAD, R_RECEIVED, R_USED, BatchReceiver, native
from hosts.messages import Delivered
from hosts.packetize import packetize
from hosts.relay import Relay, random_impairment
from hosts.wire import MsgType

NAT = native()
pytestmark = pytest.mark.skipif(NAT is None, reason="the C data path cannot be built here (hosts.fastpath log)")
COUNT = 16_000  # values per packet: more than half a 64 kB slot, so one packet per datagram


class _Owner:
    """What a hint needs of its message: ``cptrs`` stays set while the message is open."""

    def __init__(self, cptrs: object) -> None:
        self.cptrs = cptrs


def _pair() -> tuple[socket.socket, socket.socket, socket.socket]:
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 23)
    rx.setsockopt(socket.IPPROTO_IP, socket.IP_RECVTOS, 1)
    rx.bind(("127.0.0.1", 0))
    return rx, socket.socket(socket.AF_INET, socket.SOCK_DGRAM), socket.socket(socket.AF_INET, socket.SOCK_DGRAM)


def _receive(rx: BatchReceiver, sock: socket.socket, want: int) -> int:
    assert select.select([sock], [], [], 10)[0], "nothing arrived on loopback"
    n = 0
    deadline = time.monotonic() + 10
    while n < want and time.monotonic() < deadline:  # loopback queues a datagram before sendto returns
        n = rx.recv()
    return n


def test_only_the_packet_expected_stays_in_place_and_others_arrive_whole() -> None:
    assert NAT is not None
    values = np.random.default_rng(1).standard_normal(8 * COUNT, dtype=np.float32)
    batch = packetize(values, kind=MsgType.GRADIENT, job_id=1, worker_id=1, tensor_id=2, iteration=3, count=COUNT)
    other = packetize(-values, kind=MsgType.GRADIENT, job_id=1, worker_id=1, tensor_id=2, iteration=3, count=COUNT)
    sock, tx, stranger = _pair()
    try:
        rx = BatchReceiver(NAT, sock)
        msg = np.full(values.size, np.nan, dtype=np.float32)
        have, seqs = bytearray(values.size), bytearray(values.size)
        arrays = (NAT.ptr(msg), NAT.ptr(have), NAT.ptr(seqs))
        owner = _Owner(arrays)
        dest = sock.getsockname()
        # packets 0 and 1 arrive through the slots and set the hint: next is packet 2
        for k in (0, 1):
            tx.sendto(batch.packet(k), dest)
        n = _receive(rx, sock, 2)
        assert n == 2 and not rx.pay[:n].any()
        res = rx.place(0, n, values.size, arrays, 0, PLACE_AHEAD, 1, owner=owner)
        assert int(res[R_USED]) == 2 and int(res[R_RECEIVED]) == 2 * COUNT
        # expected: 2, 3; then packet 5 where 4 was expected and the stranger's look-alike of 6
        # where 5 was; 6 and 7 come where they were expected again (places count from the hint)
        tx.sendto(batch.packet(2), dest)
        tx.sendto(batch.packet(3), dest)
        tx.sendto(batch.packet(5), dest)
        stranger.sendto(other.packet(6), dest)
        tx.sendto(batch.packet(6), dest)
        tx.sendto(batch.packet(7), dest)
        n = _receive(rx, sock, 6)
        assert n == 6
        base = msg.ctypes.data
        assert [int(p) for p in rx.pay[:n]] == [base + k * COUNT * 4 for k in (2, 3)] + [0, 0] + [
            base + k * COUNT * 4 for k in (6, 7)]
        assert bytes(rx.packet(2)) == bytes(batch.packet(5))  # whole in their slots, byte for byte
        assert bytes(rx.packet(3)) == bytes(other.packet(6))
        assert rx.run_end(0, n) == 3 and rx.run_end(3, n) == 4 and rx.run_end(4, n) == 6
        received = 2 * COUNT
        for i, j in ((0, 3), (4, 6)):  # the stranger's run is dropped by its receiver (unknown peer)
            res = rx.place(i, j, values.size, arrays, received, PLACE_AHEAD, 1, owner=owner)
            assert int(res[R_USED]) == j
            received += int(res[R_RECEIVED])
        assert received == 7 * COUNT
        arrived = np.frombuffer(have, np.uint8) == 1
        assert not arrived[4 * COUNT:5 * COUNT].any() and arrived[:4 * COUNT].all() and arrived[5 * COUNT:].all()
        np.testing.assert_array_equal(msg[arrived], values[arrived])
    finally:
        for s in (sock, tx, stranger):
            s.close()


def test_a_lone_packet_a_place_that_holds_something_and_a_completed_message_are_not_read_into() -> None:
    assert NAT is not None
    values = np.arange(4 * COUNT, dtype=np.float32)
    batch = packetize(values, kind=MsgType.GRADIENT, job_id=1, worker_id=1, tensor_id=2, iteration=3, count=COUNT)
    sock, tx, _unused = _pair()
    _unused.close()
    try:
        rx = BatchReceiver(NAT, sock)
        msg = np.zeros(values.size, dtype=np.float32)
        have, seqs = bytearray(values.size), bytearray(values.size)
        arrays = (NAT.ptr(msg), NAT.ptr(have), NAT.ptr(seqs))
        owner = _Owner(arrays)
        dest = sock.getsockname()
        tx.sendto(batch.packet(0), dest)
        rx.place(0, _receive(rx, sock, 1), values.size, arrays, 0, PLACE_AHEAD, 1, owner=owner)
        tx.sendto(batch.packet(1), dest)  # expected, but alone in its batch: handled from its slot
        n = _receive(rx, sock, 1)
        assert n == 1 and rx.pay[0] == 0 and bytes(rx.packet(0)) == bytes(batch.packet(1))
        have[COUNT:COUNT + 1] = b"\x01"  # the place of packet 1 holds something (one element is enough)
        msg[COUNT:2 * COUNT] = 42.0
        tx.sendto(batch.packet(1), dest)
        tx.sendto(batch.packet(2), dest)
        n = _receive(rx, sock, 2)
        assert n == 2 and not rx.pay[:n].any()  # nor the next one: the batch is read into its slots
        assert (msg[COUNT:2 * COUNT] == 42.0).all()
        assert bytes(rx.packet(0)) == bytes(batch.packet(1)) and bytes(rx.packet(1)) == bytes(batch.packet(2))
        owner.cptrs = None  # the message completed elsewhere (a last-flagged probe)
        before = msg.copy()
        tx.sendto(batch.packet(1), dest)
        tx.sendto(batch.packet(2), dest)
        n = _receive(rx, sock, 2)
        assert n == 2 and not rx.pay[:n].any()
        np.testing.assert_array_equal(msg, before)  # a delivered array is never written again
    finally:
        sock.close()
        tx.close()


def _transfer(monkeypatch: pytest.MonkeyPatch, bound: float, relayed: bool) -> tuple[list[np.ndarray],
                                                                                       list[Delivered], int, int]:
    """Six messages of 10 to 16 packets, two in flight, a stranger's look-alikes of each sent
    to the receiver first; through a relay that loses, duplicates and reorders, or direct."""
    read_in_place = [0]
    recv = BatchReceiver.recv

    def counting(self: BatchReceiver) -> int:
        n = recv(self)
        read_in_place[0] += int(np.count_nonzero(self.pay[:n]))
        return n

    monkeypatch.setattr(fastpath.BatchReceiver, "recv", counting)
    # 4 datagrams per recvmmsg: a message spans several batches however late the receiver reads
    monkeypatch.setattr(fastpath.BatchReceiver, "SLOTS", 4)
    bounds = {MsgType.GRADIENT: bound, MsgType.PARAMETER: bound}
    tensors = [np.random.default_rng(i).standard_normal(150_000 + 17_000 * i, dtype=np.float32) for i in range(6)]
    sender = Endpoint(worker_id=1, bounds=bounds, count=None)
    receiver = Endpoint(worker_id=2, bounds=bounds, count=None)
    stranger = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    got: list[Delivered] = []
    impairment = random_impairment(loss=0.05, duplicate=0.1, seed=5) if relayed else None
    with sender, receiver, Relay(receiver.address, impairment, hold=3 if relayed else 1, record=False) as relay:
        receiver.add_peer(1, relay.source if relayed else sender.address)
        target = relay.address if relayed else receiver.address
        futures: list[Future] = []
        for i, values in enumerate(tensors):  # two in flight, their chunks interleaved
            forged = packetize(-values, kind=MsgType.GRADIENT, job_id=1, worker_id=1, tensor_id=0, iteration=i,
                               count=sender.count)
            for k in range(len(forged)):  # look-alikes at the very places, from a stranger
                stranger.sendto(forged.packet(k), receiver.address)
            futures.append(sender.send_async(target, values, iteration=i))
            if len(futures) >= 2:
                futures.pop(0).result(timeout=60)
        for f in futures:
            f.result(timeout=60)
        got = [receiver.receive(timeout=30) for _ in tensors]
        unknown = receiver.reassembler.stats.drops["unknown_peer"]
    stranger.close()
    got.sort(key=lambda d: d.key.iteration)
    return tensors, got, unknown, read_in_place[0]


@pytest.mark.parametrize(("bound", "relayed"), [(0.0, True), (0.1, True), (0.0, False)])
def test_messages_read_in_place_through_loss_duplicates_reordering_and_look_alikes(
        bound: float, relayed: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Through the relay, datagrams may well reach the receiver one at a time (then none is
    read in place); sent direct, a sender's bursts queue and most are."""
    tensors, got, unknown, in_place = _transfer(monkeypatch, bound, relayed)
    assert unknown > 0, "the stranger's datagrams did not reach the receiver"
    if not relayed:
        assert in_place > 0, "no packet was read in place: the path under test did not run"
    assert [d.key.iteration for d in got] == list(range(len(tensors)))
    for values, d in zip(tensors, got):
        lost = np.zeros(values.size, dtype=bool)
        if d.lost is not None:
            lost[d.lost] = True
        np.testing.assert_array_equal(d.values[~lost], values[~lost])  # nothing forged, nothing stray
        assert (d.values[lost] == 0).all()  # what never arrived reads 0
        assert int(lost.sum()) <= bound * values.size
        if bound == 0:
            assert not lost.any()


@contextmanager
def _after_large_packets() -> Iterator[tuple[BatchReceiver, socket.socket, socket.socket]]:
    """A batch receiver on a loopback socket, and a socket sending to it; the receiver has read
    two large packets of another message and placed nothing (no hint)."""
    assert NAT is not None
    sock, tx, unused = _pair()
    unused.close()
    try:
        rx = BatchReceiver(NAT, sock)
        rx.hint.peek = 0  # the batch sizes set in Python (with the peek of hosts/ahead.c: test_hosts_ahead.py)
        earlier = packetize(np.ones(2 * COUNT, dtype=np.float32), kind=MsgType.GRADIENT, job_id=1, worker_id=1,
                            tensor_id=1, iteration=1, count=COUNT)
        for k in (0, 1):
            tx.sendto(earlier.packet(k), sock.getsockname())
        assert _receive(rx, sock, 2) == 2
        yield rx, sock, tx
    finally:
        sock.close()
        tx.close()


def _message(seed: int, packets: int) -> tuple[np.ndarray, Any, np.ndarray, Any, _Owner]:
    """`packets` packets' worth of values, their packets, and an empty message to rebuild them in
    (its array, its C pointers, the hint's owner)."""
    assert NAT is not None
    values = np.random.default_rng(seed).standard_normal(packets * COUNT, dtype=np.float32)
    batch = packetize(values, kind=MsgType.GRADIENT, job_id=1, worker_id=1, tensor_id=2, iteration=seed,
                      count=COUNT)
    msg = np.full(values.size, np.nan, dtype=np.float32)
    arrays = (NAT.ptr(msg), NAT.ptr(bytearray(values.size)), NAT.ptr(bytearray(values.size)))
    return values, batch, msg, arrays, _Owner(arrays)


def _place_all(rx: BatchReceiver, sock: socket.socket, values: np.ndarray, arrays: Any,
               owner: _Owner) -> tuple[list[int], list[int]]:
    """Receive and place batches until the message is complete, each packet left in place checked
    to lie where its header says; (each batch's datagrams, how many of them were in place)."""
    base = int(NAT.ffi.cast("uintptr_t", arrays[0])) if NAT is not None else 0
    received, sizes, in_place = 0, [], []
    while received < values.size:
        n = _receive(rx, sock, 1)
        sizes.append(n)
        in_place.append(int(np.count_nonzero(rx.pay[:n])))
        for i in range(n):
            if rx.pay[i]:
                assert int(rx.pay[i]) == base + int.from_bytes(bytes(rx.packet(i)[12:16]), "big") * 4
        received += int(rx.place(0, n, values.size, arrays, received, PLACE_AHEAD, 1, owner=owner)[R_RECEIVED])
    return sizes, in_place


def test_a_new_message_after_large_packets_is_read_in_short_batches_then_in_place_at_its_offsets() -> None:
    """With no hint after a batch of large packets, a new message's first run is one short batch
    (``AHEAD_SLOTS``), copied from the slots; its next packets are read where they belong, two
    swapped ones are not (each is the other's place), and every value ends at its own offset."""
    ahead = BatchReceiver.AHEAD_SLOTS
    total = 2 * ahead + 4
    values, batch, msg, arrays, owner = _message(3, total)
    with _after_large_packets() as (rx, sock, tx):
        swapped = ahead + 4  # sent after its neighbour
        order = list(range(total))
        order[swapped], order[swapped + 1] = order[swapped + 1], order[swapped]
        for k in order:
            tx.sendto(batch.packet(k), sock.getsockname())
        sizes, in_place = _place_all(rx, sock, values, arrays, owner)
    assert sizes == [ahead, ahead, total - 2 * ahead]
    assert in_place == [0, ahead - 2, total - 2 * ahead], "the first batch into the slots; the swapped pair not in place"
    assert msg.tobytes() == values.tobytes()  # every datagram at its own offset, byte for byte


def test_batches_read_wholly_in_place_grow_and_a_misplaced_packet_shrinks_them() -> None:
    """A full batch of a hinted message read wholly in place doubles the next batch's datagrams;
    a packet not read in place brings it back to ``AHEAD_SLOTS``; the values end at their offsets."""
    ahead = BatchReceiver.AHEAD_SLOTS
    total = 5 * ahead
    values, batch, msg, arrays, owner = _message(5, total)
    with _after_large_packets() as (rx, sock, tx):
        order = list(range(total))
        late = 3 * ahead + 1  # comes after the whole 16-datagram batch: that batch's second place is another's
        order.remove(late)
        order.append(late)
        for k in order:
            tx.sendto(batch.packet(k), sock.getsockname())
        sizes, in_place = _place_all(rx, sock, values, arrays, owner)
    # 8 into the slots (no hint yet), 8 in place, then 16 of which the second is not where expected
    assert sizes[:3] == [ahead, ahead, 2 * ahead] and in_place[:2] == [0, ahead]
    assert 0 < in_place[2] < 2 * ahead
    # back to 8, and no more than the 7 packets after the last one placed (the late one comes last)
    assert sizes[3] == min(ahead, total - (4 * ahead + 1)), "a packet not read in place shrinks the next batch"
    assert msg.tobytes() == values.tobytes()


def test_a_hinted_batch_ends_with_its_message_and_the_next_message_starts_a_short_batch() -> None:
    """After 8 and 8 read wholly in place (the next batch may take 16), a message with 5 packets
    left is read in a batch of 5, though the next message's packets are queued behind them."""
    ahead = BatchReceiver.AHEAD_SLOTS
    total = 2 * ahead + 5
    values, batch, msg, arrays, owner = _message(6, total)
    _next_values, nxt, _msg, _arrays, _owner = _message(7, 3 * ahead)
    with _after_large_packets() as (rx, sock, tx):
        for k in range(total):
            tx.sendto(batch.packet(k), sock.getsockname())
        for k in range(3 * ahead):
            tx.sendto(nxt.packet(k), sock.getsockname())
        sizes, _in_place = _place_all(rx, sock, values, arrays, owner)
        assert sizes == [ahead, ahead, 5], sizes
        assert msg.tobytes() == values.tobytes()
        owner.cptrs = None  # complete: no hint; the batch before had large packets
        n = _receive(rx, sock, 1)
        assert n == ahead and not rx.pay[:n].any()
        assert bytes(rx.packet(0)) == bytes(nxt.packet(0))
