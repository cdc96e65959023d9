"""Probes answered in C (``hosts/answers.c``) against the Python path: the same datagrams, the
same answers, values and accounting.

Three levels: seeded streams of data, chunk probes (some too wide, out of bounds, of another
length, from a stranger, about unknown or completed messages, after CE-marked data) and
malformed datagrams go through :meth:`Reassembler.handle` one by one and through the batch
receiver's loop (:func:`hosts.rxloop.handle_batch`) with C answering: batches that end at each
probe give byte-identical answers, batches cut anywhere give the same values and counts; and
whole transfers through :class:`hosts.relay.Relay` (loss, duplicates, reordering, CE marks, a
forger) on a 22-packet window, C answering on and off and the Python path, deliver the same
values and the senders report what the receivers zero-filled.
"""

from __future__ import annotations

import random
import socket
from collections import Counter
from typing import Any

import numpy as np
import pytest

from hosts.endpoint import Endpoint
from hosts.fastpath import BatchReceiver, native
from hosts.inbox import Finals
from hosts.liveness import Liveness
from hosts.messages import Delivered
from hosts.packetize import packetize
from hosts.pacing import Window
from hosts.receiver import Reassembler
from hosts.relay import Relay, random_impairment
from hosts.rxloop import handle_batch
from hosts.wire import HEADER_LEN, Header, MsgType, pack_header, probe_length

NAT = native()
pytestmark = pytest.mark.skipif(NAT is None, reason="the C data path cannot be built here (hosts.fastpath log)")
BOUNDS = {MsgType.GRADIENT: 0.05, MsgType.PARAMETER: 0.0}
Datagram = tuple[bytes, int, int]  # data, index of the source socket, TOS byte


def _probe(worker: int, tensor: int, iteration: int, first: int, n: int, tensor_len: int, kind: int,
           nonce: int, last: bool = False, width: int | None = None) -> bytes:
    head = pack_header(Header(msg_type=MsgType.PROBE, flags=0x02 if last else 0, job_id=1, worker_id=worker,
                              tensor_id=tensor, iteration=iteration, offset=first, tensor_len=tensor_len,
                              count=nonce, mag_class=kind, prio_hint=0, seq=n))
    return head + bytes(max(0, (probe_length(n) if width is None else width) - HEADER_LEN))


def _stream(seed: int) -> tuple[list[Datagram], list[int], int]:
    """Datagrams of three messages from two sources (index 0 and 1; 2 is a stranger), in chunks
    each closed by a probe, shuffled within windows, with loss, duplicates, CE marks and odd
    probes; the indices of the probes, and how many chunks there are."""
    rng = random.Random(seed)
    out: list[Datagram] = []
    chunks = 0
    for worker, src, n, kind in ((1, 0, 5000, MsgType.GRADIENT), (2, 1, 3000, MsgType.PARAMETER),
                                 (1, 0, 2000, MsgType.GRADIENT)):
        values = np.random.default_rng(seed + n).standard_normal(n, dtype=np.float32)
        batch = packetize(values, kind=kind, job_id=1, worker_id=worker, tensor_id=n % 7, iteration=seed,
                          count=100)
        packets = [batch.packet(i) for i in range(len(batch))]
        tensor = n % 7
        for first in range(0, len(packets), 12):  # chunks of 12 packets
            chunk = list(range(first, min(first + 12, len(packets))))
            rng.shuffle(chunk)
            for i in chunk:
                if rng.random() < 0.04:
                    continue  # lost
                out.append((packets[i], src, 3 if rng.random() < 0.03 else 2))
                if rng.random() < 0.05:
                    out.append((packets[i], src, 2))  # duplicate
                if rng.random() < 0.02:
                    out.append((packets[i][:-4], src, 2))  # payload shorter than its count
            asked = len(chunk)
            chunks += 1
            nonce = rng.randrange(1, 60000)
            out.append((_probe(worker, tensor, seed, first, asked, n, int(kind), nonce), src, 2))
            r = rng.random()
            if r < 0.1:
                out.append((_probe(worker, tensor, seed, first, asked, n, int(kind), nonce + 1), 2, 2))  # stranger
            elif r < 0.2:  # asks about more packets than its size allows
                out.append((_probe(worker, tensor, seed, first, 400, n, int(kind), nonce, width=HEADER_LEN), src, 2))
            elif r < 0.3:  # past the message
                out.append((_probe(worker, tensor, seed, n - 2, 5, n, int(kind), nonce), src, 2))
            elif r < 0.4:  # another length than the message's
                out.append((_probe(worker, tensor, seed, first, asked, n + 1, int(kind), nonce), src, 2))
            elif r < 0.5:  # a message nothing arrived of
                out.append((_probe(worker, tensor + 1, seed, 0, asked, n, int(kind), nonce), src, 2))
            elif r < 0.55:  # a duplicate probe (answered twice)
                out.append(out[-1])
        out.append((_probe(worker, tensor, seed, 0, len(packets), n, int(kind), 7, last=True), src, 2))
        out.append((_probe(worker, tensor, seed, 0, 12, n, int(kind), 8), src, 2))  # after completion
        out.extend((p, src, 2) for p in packets[-5:])  # late
    probes = [k for k, (d, _s, _t) in enumerate(out) if len(d) >= HEADER_LEN and d[0] & 0x0F == MsgType.PROBE]
    return out, probes, chunks


