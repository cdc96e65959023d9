"""Traffic manager: strict priority, tail drop, rate limits and BMv2-style queue metadata."""

from __future__ import annotations

import pytest

from p4switch.traffic_manager import QueueConfigError, Rate, TrafficManager


def drain(tm: TrafficManager, until_us: int, step_us: int = 1) -> list:
    """Departures seen by a driver that polls every ``step_us`` up to ``until_us``."""
    out = []
    for now in range(0, until_us + 1, step_us):
        out.extend(tm.dequeue(now))
    return out


def test_burst_into_rate_limited_port_leaves_in_priority_order_with_tail_drop() -> None:
    tm = TrafficManager(priority_queues=4)
    tm.set_queue_rate(1, Rate(1000))  # one packet per millisecond
    tm.set_queue_depth(1, 3)
    # A burst at t=0: six low-priority packets then six high-priority ones.
    accepted = [tm.enqueue(("low", i), 1, 0, 100, 0) for i in range(6)]
    accepted += [tm.enqueue(("high", i), 1, 3, 100, 0) for i in range(6)]
    assert accepted == [True] * 3 + [False] * 3 + [True] * 3 + [False] * 3
    assert tm.drops[(1, 0, "queue_full")] == 3 and tm.drops[(1, 3, "queue_full")] == 3

    departures = drain(tm, 10_000, step_us=250)
    assert [d.item for d in departures] == [
        ("high", 0), ("high", 1), ("high", 2), ("low", 0), ("low", 1), ("low", 2)]
    assert [d.time_us for d in departures] == [0, 1000, 2000, 3000, 4000, 5000]
    # enq_qdepth counts every priority queue of the port, before the packet joined.
    assert [d.queue.enq_qdepth for d in departures] == [3, 4, 5, 0, 1, 2]
    assert [d.queue.deq_qdepth for d in departures] == [5, 4, 3, 2, 1, 0]
    assert [d.queue.deq_timedelta for d in departures] == [0, 1000, 2000, 3000, 4000, 5000]
    assert [d.queue.qid for d in departures] == [0, 0, 0, 3, 3, 3]


def test_high_priority_arriving_later_overtakes_queued_low_priority() -> None:
    tm = TrafficManager(priority_queues=2)
    tm.set_queue_rate(2, Rate(1000))
    out = []
    for i in range(4):
        tm.enqueue(f"low{i}", 2, 0, 64, 0)
    out += tm.dequeue(0)  # low0 leaves at once, the port is busy until t=1000
    tm.enqueue("high", 2, 1, 64, 500)
    out += drain(tm, 5000, step_us=100)
    assert [d.item for d in out] == ["low0", "high", "low1", "low2", "low3"]
    assert out[1].time_us == 1000 and out[1].queue.deq_timedelta == 500
    assert out[1].queue.enq_qdepth == 3


def test_bit_rate_paces_by_packet_size() -> None:
    tm = TrafficManager()
    tm.set_queue_rate(1, Rate.parse("8Mbps"))  # one byte per microsecond
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


def test_bad_priority_is_dropped_and_counted() -> None:
    tm = TrafficManager(priority_queues=2)
    assert not tm.enqueue("x", 1, 5, 64, 0)
    assert tm.drops[(1, 5, "bad_priority")] == 1
    assert tm.dequeue(10) == []


def test_per_priority_depth_and_settings_report() -> None:
    tm = TrafficManager(priority_queues=2, default_depth=5)
    tm.set_queue_depth(3, 1, priority=0)
    assert [tm.enqueue(i, 3, 0, 64, 0) for i in range(2)] == [True, False]
    assert all(tm.enqueue(i, 3, 1, 64, 0) for i in range(5))
    assert not tm.enqueue(9, 3, 1, 64, 0)
    settings = tm.queue_settings(3)
    assert [q["depth"] for q in settings["queues"]] == [1, 5]
    assert [q["queued"] for q in settings["queues"]] == [1, 5]


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
    with pytest.raises(QueueConfigError, match="at least 1"):
        tm.set_queue_depth(1, 0)
