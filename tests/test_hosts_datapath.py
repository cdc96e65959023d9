"""The C data path against the Python one: the same datagrams, the same outcome.

Two levels: the receiver's logic (seeded streams of valid, duplicated, reordered, late and
malformed datagrams go through :meth:`Reassembler.handle` one by one and through the batch
receiver's runs, :meth:`Reassembler.handle_run`; every count, drop reason and delivered
value must agree), and whole transfers through :class:`hosts.relay.Relay` (loss,
duplication, reordering) with forged datagrams from a stranger, C endpoints against Python
endpoints on the same seeded messages.
"""

from __future__ import annotations

import random
import socket
import time

import numpy as np
import pytest

from hosts.auth import Signer
from hosts.endpoint import Endpoint
from hosts.fastpath import BatchReceiver, native
from hosts.messages import Delivered, MessageKey
from hosts.packetize import magnitude_classes, packetize
from hosts.receiver import Reassembler
from hosts.relay import Relay, random_impairment
from hosts.wire import HEADER_LEN, Flags, Header, MsgType, pack_header

NAT = native()
pytestmark = pytest.mark.skipif(NAT is None, reason="the C data path cannot be built here (hosts.fastpath log)")
BOUNDS = {MsgType.GRADIENT: 0.05, MsgType.PARAMETER: 0.0}
A, B, STRANGER = ("127.0.0.1", 5001), ("127.0.0.1", 5002), ("127.0.0.9", 6000)


