"""ECN-echo probes, probes flagged *last* and a member's moved address in the C answers
(``hosts/answers.c``), against the Python path.

Seeded streams where CE marks are frequent and a message's probes flagged last come while it
misses data (some within the bound, so the probe completes it, some not, then retransmissions
and another such probe) go through :meth:`Reassembler.handle` one datagram at a time and through
the batch loop with C answering: with batches ending at each probe the answers are the same
bytes, and the counts, the delivered values, what was zero-filled and the messages a closing
endpoint knows its senders were told of (:class:`hosts.inbox.Finals`) are the same; with batches
cut anywhere (data of a message after its probe in the same batch) the values and counts are.
Whole transfers through a relay marking CE on a 22-packet window show the C sending echoes and
completing messages. A member that moves (``Endpoint.add_peer``) while a message of it is open
no longer gets answers at its old address.
"""

from __future__ import annotations

import random
import socket
import time
from collections import Counter
from typing import Any

import numpy as np
import pytest

from hosts.endpoint import Endpoint
from hosts.fastpath import BatchReceiver, native
from hosts.messages import Delivered, MessageKey
from hosts.packetize import packetize
from hosts.pacing import Window
from hosts.relay import Relay, random_impairment
from hosts.rxloop import handle_batch
from hosts.wire import HEADER_LEN, HEADER_STRUCT, Flags, MsgType
from tests.test_hosts_c_answers import BOUNDS, Datagram, _drain, _Host, _probe, _sockets, _stats

NAT = native()
pytestmark = pytest.mark.skipif(NAT is None, reason="the C data path cannot be built here (hosts.fastpath log)")


def _stream(seed: int) -> tuple[list[Datagram], list[int]]:
    """Five messages from two sources (2 is a stranger) in chunks of 10 packets (two of lengths whose
    bound allows one element less than two packets), each closed by a probe, 10 % of the data
    CE-marked, 3-9 % lost (the fifth: none, so it completes with every element); then a probe
    flagged last (within the gradient bound of 0.05 or not), the lost packets again but two (the
    fourth message: but one, so it is then within its bound), another probe flagged last, a probe
    after completion, late CE-marked data and a probe after them. The indices of the probes."""
    rng = random.Random(seed)
    out: list[Datagram] = []
    for tensor, (worker, src, n, kind) in enumerate(((1, 0, 3990, MsgType.GRADIENT), (2, 1, 3995, MsgType.GRADIENT),
                                                     (1, 0, 2500, MsgType.PARAMETER), (2, 1, 6000, MsgType.GRADIENT),
                                                     (1, 0, 2000, MsgType.GRADIENT))):
        values = np.random.default_rng(seed + n).standard_normal(n, dtype=np.float32)
        batch = packetize(values, kind=kind, job_id=1, worker_id=worker, tensor_id=tensor, iteration=seed, count=100)
        packets = [batch.packet(i) for i in range(len(batch))]
        loss = rng.choice((0.03, 0.09)) if tensor < 3 else 0.09 if tensor == 3 else 0.0
        lost = []
        for first in range(0, len(packets), 10):
            chunk = list(range(first, min(first + 10, len(packets))))
            rng.shuffle(chunk)
            for i in chunk:
                if rng.random() < loss:
                    lost.append(i)
                    continue
                out.append((packets[i], src, 3 if rng.random() < 0.1 else 2))
                if rng.random() < 0.03:
                    out.append((packets[i], src, 2))  # duplicate
            out.append((_probe(worker, tensor, seed, first, len(chunk), n, int(kind), rng.randrange(1, 60000)), src, 2))
            if rng.random() < 0.1:  # a stranger's last probe
                out.append((_probe(worker, tensor, seed, 0, len(packets), n, int(kind), 3, last=True), 2, 2))
        out.append((_probe(worker, tensor, seed, 0, len(packets), n, int(kind), 11, last=True), src, 2))
        for i in lost[: max(0, len(lost) - (2 if tensor < 3 else 1))]:  # retransmitted, all but two (one)
            out.append((packets[i], src, 3 if rng.random() < 0.3 else 2))
        out.append((_probe(worker, tensor, seed, 0, len(packets), n, int(kind), 12, last=True), src, 2))
        out.append((_probe(worker, tensor, seed, 0, 10, n, int(kind), 13, last=True), src, 2))  # after completion
        out.extend((p, src, 3) for p in packets[:2])  # late, CE-marked
        out.append((_probe(worker, tensor, seed, 10, 10, n, int(kind), 14), src, 2))  # owes an echo
    probes = [k for k, (d, _s, _t) in enumerate(out) if len(d) >= HEADER_LEN and d[0] & 0x0F == MsgType.PROBE]
    return out, probes


