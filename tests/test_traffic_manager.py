"""Traffic manager: BMv2 1.15's queue model (per-priority-queue rates and depths, pacing
decided at enqueue, queue metadata of the packet's own priority queue) and the embedded
target's port rate (one rate shared by a port's priority queues). Expected times and depths
are worked out by hand in the comments."""

from __future__ import annotations

import pytest

from p4switch.traffic_manager import QueueConfigError, Rate, TrafficManager


def drain(tm: TrafficManager, until_us: int, step_us: int = 1) -> list:
    """Departures seen by a driver that polls every ``step_us`` up to ``until_us``."""
    out = []
    for now in range(0, until_us + 1, step_us):
        out.extend(tm.dequeue(now))
    return out


def burst(tm: TrafficManager) -> list[bool]:
    """Six low-priority (0) then six high-priority (3) packets on port 1 at t=0."""
    accepted = [tm.enqueue(("low", i), 1, 0, 100, 0) for i in range(6)]
    accepted += [tm.enqueue(("high", i), 1, 3, 100, 0) for i in range(6)]
    return accepted


def test_bmv2_port_rate_is_given_to_each_priority_queue() -> None:
    tm = TrafficManager(priority_queues=4)
    tm.set_queue_rate(1, Rate(1000))  # BMv2's `set_queue_rate 1000 1`: each queue 1 packet/ms
    tm.set_queue_depth(1, 3)
    assert burst(tm) == [True] * 3 + [False] * 3 + [True] * 3 + [False] * 3
    assert tm.drops[(1, 0, "queue_full")] == 3 and tm.drops[(1, 3, "queue_full")] == 3
    assert tm.depth(1) == 6 and tm.depth(1, 0) == 3 and tm.depth(1, 3) == 3

    departures = drain(tm, 10_000, step_us=250)
    # Each queue paces itself (sends at 0, 1000, 2000): the port carries 2 packets/ms, and
    # strict priority only orders the two packets due at the same time.
    assert [d.item for d in departures] == [
        ("high", 0), ("low", 0), ("high", 1), ("low", 1), ("high", 2), ("low", 2)]
    assert [d.time_us for d in departures] == [0, 0, 1000, 1000, 2000, 2000]
    # Depths are the packet's own priority queue: before it joined, and after it left.
    assert [d.queue.enq_qdepth for d in departures] == [0, 0, 1, 1, 2, 2]
    assert [d.queue.deq_qdepth for d in departures] == [2, 2, 1, 1, 0, 0]
    assert [d.queue.deq_timedelta for d in departures] == [0, 0, 1000, 1000, 2000, 2000]
    assert [d.queue.qid for d in departures] == [3, 0, 3, 0, 3, 0]  # qid = the priority


def test_port_rate_is_shared_and_strict_priority_decides() -> None:
    tm = TrafficManager(priority_queues=4)
    tm.set_port_rate(1, Rate(1000))  # embedded only: the port sends 1 packet/ms in all
    tm.set_queue_depth(1, 3)
    assert burst(tm) == [True] * 3 + [False] * 3 + [True] * 3 + [False] * 3
    departures = drain(tm, 10_000, step_us=250)
    assert [d.item for d in departures] == [
        ("high", 0), ("high", 1), ("high", 2), ("low", 0), ("low", 1), ("low", 2)]
    assert [d.time_us for d in departures] == [0, 1000, 2000, 3000, 4000, 5000]
    assert [d.queue.enq_qdepth for d in departures] == [0, 1, 2, 0, 1, 2]
    assert [d.queue.deq_qdepth for d in departures] == [2, 1, 0, 2, 1, 0]
    assert [d.queue.deq_timedelta for d in departures] == [0, 1000, 2000, 3000, 4000, 5000]
    assert [d.queue.qid for d in departures] == [3, 3, 3, 0, 0, 0]


