"""Bounded-loss transport over loopback: exact rebuild, tolerated loss, retransmission."""

from __future__ import annotations

import numpy as np
import pytest

from hosts.endpoint import Endpoint
from hosts.errors import PeerGoneError, TransportError
from hosts.messages import MessageKey
from hosts.packetize import packetize
from hosts.receiver import Reassembler
from hosts.relay import Relay
from hosts.wire import Flags, Header, MsgType, pack_header
from tests.hosts_paths import datapath  # noqa: F401  (every test runs on both data paths)

BOUNDS = {MsgType.GRADIENT: 0.05, MsgType.PARAMETER: 0.01}


def tensor(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=n).astype(np.float32) + 0.5


def endpoints(**kw: object) -> tuple[Endpoint, Endpoint]:
    return (Endpoint(worker_id=1, bounds=BOUNDS, count=360, **kw),  # type: ignore[arg-type]
            Endpoint(worker_id=2, bounds=BOUNDS, count=360, **kw))  # type: ignore[arg-type]


def test_exact_rebuild_without_loss() -> None:
    sender, receiver = endpoints()
    with sender, receiver:
        values = tensor(100_000)
        report = sender.send(receiver.address, values, tensor_id=3, iteration=7)
        got = receiver.receive(timeout=5)
    assert got.key == MessageKey(1, 1, 7, 3, MsgType.GRADIENT)
    np.testing.assert_array_equal(got.values, values)
    assert report.retransmitted == 0 and report.missing == 0 and got.loss_rate == 0
    # One packet more than 100,000 / 360: one is cut so that the marked values fill the drop
    # budget (5 % of the front layer's 100,000 values) exactly.
    assert report.packets == -(-100_000 // 360) + 1
    assert report.eligible_elements == 5_000


def lose_first_time(seqs: set[int]):
    def verdict(h: Header, data: bytes) -> int:
        return 0 if h.msg_type <= MsgType.PARAMETER and h.seq in seqs and not h.flags & Flags.RETRANSMIT else 1
    return verdict


def test_loss_within_bound_completes_without_retransmission_and_zero_fills() -> None:
    sender, receiver = endpoints()
    values = tensor(36_000)  # 100 packets
    with sender, receiver, Relay(receiver.address, lose_first_time({5, 50, 99})) as relay:
        report = sender.send(relay.address, values, iteration=1)
        got = receiver.receive(timeout=5)
    assert relay.stats.dropped == 3
    assert report.retransmitted == 0 and report.rounds == 0
    assert report.missing == 3 * 360 - 360 + 36_000 - 99 * 360  # 2 full packets and the short last one
    assert report.unconfirmed == 0  # every answer came: the sender knows what was zero-filled
    lost = np.zeros(36_000, bool)
    for s in (5, 50, 99):
        lost[s * 360:(s + 1) * 360] = True
    assert np.all(got.values[lost] == 0)
    np.testing.assert_array_equal(got.values[~lost], values[~lost])
    assert got.received == 36_000 - lost.sum()


def test_loss_above_bound_retransmits_until_within() -> None:
    sender, receiver = endpoints()
    values = tensor(36_000)
    dropped = set(range(0, 100, 7))  # 15 % of the packets
    with sender, receiver, Relay(receiver.address, lose_first_time(dropped)) as relay:
        report = sender.send(relay.address, values, iteration=2)
        got = receiver.receive(timeout=5)
    retx = {h.seq for h in relay.stats.seen if h.flags & Flags.RETRANSMIT}
    # Only lost packets are resent, and only until the loss is within the 5 % bound (5 of 100).
    assert report.rounds == 1 and retx <= dropped and len(dropped) - 5 <= report.retransmitted <= len(dropped)
    differ = got.values != values
    assert np.all(got.values[differ] == 0) and differ.sum() <= 0.05 * 36_000
    assert report.missing <= 0.05 * 36_000


def test_duplicates_and_reordering_are_harmless() -> None:
    sender, receiver = endpoints()
    values = tensor(50_000)
    with sender, receiver, Relay(receiver.address, lambda h, d: 1 + h.seq % 3, hold=16) as relay:
        report = sender.send(relay.address, values, iteration=3)
        got = receiver.receive(timeout=5)
    assert relay.stats.duplicated > 0
    assert receiver.reassembler.stats.duplicates >= relay.stats.duplicated - 2
    assert report.retransmitted == 0
    np.testing.assert_array_equal(got.values, values)


def test_parameters_keep_previous_values_where_lost() -> None:
    previous = np.full(36_000, 9.0, np.float32)
    sender = Endpoint(worker_id=1, bounds=BOUNDS, count=360)
    receiver = Endpoint(worker_id=2, bounds=BOUNDS, count=360, prior=lambda key: previous)
    values = tensor(36_000)
    with sender, receiver, Relay(receiver.address, lose_first_time({10})) as relay:
        report = sender.send(relay.address, values, kind=MsgType.PARAMETER, iteration=4)
        got = receiver.receive(timeout=5)
    assert relay.stats.dropped == 1 and report.rounds == 0
    np.testing.assert_array_equal(got.values[3600:3960], previous[3600:3960])
    np.testing.assert_array_equal(got.values[:3600], values[:3600])


def test_parameter_bound_is_stricter_and_forces_retransmission() -> None:
    sender, receiver = endpoints()
    values = tensor(36_000)
    with sender, receiver, Relay(receiver.address, lose_first_time({1, 2})) as relay:
        grad = sender.send(relay.address, values, kind=MsgType.GRADIENT, iteration=5)
        param = sender.send(relay.address, values, kind=MsgType.PARAMETER, iteration=5)
        receiver.receive(timeout=5)
        got = receiver.receive(timeout=5)
    assert grad.rounds == 0 and param.rounds == 1  # 2 % lost: within 5 %, not within 1 %
    # Resent only until the loss is within the 1 % bound: one of the two packets.
    assert grad.retransmitted == 0 and param.retransmitted == 1
    differ = got.values != values
    assert np.all(got.values[differ] == 0) and int(differ.sum()) == 360 == param.missing


def test_losing_every_drop_eligible_packet_needs_no_retransmission() -> None:
    sender, receiver = endpoints()
    scale = np.repeat(10.0 ** np.arange(-5, 5), 3600).astype(np.float32)
    values = tensor(36_000) * scale
    with sender, receiver, Relay(receiver.address, lambda h, d: 0 if h.flags & Flags.DROP_ELIGIBLE else 1) as relay:
        report = sender.send(relay.address, values, tensor_id=0, num_layers=4)
        got = receiver.receive(timeout=5)
    assert report.eligible == relay.stats.dropped > 0
    assert report.rounds == 0 and 0 < report.missing <= 0.05 * 36_000
    lost = got.values != values
    assert np.all(got.values[lost] == 0)
    assert np.abs(values[lost]).max() < 1e-4  # the smallest gradients went first


def test_a_peer_that_never_answers_is_named_once_silent_for_peer_timeout() -> None:
    sender = Endpoint(worker_id=1, bounds=BOUNDS, probe_timeout=0.01, peer_timeout=0.5)
    with sender, Endpoint(worker_id=9, job_id=99) as other_job:
        host, port = other_job.address
        with pytest.raises(PeerGoneError, match=f"peer {host}:{port} is gone: never heard from it") as caught:
            sender.send(other_job.address, tensor(1000))
    assert caught.value.peer == (host, port)
    assert "listening" not in str(caught.value)
    assert other_job.reassembler.stats.drops["wrong_job"] > 0


def test_reassembler_in_any_order_with_duplicates() -> None:
    values = tensor(10_000)
    batch = packetize(values, kind=MsgType.GRADIENT, job_id=1, worker_id=4, tensor_id=2,
                      iteration=0, count=100)
    order = np.random.default_rng(3).permutation(np.concatenate([np.arange(len(batch))] * 2))
    r = Reassembler(job_id=1)
    delivered = []
    for i in order:
        delivered += r.handle(bytes(batch.packet(i)), ("127.0.0.1", 1))[1]
    assert len(delivered) == 1 and r.stats.completed == 1
    np.testing.assert_array_equal(delivered[0].values, values)
    probe = pack_header(Header(msg_type=MsgType.PROBE, flags=0, job_id=1, worker_id=4, tensor_id=2,
                               iteration=0, offset=0, tensor_len=10_000, count=0, mag_class=0,
                               prio_hint=7, seq=len(batch)))
    replies, again = r.handle(probe, ("127.0.0.1", 1))
    assert again == [] and len(replies) == 1
    assert replies[0][28:] == np.packbits(np.ones(len(batch), bool), bitorder="little").tobytes()


def test_tensor_sent_in_parts_completes_once_with_every_part() -> None:
    sender, receiver = endpoints()
    values = tensor(20_000)
    parts = [(0, 5_000), (5_000, 5_100), (5_100, 20_000)]
    with sender, receiver, Relay(receiver.address, lose_first_time({3, 20})) as relay:
        reports = [sender.send(relay.address, values[a:b], tensor_id=5, iteration=1, start=a,
                               tensor_len=20_000, drop_eligible=False) for a, b in parts]  # 360 per packet
        got = receiver.receive(timeout=5)
        with pytest.raises(TransportError):
            receiver.receive(timeout=0.2)
    seqs = sorted(h.seq for h in relay.stats.seen if h.msg_type == MsgType.GRADIENT and not h.flags & Flags.RETRANSMIT)
    assert seqs == list(range(len(seqs)))  # unique per tensor across parts
    # part 1 lost 1 of 14 packets (7 %: above the 5 % bound), part 3 lost 1 of 42 (within it)
    assert [r.retransmitted for r in reports] == [1, 0, 0]
    lost = np.zeros(20_000, bool)
    lost[5_100 + 5 * 360:5_100 + 6 * 360] = True  # seq 20 is part 3's sixth packet
    assert np.all(got.values[lost] == 0)
    np.testing.assert_array_equal(got.values[~lost], values[~lost])


def test_an_expected_message_is_rebuilt_in_the_callers_array() -> None:
    values = tensor(10_000)
    batch = packetize(values, kind=MsgType.GRADIENT, job_id=1, worker_id=4, tensor_id=2, iteration=0, count=360)
    r = Reassembler(job_id=1, bounds=BOUNDS)
    key = MessageKey(1, 4, 0, 2, MsgType.GRADIENT)
    out = np.full(10_000, 7.0, dtype=np.float32)
    r.expect(key, out)
    r.expect(MessageKey(1, 4, 0, 3, MsgType.GRADIENT), np.zeros(5, np.float32))  # wrong size: not used
    delivered = []
    for i in range(len(batch)):
        if i != 4:  # one packet lost (within the 5 % bound)
            delivered += r.handle(batch.packet(i), ("127.0.0.1", 1))[1]
    probe = pack_header(Header(msg_type=MsgType.PROBE, flags=Flags.LAST, job_id=1, worker_id=4, tensor_id=2,
                               iteration=0, offset=0, tensor_len=10_000, count=1, mag_class=0, prio_hint=7,
                               seq=len(batch)))
    delivered += r.handle(probe + bytes(8), ("127.0.0.1", 1))[1]
    assert len(delivered) == 1 and delivered[0].values is not None
    assert np.shares_memory(delivered[0].values, out)  # no new memory: the caller's array
    lost = np.zeros(10_000, bool)
    lost[4 * 360:5 * 360] = True
    np.testing.assert_array_equal(out[~lost], values[~lost])
    assert np.all(out[lost] == 0)  # lost values are 0 there too, not what the array held


def test_a_message_added_into_the_callers_array_is_never_given_up_for_room() -> None:
    """Giving up a message being added into its caller's array would add its values twice
    when the sender starts it over; other messages are given up instead (or none)."""
    r = Reassembler(job_id=1, bounds=BOUNDS, max_open=1)
    src = ("127.0.0.1", 1)
    values, local = tensor(1_000, 1), tensor(1_000, 2)
    added = packetize(values, kind=MsgType.GRADIENT, job_id=1, worker_id=4, tensor_id=2, iteration=0, count=100)
    other = packetize(tensor(1_000, 3), kind=MsgType.GRADIENT, job_id=1, worker_id=4, tensor_id=2, iteration=1,
                      count=100)
    out = local.copy()
    r.expect(MessageKey(1, 4, 0, 2, MsgType.GRADIENT), out, add=True)
    assert r.handle(added.packet(0), src) == ([], [])
    assert r.handle(other.packet(0), src) == ([], [])  # over max_open: nothing can be given up
    assert r.open_messages == 2 and r.stats.evicted == 0
    assert r.handle(packetize(tensor(10, 4), kind=MsgType.GRADIENT, job_id=1, worker_id=4, tensor_id=2,
                              iteration=2).packet(0), src)[1] != []  # completes at once ...
    assert r.stats.evicted == 1 and r.open_messages == 1  # ... after the other one was given up
    delivered = [d for i in range(len(added)) for d in r.handle(added.packet(i), src)[1]]  # packet 0 again
    assert len(delivered) == 1 and np.shares_memory(delivered[0].values, out)
    np.testing.assert_array_equal(out, local + values)  # each value added once


def test_a_message_reusing_a_completed_ones_maps_starts_empty() -> None:
    """The receiver reuses the have/seqs maps of completed messages: a later message of the
    same length must still see only its own packets (probe answer, zero-fill)."""
    r = Reassembler(job_id=1, bounds=BOUNDS)
    src = ("127.0.0.1", 1)
    first = packetize(tensor(10_000, 1), kind=MsgType.GRADIENT, job_id=1, worker_id=4, tensor_id=2,
                      iteration=0, count=360)
    assert sum(len(r.handle(first.packet(i), src)[1]) for i in range(len(first))) == 1
    values = tensor(10_000, 2)
    second = packetize(values, kind=MsgType.GRADIENT, job_id=1, worker_id=4, tensor_id=2, iteration=1, count=360)
    for i in range(len(second)):
        if i != 6:  # one of 28 packets lost (within the 5 % bound)
            assert r.handle(second.packet(i), src)[1] == []
    probe = pack_header(Header(msg_type=MsgType.PROBE, flags=Flags.LAST, job_id=1, worker_id=4, tensor_id=2,
                               iteration=1, offset=0, tensor_len=10_000, count=1, mag_class=0, prio_hint=7,
                               seq=len(second)))
    replies, delivered = r.handle(probe + bytes(8), src)
    held = np.ones(len(second), bool)
    held[6] = False
    assert replies[0][28:] == np.packbits(held, bitorder="little").tobytes()
    assert len(delivered) == 1 and delivered[0].received == 10_000 - 360
    lost = np.zeros(10_000, bool)
    lost[6 * 360:7 * 360] = True
    assert np.all(delivered[0].values[lost] == 0)
    np.testing.assert_array_equal(delivered[0].values[~lost], values[~lost])


@pytest.mark.parametrize("bound", [0.0, 0.05])
def test_every_data_packet_leaves_with_its_values_magnitude_class(bound: float) -> None:
    # At a bound of 0 nothing is marked, and the C sender writes each packet's class as it
    # sends it instead of in a pass of its own: the classes on the wire must not change.
    # Packet k (100 values) peaks at 2 ** (k - 20) (class k - 20 + 128); packet 3 is all 0
    # (class 0), packet 5 holds an inf (class 255), packet 7 a subnormal peak (class 1).
    values = np.zeros(40 * 100, dtype=np.float32)
    expected = {}
    for k in range(40):
        peak = 2.0 ** (k - 20)
        values[k * 100:(k + 1) * 100] = np.linspace(-peak / 2, peak / 2, 100, dtype=np.float32)
        values[k * 100 + 17] = -peak * 1.5  # |v| largest: floor(log2(1.5 peak)) = k - 20
        expected[k * 100] = k - 20 + 128
    values[300:400] = 0.0
    expected[300] = 0
    values[500:600] = 1.0
    values[555] = np.inf
    expected[500] = 255
    values[700:800] = np.float32(1e-40)
    expected[700] = 1
    bounds = {MsgType.GRADIENT: bound, MsgType.PARAMETER: bound}
    sender = Endpoint(worker_id=1, bounds=bounds, count=100)
    receiver = Endpoint(worker_id=2, bounds=bounds, count=100)
    with sender, receiver, Relay(receiver.address) as relay:
        sender.send(relay.address, values, tensor_id=0, iteration=0)
        receiver.receive(timeout=10)
    data = [h for h in relay.stats.seen if h.msg_type == MsgType.GRADIENT]
    seen: dict[int, int] = {}
    for h in data:  # with a bound, one packet is cut in two: its first part carries the class of its own values
        if h.count == 100:
            seen[h.offset] = h.mag_class
    assert len(seen) >= 38 and all(seen[o] == expected[o] for o in seen), (seen, expected)
    if bound == 0:
        assert len(seen) == 40 and not any(h.flags & Flags.DROP_ELIGIBLE for h in data)


def test_a_loopback_endpoint_sized_from_the_mtu_sends_64_kb_packets() -> None:
    # count=None takes the path's MTU: loopback's 65,536 bytes allow the largest UDP payload,
    # 65,507 bytes: (65,507 - 28) // 4 = 16,369 values; any other address keeps 1500 bytes' 361.
    from pathlib import Path

    from hosts.endpoint import SOCKET_BUFFER
    from hosts.netdev import mtu_count

    if Path("/sys/class/net/lo/mtu").read_text().strip() != "65536":
        pytest.skip("loopback's MTU is not Linux's default 65,536 here")
    assert mtu_count("10.0.1.1") == 361 and mtu_count("10.0.1.1", tagged=True) == 357
    values = tensor(300_000)
    sender = Endpoint(worker_id=1, bounds={MsgType.GRADIENT: 0.0, MsgType.PARAMETER: 0.0}, count=None)
    receiver = Endpoint(worker_id=2, bounds={MsgType.GRADIENT: 0.0, MsgType.PARAMETER: 0.0}, count=None)
    assert sender.count == 16_369
    # the window never holds more than the peer's receive buffer: 32 MB of 65,504-byte packets
    assert sender.window.max_cwnd * 65_504 <= SOCKET_BUFFER
    with sender, receiver, Relay(receiver.address) as relay:
        report = sender.send(relay.address, values, tensor_id=1, iteration=0)
        got = receiver.receive(timeout=10)
    np.testing.assert_array_equal(got.values, values)
    data = [h for h in relay.stats.seen if h.msg_type == MsgType.GRADIENT]
    assert report.packets == 19 and {h.count for h in data} == {16_369, 300_000 - 18 * 16_369}