class _Host:
    """What :func:`handle_batch` needs of an endpoint; Python's replies are kept per source."""

    def __init__(self, sources: list[tuple[str, int]]) -> None:
        self.reassembler = Reassembler(job_id=1, bounds=BOUNDS)
        self.liveness = Liveness(30.0)
        self._finals = Finals()
        self._last_rx = self._last_peer_rx = 0.0
        self.replies: dict[tuple[str, int], list[bytes]] = {s: [] for s in sources}
        self.delivered: list[Delivered] = []

    def _on_bitmap(self, data: Any, source: tuple[str, int], now: float) -> None:
        raise AssertionError("no bitmap is sent to the receiver here")

    def _reply(self, replies: list[bytes], source: tuple[str, int]) -> None:
        self.replies[source] += [bytes(r) for r in replies]

    def _deliver(self, delivered: list[Delivered]) -> None:
        self.delivered += delivered


def _sockets(n: int) -> list[socket.socket]:
    out = []
    for _ in range(n):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(("127.0.0.1", 0))
        s.setblocking(False)
        out.append(s)
    return out


def _drain(s: socket.socket) -> list[bytes]:
    got = []
    while True:
        try:
            got.append(s.recv(65536))
        except BlockingIOError:
            return got


def _run_python(stream: list[Datagram], sources: list[tuple[str, int]]) -> _Host:
    host = _Host(sources)
    for data, src, tos in stream:
        replies, done = host.reassembler.handle(data, sources[src], tos & 3 == 3)
        host._reply(replies, sources[src])
        host.delivered += done
    return host


def _run_c(stream: list[Datagram], cuts: list[int], sockets: list[socket.socket]) -> tuple[_Host, dict[Any, list]]:
    """The stream through the batch loop with C answering, batches ending before each index
    of `cuts`; the host and the answers each source received (Python's and C's)."""
    assert NAT is not None
    sources = [s.getsockname() for s in sockets]
    rx_sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx_sock.bind(("127.0.0.1", 0))
    rx = BatchReceiver(NAT, rx_sock, answers=True)
    host = _Host(sources)
    got: dict[Any, list[bytes]] = {s: [] for s in sources}
    bounds = sorted(set([0, len(stream)] + cuts))
    for lo, hi in zip(bounds, bounds[1:]):
        part = stream[lo:hi]
        n = rx.load([d for d, _, _ in part], [sources[s] for _, s, _ in part], [t for _, _, t in part],
                    absorb=True)
        handle_batch(host, rx, n)
        for s, addr in zip(sockets, sources):
            got[addr] += _drain(s)
    for addr in sources:
        got[addr] += host.replies[addr]
    rx_sock.close()
    return host, got


def _stats(r: Reassembler) -> dict[str, Any]:
    s = r.stats
    return {"data": s.data_packets, "dup": s.duplicates, "probes": s.probes, "bitmaps": s.bitmaps_sent,
            "ce": s.ce_marked, "echoes": s.ecn_echoes, "completed": s.completed, "drops": dict(s.drops)}


@pytest.mark.parametrize("seed", range(5))
def test_answers_in_c_are_the_python_answers_byte_for_byte(seed: int) -> None:
    """Batches end after each probe, so C answers a probe with what Python held when it did."""
    stream, probes, chunks = _stream(seed)
    sockets = _sockets(3)
    try:
        sources = [s.getsockname() for s in sockets]
        slow = _run_python(stream, sources)
        fast, got = _run_c(stream, [p + 1 for p in probes], sockets)
    finally:
        for s in sockets:
            s.close()
    assert fast.reassembler.stats.answered_in_c >= chunks // 2  # C answered most chunk probes
    assert fast.reassembler.stats.ecn_echoes > 0
    for addr in sources:
        assert Counter(got[addr]) == Counter(slow.replies[addr]), f"answers to {addr} differ"
    assert _stats(fast.reassembler) == _stats(slow.reassembler)
    assert [d.key for d in fast.delivered] == [d.key for d in slow.delivered]
    for a, b in zip(fast.delivered, slow.delivered):
        assert a.received == b.received
        np.testing.assert_array_equal(a.values, b.values)