class _FinalsHost(_Host):
    """A host whose Python answers are noted by its Finals, as Endpoint._reply does."""

    def _reply(self, replies: list[bytes], source: tuple[str, int]) -> None:
        super()._reply(replies, source)
        for reply in replies:
            self._finals.replied(reply, source, 1.0)


def _told(host: _Host) -> set[Any]:
    """The messages whose senders the host told (an answer flagged last), with their senders."""
    return {(key, e[0]) for key, e in host._finals._entries.items() if e[2]}


def _python(stream: list[Datagram], sources: list[tuple[str, int]]) -> _FinalsHost:
    return _python_with(_FinalsHost(sources), stream, sources)


def _python_with(host: _FinalsHost, stream: list[Datagram], sources: list[tuple[str, int]]) -> _FinalsHost:
    for data, src, tos in stream:
        replies, done = host.reassembler.handle(data, sources[src], tos & 3 == 3)
        host._reply(replies, sources[src])
        host.delivered += done
    return host


def _c(stream: list[Datagram], cuts: list[int], sockets: list[socket.socket], host: _FinalsHost | None = None,
       ) -> tuple[_FinalsHost, dict[Any, list], list[bytes]]:
    """The host (`host`, or a new one), the answers each source received, and those the C sent."""
    assert NAT is not None
    sources = [s.getsockname() for s in sockets]
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as rx_sock:
        rx_sock.bind(("127.0.0.1", 0))
        rx = BatchReceiver(NAT, rx_sock, answers=True)
        host = host or _FinalsHost(sources)
        got: dict[Any, list[bytes]] = {s: [] for s in sources}
        bounds = sorted(set([0, len(stream)] + cuts))
        for lo, hi in zip(bounds, bounds[1:]):
            part = stream[lo:hi]
            handle_batch(host, rx, rx.load([d for d, _, _ in part], [sources[s] for _, s, _ in part],
                                           [t for _, _, t in part], absorb=True))
            for s, addr in zip(sockets, sources):
                got[addr] += _drain(s)
    in_c = [r for addr in sources for r in got[addr]]
    for addr in sources:
        got[addr] += host.replies[addr]
    return host, got, in_c


def _same_messages(a: list[Delivered], b: list[Delivered]) -> None:
    assert [(d.key, d.received) for d in a] == [(d.key, d.received) for d in b]
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x.values, y.values)
        np.testing.assert_array_equal(x.lost if x.lost is not None else [], y.lost if y.lost is not None else [])