def test_pacing_is_decided_at_enqueue() -> None:
    tm = TrafficManager(priority_queues=1)
    tm.set_queue_rate(2, Rate(1000))
    tm.enqueue("a", 2, 0, 64, 0)    # may leave at max(0, -inf) = 0
    tm.enqueue("b", 2, 0, 64, 100)  # max(100, 0 + 1000) = 1000
    tm.set_queue_rate(2, Rate(10))  # 100 ms per packet from now on; b keeps its 1000
    tm.enqueue("c", 2, 0, 64, 200)  # max(200, 1000 + 100_000) = 101_000
    assert [(d.item, d.time_us) for d in drain(tm, 200_000, step_us=500)] == [
        ("a", 0), ("b", 1000), ("c", 101_000)]
    # A packet arriving after a long idle time does not wait: max(300_000, 101_000 + 100_000).
    tm.enqueue("d", 2, 0, 64, 300_000)
    assert [d.item for d in tm.dequeue(300_000)] == ["d"]


def test_high_priority_arriving_later_overtakes_queued_low_priority_under_a_port_rate() -> None:
    tm = TrafficManager(priority_queues=2)
    tm.set_port_rate(2, Rate(1000))
    out = []
    for i in range(4):
        tm.enqueue(f"low{i}", 2, 0, 64, 0)
    out += tm.dequeue(0)  # low0 leaves at once, the port is busy until t=1000
    tm.enqueue("high", 2, 1, 64, 500)
    out += drain(tm, 5000, step_us=100)
    assert [d.item for d in out] == ["low0", "high", "low1", "low2", "low3"]
    assert [d.time_us for d in out] == [0, 1000, 2000, 3000, 4000]
    assert out[1].queue.deq_timedelta == 500
    assert out[1].queue.enq_qdepth == 0  # its own queue was empty; three lows were waiting
    assert [d.queue.enq_qdepth for d in out[2:]] == [1, 2, 3]


def test_port_rate_and_queue_rate_together() -> None:
    tm = TrafficManager(priority_queues=2)
    tm.set_port_rate(1, Rate(1000))              # 1 ms per packet on the port
    tm.set_queue_rate(1, Rate(250), priority=1)  # the high queue at most every 4 ms
    for i in range(3):
        tm.enqueue(f"h{i}", 1, 1, 64, 0)         # may leave at 0, 4000, 8000
    for i in range(6):
        tm.enqueue(f"l{i}", 1, 0, 64, 0)         # may leave at 0
    departures = drain(tm, 10_000, step_us=100)
    # The port fills the high queue's gaps with low packets; at 4000 both are due: high.
    assert [d.item for d in departures] == ["h0", "l0", "l1", "l2", "h1", "l3", "l4", "l5", "h2"]
    assert [d.time_us for d in departures] == list(range(0, 9000, 1000))


@pytest.mark.parametrize("shared", [False, True])
def test_bit_rate_paces_by_packet_size(shared: bool) -> None:
    tm = TrafficManager()
    rate = Rate.parse("8Mbps")  # one byte per microsecond
    if shared:
        tm.set_port_rate(1, rate)
    else:
        tm.set_queue_rate(1, rate)
    for size in (1000, 500, 250):
        tm.enqueue(size, 1, 0, size, 0)
    departures = drain(tm, 3000, step_us=10)
    assert [d.time_us for d in departures] == [0, 1000, 1500]


def test_per_priority_rate_limits_one_queue_only() -> None:
    tm = TrafficManager(priority_queues=2)
    tm.set_queue_rate(1, Rate(100), priority=1)  # the high queue may send every 10 ms
    for i in range(2):
        tm.enqueue(f"high{i}", 1, 1, 64, 0)
        tm.enqueue(f"low{i}", 1, 0, 64, 0)
    departures = drain(tm, 20_000, step_us=1000)
    assert [d.item for d in departures] == ["high0", "low0", "low1", "high1"]
    assert departures[-1].time_us == 10_000