@pytest.mark.parametrize("seed", range(5))
def test_batches_cut_anywhere_deliver_and_count_as_python(seed: int) -> None:
    """Batches cut at random places: a probe is answered once its batch is placed (possibly
    with later packets of that batch); values, zero-filling and every count agree."""
    stream, _probes, _chunks = _stream(seed)
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, len(stream)), len(stream) // 40))
    sockets = _sockets(3)
    try:
        sources = [s.getsockname() for s in sockets]
        slow = _run_python(stream, sources)
        fast, got = _run_c(stream, cuts, sockets)
    finally:
        for s in sockets:
            s.close()
    assert fast.reassembler.stats.answered_in_c > 0
    assert _stats(fast.reassembler) == _stats(slow.reassembler)
    for addr in sources:
        assert len(got[addr]) == len(slow.replies[addr])  # one answer per answered probe
    assert [(d.key, d.received) for d in fast.delivered] == [(d.key, d.received) for d in slow.delivered]
    for a, b in zip(fast.delivered, slow.delivered):
        np.testing.assert_array_equal(a.values, b.values)


def _transfer(fast: bool, seed: int, bound: float) -> tuple[list[np.ndarray], list[Delivered], list[Any], int]:
    bounds = {MsgType.GRADIENT: bound, MsgType.PARAMETER: bound}
    tensors = [np.random.default_rng([seed, i]).standard_normal(15_000 + 2_000 * i, dtype=np.float32)
               for i in range(5)]
    sender = Endpoint(worker_id=1, bounds=bounds, fast=fast, window=Window(cwnd=22, max_cwnd=22))
    receiver = Endpoint(worker_id=2, bounds=bounds, fast=fast)
    forger = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    got: list[Delivered] = []
    reports = []
    with sender, receiver, Relay(receiver.address, random_impairment(loss=0.04, duplicate=0.05, seed=seed),
                                 hold=6, record=False, mark_ce=lambda h: h.seq % 9 == 4) as relay:
        receiver.add_peer(1, relay.source)
        for i, values in enumerate(tensors):
            forged = packetize(-values, kind=MsgType.GRADIENT, job_id=1, worker_id=1, tensor_id=0, iteration=i)
            for k in range(0, len(forged), 3):  # a stranger claims to be worker 1
                forger.sendto(forged.packet(k), receiver.address)
            reports.append(sender.send(relay.address, values, iteration=i))
            got.append(receiver.receive(timeout=30))
        in_c = receiver.reassembler.stats.answered_in_c
    forger.close()
    return tensors, got, reports, in_c


@pytest.mark.parametrize("bound", [0.0, 0.05])
def test_transfers_through_loss_duplicates_reordering_and_forgery_agree(
        bound: float, monkeypatch: pytest.MonkeyPatch) -> None:
    """C answering, the C path with Python answering (``GRADFABRIC_C_ANSWERS=0``) and the Python
    path, on the same seeded impairments: nothing forged gets in, the loss stays within the bound,
    each sender reports what its receiver zero-filled, and at bound 0 the values are identical."""
    results = {"c answers": _transfer(True, 5, bound), "python": _transfer(False, 5, bound)}
    monkeypatch.setenv("GRADFABRIC_C_ANSWERS", "0")
    results["c, python answers"] = _transfer(True, 5, bound)
    assert results["c answers"][3] > 0, "C answered no probe"
    assert results["c, python answers"][3] == 0 and results["python"][3] == 0
    for path, (tensors, got, reports, _in_c) in results.items():
        assert [d.key.iteration for d in got] == list(range(len(tensors))), path
        for values, d, report in zip(tensors, got, reports):
            arrived = d.values != 0
            np.testing.assert_array_equal(d.values[arrived], values[arrived])  # nothing forged got in
            zero_filled = d.values.size - d.received
            assert zero_filled <= bound * values.size, path
            assert report.unconfirmed == 0 and report.missing == zero_filled, (path, report)
    if bound == 0:
        for path in ("c answers", "c, python answers"):
            for a, b in zip(results[path][1], results["python"][1]):
                np.testing.assert_array_equal(a.values, b.values)