@pytest.mark.parametrize("seed", range(6))
def test_echoes_and_last_probes_in_c_are_the_python_answers_byte_for_byte(seed: int) -> None:
    stream, probes = _stream(seed)
    sockets = _sockets(3)
    try:
        sources = [s.getsockname() for s in sockets]
        slow = _python(stream, sources)
        fast, got, in_c = _c(stream, [p + 1 for p in probes], sockets)
    finally:
        for s in sockets:
            s.close()
    stats = fast.reassembler.stats
    assert stats.echoes_in_c > 0 and stats.completed_in_c > 0 and stats.placed_in_c > 0, stats
    finals = [r for r in in_c if r[1] & Flags.LAST]  # completing answers, and those of completed messages
    assert len(finals) > stats.completed_in_c
    assert sum(r[7] == 4 for r in finals) == 5  # the fifth message (complete): its last chunk probe and 4 after
    assert any(r[1] & Flags.ECN_ECHO for r in finals)  # an echo owed after completion, sent by the C
    assert stats.echoes_in_c == stats.ecn_echoes - Counter(  # every echo but those after completion in C
        r[1] & Flags.ECN_ECHO != 0 for rs in fast.replies.values() for r in rs)[True]
    for addr in sources:
        assert Counter(got[addr]) == Counter(slow.replies[addr]), f"answers to {addr} differ"
    assert _stats(fast.reassembler) == _stats(slow.reassembler)
    _same_messages(fast.delivered, slow.delivered)
    assert _told(fast) == _told(slow) and _told(fast)


@pytest.mark.parametrize("seed", range(6))
def test_batches_cut_anywhere_count_and_deliver_as_python(seed: int) -> None:
    """Data of a message after its probe in one batch: the C answers no probe whose answer they
    would change (a last one's completion, an echo), so the counts (late data included) agree."""
    stream, _probes = _stream(seed)
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, len(stream)), len(stream) // 12))
    sockets = _sockets(3)
    try:
        sources = [s.getsockname() for s in sockets]
        slow = _python(stream, sources)
        fast, got, _in_c = _c(stream, cuts, sockets)
    finally:
        for s in sockets:
            s.close()
    assert fast.reassembler.stats.answered_in_c > 0 and fast.reassembler.stats.placed_in_c > 0
    assert _stats(fast.reassembler) == _stats(slow.reassembler)
    for addr in sources:
        assert len(got[addr]) == len(slow.replies[addr])
        flags = lambda rs: Counter(r[1] for r in rs)  # noqa: E731  (LAST and ECN_ECHO per answer)
        assert flags(got[addr]) == flags(slow.replies[addr])
    _same_messages(fast.delivered, slow.delivered)
    assert _told(fast) == _told(slow)


def test_transfers_with_ce_marks_echo_and_complete_in_c() -> None:
    """A 22-packet window through 4 % loss, duplicates, reordering and CE marks, bound 0.05: the
    C sends echoes and completes messages at their last probe; each sender's `missing` is what its
    receiver zero-filled, and the echoes reach the sender (its window shrinks)."""
    bounds = {MsgType.GRADIENT: 0.05, MsgType.PARAMETER: 0.05}
    tensors = [np.random.default_rng([7, i]).standard_normal(15_000 + 2_000 * i, dtype=np.float32) for i in range(6)]
    sender = Endpoint(worker_id=1, bounds=bounds, window=Window(cwnd=22, max_cwnd=22))
    receiver = Endpoint(worker_id=2, bounds=bounds)
    if not receiver.fast:
        pytest.skip("the receiver has no C data path here")
    with sender, receiver, Relay(receiver.address, random_impairment(loss=0.04, duplicate=0.05, seed=7),
                                 hold=6, record=False, mark_ce=lambda h: h.seq % 9 == 4) as relay:
        receiver.add_peer(1, relay.source)
        for i, values in enumerate(tensors):
            report = sender.send(relay.address, values, iteration=i)
            d = receiver.receive(timeout=30)
            arrived = d.values != 0
            np.testing.assert_array_equal(d.values[arrived], values[arrived])
            assert report.unconfirmed == 0 and report.missing == d.values.size - d.received <= 0.05 * values.size
        stats = receiver.reassembler.stats
    assert stats.echoes_in_c > 0 and stats.completed_in_c > 0 and stats.placed_in_c > 0, stats
    assert sender.window.cwnd < 22  # the echoes (most of them from C) shrank the sender's window