def _stream(seed: int) -> list[tuple[bytes, tuple[str, int], int]]:
    """Datagrams of three messages (two workers), shuffled in windows, with duplicates,
    late copies, probes and malformed or foreign datagrams in between."""
    rng = random.Random(seed)
    out: list[tuple[bytes, tuple[str, int], int]] = []
    for worker, source, n, kind in ((1, A, 5000, MsgType.GRADIENT), (2, B, 3000, MsgType.PARAMETER),
                                    (1, A, 2000, MsgType.GRADIENT)):
        values = np.random.default_rng(seed + n).standard_normal(n, dtype=np.float32)
        batch = packetize(values, kind=kind, job_id=1, worker_id=worker, tensor_id=n % 7, iteration=seed,
                          count=100)
        packets = [batch.packet(i) for i in range(len(batch))]
        order = list(range(len(packets)))
        for k in range(0, len(order), 8):  # reorder within windows of 8
            window = order[k:k + 8]
            rng.shuffle(window)
            order[k:k + 8] = window
        for i in order:
            if rng.random() < 0.04:
                continue  # lost
            data = packets[i]
            out.append((data, source, 3 if rng.random() < 0.05 else 2))
            if rng.random() < 0.05:
                out.append((data, source, 2))  # duplicate
            r = rng.random()
            if r < 0.01:
                out.append((data[:HEADER_LEN - 3], source, 2))  # truncated
            elif r < 0.02:
                out.append((data[:-4], source, 2))  # payload shorter than its count
            elif r < 0.03:
                out.append((data, STRANGER, 2))  # a forger replaying from elsewhere
            elif r < 0.04:
                bad = bytearray(data)
                bad[1] |= 0x40  # reserved flag
                out.append((bytes(bad), source, 2))
            elif r < 0.05:
                bad = bytearray(data)
                bad[12:16] = (n + 5).to_bytes(4, "big")  # offset past the tensor
                out.append((bytes(bad), source, 2))
            elif r < 0.06:
                bad = bytearray(data)
                bad[2:4] = (9).to_bytes(2, "big")  # another job
                out.append((bytes(bad), source, 2))
        out.append((packets[0], STRANGER, 2))  # at least one forged copy per message
        probe = pack_header(Header(msg_type=MsgType.PROBE, flags=0x02, job_id=1, worker_id=worker,
                                   tensor_id=n % 7, iteration=seed, offset=0, tensor_len=n, count=77,
                                   mag_class=int(kind), prio_hint=0, seq=len(packets)))
        out.append((probe + bytes(max(0, -(-(HEADER_LEN + -(-len(packets) // 8)) // 3) - HEADER_LEN)), source, 2))
        out.extend((p, source, 2) for p in packets[-20:])  # late after the last probe
    return out


def _python(stream: list[tuple[bytes, tuple[str, int], int]],
            r: Reassembler | None = None) -> tuple[Reassembler, list[Delivered], list[bytes]]:
    r = r or Reassembler(job_id=1, bounds=BOUNDS)
    delivered: list[Delivered] = []
    replies: list[bytes] = []
    for data, source, tos in stream:
        rep, done = r.handle(data, source, tos & 3 == 3)
        replies += rep
        delivered += done
    return r, delivered, replies


def _batched(stream: list[tuple[bytes, tuple[str, int], int]],
             r: Reassembler | None = None) -> tuple[Reassembler, list[Delivered], list[bytes]]:
    assert NAT is not None
    rx = BatchReceiver(NAT, None)
    r = r or Reassembler(job_id=1, bounds=BOUNDS)
    delivered: list[Delivered] = []
    replies: list[bytes] = []
    for start in range(0, len(stream), 700):  # batches, as recvmmsg hands them over
        part = stream[start:start + 700]
        n = rx.load([d for d, _, _ in part], [s for _, s, _ in part], [t for _, _, t in part])
        i = 0
        while i < n:
            j = rx.run_end(i, n)
            source = rx.source(i)
            if j - i > 1:
                delivered += r.handle_run(rx, i, j, source, int(np.count_nonzero((rx.tos[i:j] & 3) == 3)))
            else:
                rep, done = r.handle(bytes(rx.packet(i)), source, int(rx.tos[i]) & 3 == 3)
                replies += rep
                delivered += done
            i = j
    return r, delivered, replies


@pytest.mark.parametrize("seed", range(6))
def test_batched_runs_count_drop_and_place_as_packet_by_packet(seed: int) -> None:
    stream = _stream(seed)
    slow, slow_out, slow_replies = _python(stream)
    fast, fast_out, fast_replies = _batched(stream)
    assert slow.stats == fast.stats
    assert slow.stats.drops["late"] > 0 and slow.stats.drops["unknown_peer"] > 0  # the stream exercised them
    assert slow_replies == fast_replies
    assert [d.key for d in slow_out] == [d.key for d in fast_out]
    for a, b in zip(slow_out, fast_out):
        assert a.received == b.received and a.source == b.source
        np.testing.assert_array_equal(a.values, b.values)
    assert {k: (a.values.size, a.received) for k, a in slow._open.items()} == \
        {k: (a.values.size, a.received) for k, a in fast._open.items()}


@pytest.mark.parametrize("seed", range(3))
def test_values_added_into_the_callers_array_once_each_and_lost_ones_not_at_all(seed: int) -> None:
    """A message added into its caller's array (``expect(..., add=True)``, the ring's reduce
    step): every packet comes twice in a shuffled order, an odd packet brings elements of two
    others first, two packets are lost (within the bound) and copies come after completion.
    Both receivers must add each value that arrived exactly once, to what the array held, and
    leave the lost ones as they were."""
    rng = random.Random(seed)
    n = 5_000
    values = np.random.default_rng(seed).standard_normal(n, dtype=np.float32)
    local = np.random.default_rng(seed + 50).standard_normal(n, dtype=np.float32)
    batch = packetize(values, kind=MsgType.GRADIENT, job_id=1, worker_id=1, tensor_id=4, iteration=seed, count=100)
    packets = [batch.packet(i) for i in range(len(batch))]
    lost_packets = rng.sample(range(3, len(packets)), 2)  # 200 of 5,000 values: within the 5 % bound
    arrived = np.ones(n, bool)
    for i in lost_packets:
        arrived[i * 100:(i + 1) * 100] = False
    overlap = pack_header(Header(msg_type=MsgType.GRADIENT, flags=0, job_id=1, worker_id=1, tensor_id=4,
                                 iteration=seed, offset=150, tensor_len=n, count=100, mag_class=128, prio_hint=0,
                                 seq=len(packets) + 5)) + values[150:250].tobytes()  # halves of packets 1 and 2
    copies = [p for i, p in enumerate(packets) if i not in lost_packets] * 2
    rng.shuffle(copies)
    probe = pack_header(Header(msg_type=MsgType.PROBE, flags=Flags.LAST, job_id=1, worker_id=1, tensor_id=4,
                               iteration=seed, offset=0, tensor_len=n, count=9, mag_class=0, prio_hint=0,
                               seq=len(packets)))
    stream = [(p, A, 2) for p in [overlap, *copies, probe, *packets[:5]]]
    key = MessageKey(1, 1, seed, 4, MsgType.GRADIENT)
    outs = []
    for run in (_python, _batched):
        out = local.copy()
        r = Reassembler(job_id=1, bounds=BOUNDS)
        r.expect(key, out, add=True)
        _, delivered, _ = run(stream, r)
        assert [d.key for d in delivered] == [key], run.__name__
        assert np.shares_memory(delivered[0].values, out) and delivered[0].received == int(arrived.sum())
        lost = delivered[0].lost  # where values never came: what loss masks record (the array is not zero there)
        assert lost is not None
        np.testing.assert_array_equal(lost, np.flatnonzero(~arrived))
        assert r.stats.duplicates == len(copies) // 2 + 5  # the second copies and the late ones
        np.testing.assert_array_equal(out[arrived], local[arrived] + values[arrived])
        np.testing.assert_array_equal(out[~arrived], local[~arrived])
        outs.append(out)
    np.testing.assert_array_equal(outs[0], outs[1])


def test_magnitude_classes_in_c_match_numpy() -> None:
    from hosts import fastpath

    rng = np.random.default_rng(3)
    values = (rng.standard_normal(50_017) * np.exp(rng.uniform(-80, 80, 50_017))).astype(np.float32)
    values[:361] = 0
    values[400] = np.nan
    values[800] = -np.inf
    values[1200:1561] = 1e-45  # subnormal
    got = fastpath.classes(values, 361)
    assert got is not None
    np.testing.assert_array_equal(got, magnitude_classes(values, 361))


def _transfer(fast: bool, seed: int, bound: float) -> tuple[list[np.ndarray], list[Delivered], int]:
    bounds = {MsgType.GRADIENT: bound, MsgType.PARAMETER: bound}
    tensors = [np.random.default_rng([seed, i]).standard_normal(20_000 + 3_000 * i, dtype=np.float32)
               for i in range(4)]
    sender = Endpoint(worker_id=1, bounds=bounds, fast=fast)
    receiver = Endpoint(worker_id=2, bounds=bounds, fast=fast)
    forger = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    got: list[Delivered] = []
    with sender, receiver, Relay(receiver.address, random_impairment(loss=0.05, duplicate=0.05, seed=seed),
                                 hold=6, record=False) as relay:
        receiver.add_peer(1, relay.source)
        for i, values in enumerate(tensors):
            forged = packetize(-values, kind=MsgType.GRADIENT, job_id=1, worker_id=1, tensor_id=0, iteration=i)
            for k in range(0, len(forged), 3):  # a stranger claims to be worker 1
                forger.sendto(forged.packet(k), receiver.address)
            sender.send(relay.address, values, iteration=i)
            got.append(receiver.receive(timeout=30))
        time.sleep(0.05)
        unknown = receiver.reassembler.stats.drops["unknown_peer"]
    forger.close()
    return tensors, got, unknown


@pytest.mark.parametrize("bound", [0.0, 0.05])
def test_both_paths_deliver_the_same_through_loss_duplicates_reordering_and_forgery(
        bound: float, monkeypatch: pytest.MonkeyPatch) -> None:
    """The C path with UDP GSO (loopback), without it (``GRADFABRIC_UDP_GSO=0``, as on a route
    whose device offers segmentation) and the Python path, with the same seeded impairments."""
    results = {"c": _transfer(True, 11, bound), "python": _transfer(False, 11, bound)}
    monkeypatch.setenv("GRADFABRIC_UDP_GSO", "0")
    results["c, no GSO"] = _transfer(True, 11, bound)
    for path, (tensors, got, unknown) in results.items():
        assert unknown > 0, f"{path}: the forged datagrams reached the receiver"
        assert [d.key.iteration for d in got] == list(range(len(tensors)))
        for values, d in zip(tensors, got):
            arrived = d.values != 0
            np.testing.assert_array_equal(d.values[arrived], values[arrived])  # nothing forged got in
            assert d.values.size - int(arrived.sum()) <= bound * values.size
    if bound == 0:  # exact delivery: identical on every path
        for path in ("c", "c, no GSO"):
            for a, b in zip(results[path][1], results["python"][1]):
                np.testing.assert_array_equal(a.values, b.values)


@pytest.mark.parametrize("sender_fast,receiver_fast", [(True, False), (False, True), (True, True)])
def test_job_key_tags_made_in_c_and_in_python_agree(sender_fast: bool, receiver_fast: bool) -> None:
    # The C path tags and checks datagrams itself (HMAC-SHA256 from the system's libcrypto):
    # each side verifies the other's tags, and datagrams under another key, or none, are
    # dropped as bad_tag before anything else looks at them.
    key = b"0123456789abcdef-job-7"
    bounds = {MsgType.GRADIENT: 0.0, MsgType.PARAMETER: 0.0}
    values = np.random.default_rng(8).standard_normal(50_000, dtype=np.float32)
    with Endpoint(worker_id=1, key=key, bounds=bounds, fast=sender_fast) as sender, \
            Endpoint(worker_id=2, key=key, bounds=bounds, fast=receiver_fast) as receiver:
        assert (sender.fast, receiver.fast) == (sender_fast, receiver_fast)
        stranger = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        forged = packetize(-values, kind=MsgType.GRADIENT, job_id=1, worker_id=1, tensor_id=0, iteration=0)
        other = Signer(b"another key of 16+ bytes")
        for k in range(0, len(forged), 5):
            stranger.sendto(forged.packet(k), receiver.address)  # no tag
            stranger.sendto(other.sign(forged.packet(k)), receiver.address)  # tagged under another key
        stranger.close()
        report = sender.send(receiver.address, values, iteration=0)
        got = receiver.receive(timeout=30)
        bad = receiver.reassembler.stats.drops["bad_tag"]
    np.testing.assert_array_equal(got.values, values)
    assert report.missing == 0 and bad == 2 * len(range(0, len(forged), 5))


def test_maps_reused_past_their_255_marks_see_only_their_own_message() -> None:
    # 300 messages of one length reuse one pair of maps, each taking the next mark (the maps
    # are zeroed once, after mark 255). Message i loses packet i % 20 (within the 5 % bound),
    # gets packet (i + 7) % 20 twice, and completes at a last-flagged probe: on both paths its
    # answer shows the lost packet alone, its lost values are that packet's and it is not
    # counted as arrived twice, whatever earlier messages left in the maps.
    stream: list[tuple[bytes, tuple[str, int], int]] = []
    for i in range(300):
        values = np.arange(2000, dtype=np.float32) + i
        batch = packetize(values, kind=MsgType.GRADIENT, job_id=1, worker_id=1, tensor_id=0, iteration=i, count=100)
        for k in range(20):
            if k != i % 20:
                stream.append((batch.packet(k), A, 0))
            if k == (i + 7) % 20:
                stream.append((batch.packet(k), A, 0))
        probe = pack_header(Header(msg_type=MsgType.PROBE, flags=Flags.LAST, job_id=1, worker_id=1, tensor_id=0,
                                   iteration=i, offset=0, tensor_len=2000, count=i, mag_class=0, prio_hint=0,
                                   seq=20))
        stream.append((probe, A, 0))
    for r, delivered, replies in (_python(stream), _batched(stream)):
        assert [d.key.iteration for d in delivered] == list(range(300))
        assert r.stats.duplicates == 300 and r.stats.completed == 300
        for i, (d, reply) in enumerate(zip(delivered, replies)):
            gone = i % 20
            np.testing.assert_array_equal(d.lost, np.arange(gone * 100, gone * 100 + 100))
            assert d.received == 1900
            held = np.ones(20, bool)
            held[gone] = False
            assert reply[HEADER_LEN:] == np.packbits(held, bitorder="little").tobytes()
            kept = np.ones(2000, bool)
            kept[gone * 100:gone * 100 + 100] = False
            np.testing.assert_array_equal(d.values[kept], (np.arange(2000, dtype=np.float32) + i)[kept])