def test_unlimited_port_releases_everything_at_once_and_ports_are_independent() -> None:
    tm = TrafficManager(priority_queues=2)
    tm.set_queue_rate(1, Rate(10))
    tm.enqueue("a", 1, 0, 64, 0)
    tm.enqueue("b", 1, 0, 64, 0)
    tm.enqueue("c", 2, 0, 64, 0)
    tm.enqueue("d", 2, 1, 64, 0)
    first = tm.dequeue(0)
    assert sorted(d.item for d in first) == ["a", "c", "d"]
    assert tm.depth(1) == 1 and tm.depth(2) == 0
    assert tm.next_departure_us() == pytest.approx(100_000)
    assert [d.item for d in tm.dequeue(100_000)] == ["b"]
    assert tm.next_departure_us() is None


def test_pass_through_only_when_the_port_is_idle_and_unpaced() -> None:
    tm = TrafficManager(priority_queues=2)
    tm.set_queue_rate(1, Rate(1000), priority=0)
    first = tm.pass_through("a", 1, 0, 64, 0)
    assert first is not None and first.queue == (0, 0, 0, 0, 0)
    assert tm.pass_through("b", 1, 0, 64, 500) is None   # its queue may send again at 1000
    high = tm.pass_through("c", 1, 1, 64, 500)           # the other queue is not paced
    assert high is not None and high.queue.qid == 1
    assert tm.pass_through("d", 1, 0, 64, 1000) is not None


def test_bad_priority_is_dropped_and_counted() -> None:
    tm = TrafficManager(priority_queues=2)
    assert not tm.enqueue("x", 1, 5, 64, 0)
    assert tm.drops[(1, 5, "bad_priority")] == 1
    assert tm.dequeue(10) == []


def test_per_priority_depth_and_settings_report() -> None:
    tm = TrafficManager(priority_queues=2, default_depth=5)
    tm.set_queue_depth(3, 1, priority=0)
    tm.set_queue_rate(3, Rate(500))
    tm.set_queue_rate(3, Rate(50), priority=1)
    assert [tm.enqueue(i, 3, 0, 64, 0) for i in range(2)] == [True, False]
    assert all(tm.enqueue(i, 3, 1, 64, 0) for i in range(5))
    assert not tm.enqueue(9, 3, 1, 64, 0)
    settings = tm.queue_settings(3)
    assert settings["port_rate"] == "none"
    assert [q["depth"] for q in settings["queues"]] == [1, 5]
    assert [q["rate"] for q in settings["queues"]] == ["500pps", "50pps"]
    assert [q["queued"] for q in settings["queues"]] == [1, 5]
    tm.set_port_rate(3, Rate.parse("1kpps"))
    assert tm.queue_settings(3)["port_rate"] == "1000pps"


@pytest.mark.parametrize(
    ("text", "value", "per_bit"),
    [("1000", 1000, False), ("2.5kpps", 2500, False), ("10Mbps", 10e6, True),
     ("1Gbps", 1e9, True)],
)
def test_rate_parse(text: str, value: float, per_bit: bool) -> None:
    rate = Rate.parse(text)
    assert rate.value == value and rate.per_bit == per_bit


@pytest.mark.parametrize("text", ["", "fast", "-3pps", "0", "10 Mbit"])
def test_rate_parse_rejects_nonsense(text: str) -> None:
    with pytest.raises(QueueConfigError):
        Rate.parse(text)


def test_configuration_errors() -> None:
    with pytest.raises(QueueConfigError, match="priority queues"):
        TrafficManager(priority_queues=9)
    tm = TrafficManager(priority_queues=2)
    with pytest.raises(QueueConfigError, match="priority 2 out of range"):
        tm.set_queue_depth(1, 10, priority=2)
    with pytest.raises(QueueConfigError, match="priority 2 out of range"):
        tm.set_queue_rate(1, Rate(10), priority=2)
    with pytest.raises(QueueConfigError, match="at least 1"):
        tm.set_queue_depth(1, 0)