def test_a_member_moved_gets_no_answer_at_its_old_address() -> None:
    """An incomplete message from worker 1 at A is registered with the C; then worker 1 becomes B
    (add_peer): its data and a probe from A are dropped as from an unknown peer (as Python drops
    them), unplaced and unanswered."""
    receiver = Endpoint(worker_id=2, bounds=BOUNDS)
    if not receiver.fast:
        pytest.skip("the receiver has no C data path here")
    a, b = _sockets(2)
    with receiver:
        receiver.add_peer(1, a.getsockname())
        values = np.arange(3000, dtype=np.float32)
        batch = packetize(values, kind=MsgType.GRADIENT, job_id=receiver.job_id, worker_id=1, tensor_id=0,
                          iteration=0, count=100)
        for i in range(0, 20):  # 20 of 30 packets, in one burst
            a.sendto(batch.packet(i), receiver.address)
        probe = bytearray(_probe(1, 0, 0, 0, 20, 3000, 0, 5))
        HEADER_STRUCT.pack_into(probe, 0, *(HEADER_STRUCT.unpack_from(probe)[:2] + (receiver.job_id,)
                                            + HEADER_STRUCT.unpack_from(probe)[3:]))
        a.sendto(bytes(probe), receiver.address)
        deadline = time.monotonic() + 10
        answers: list[bytes] = []
        while time.monotonic() < deadline and not (answers and receiver.reassembler.stats.answered_in_c):
            answers += _drain(a)
            time.sleep(0.01)
        assert answers and receiver.reassembler.stats.answered_in_c == 1  # the C answered it at A
        receiver.add_peer(1, b.getsockname())
        for i in (20, 21):  # more of its data from A: not placed (the C placed A's runs before)
            a.sendto(batch.packet(i), receiver.address)
        a.sendto(bytes(probe), receiver.address)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and receiver.reassembler.stats.drops["unknown_peer"] < 3:
            time.sleep(0.01)
        time.sleep(0.2)
        stats = receiver.reassembler.stats
        assert stats.drops["unknown_peer"] == 3 and stats.data_packets == 20, stats
        assert _drain(a) == [] and stats.answered_in_c == 1
        assert MessageKey(receiver.job_id, 1, 0, 0, MsgType.GRADIENT) in receiver.reassembler._open
    a.close()
    b.close()


@pytest.mark.parametrize("done_memory", [3, 65536])
def test_many_completed_messages_owing_echoes_agree(done_memory: int) -> None:
    """140 messages completed with every element, each owing an echo (its last packet CE-marked),
    then a probe of each: more than the C keeps (128) and, with a done memory of 3, more than
    Python remembers; the answers are the same bytes."""
    stream: list[Datagram] = []
    for t in range(140):
        batch = packetize(np.full(200, t, dtype=np.float32), kind=MsgType.GRADIENT, job_id=1, worker_id=1,
                          tensor_id=t, iteration=0, count=100)
        stream += [(batch.packet(0), 0, 2), (batch.packet(1), 0, 3)]
    probes = []
    for t in range(140):
        probes.append(len(stream))
        stream.append((_probe(1, t, 0, 0, 2, 200, 0, 20 + t, last=t % 2 == 0), 0, 2))
    sockets = _sockets(3)
    try:
        sources = [s.getsockname() for s in sockets]
        slow = _FinalsHost(sources)
        slow.reassembler.done_memory = done_memory
        slow = _python_with(slow, stream, sources)
        fast = _FinalsHost(sources)
        fast.reassembler.done_memory = done_memory
        fast, got, in_c = _c(stream, [p + 1 for p in probes] + list(range(2, probes[0], 2)), sockets, fast)
    finally:
        for s in sockets:
            s.close()
    assert Counter(got[sources[0]]) == Counter(slow.replies[sources[0]])
    assert _stats(fast.reassembler) == _stats(slow.reassembler)
    assert len(in_c) == (128 if done_memory > 128 else 3)  # the probes of the messages the C still held
