"""A star's pulls over the server's leaf's uplinks (``star-pulls``): the busiest uplink's share of
hashed flows, the pushes alone on the server's port, and the pushes' credit back before the
pulls, on hand-worked figures."""

from __future__ import annotations

import pytest

from hosts.schedulers import Layer, Segment, Transfer, create
from simulator.engine import simulate
from simulator.errors import SimulatorError
from simulator.fabric_model import CollectiveLink, busiest_of, port_model


def test_busiest_uplink_of_flows_hashed_over_two() -> None:
    # 4 flows on 2 links: 4-0 with probability 2/16, 3-1 with 8/16, 2-2 with 6/16.
    assert busiest_of(4) == pytest.approx((2 * 4 + 8 * 3 + 6 * 2) / 16)  # 2.75
    # 3 flows: 3-0 with 2/8, 2-1 with 6/8.
    assert busiest_of(3) == pytest.approx((2 * 3 + 6 * 2) / 8)  # 2.25
    assert busiest_of(1) == 1.0
    assert busiest_of(4, 1) == 4.0
    with pytest.raises(SimulatorError, match="need a flow and a link"):
        busiest_of(0)


PORT = port_model(port_pps=1000, queue_packets=32, background="none", job_above_background=True)
MESSAGE = Transfer(segments=(Segment(0, 0, 3610),), nbytes=14_440)  # ten 1,444-byte packets


def test_a_star_with_pulls_on_the_uplinks_holds_the_port_for_the_pushes_only() -> None:
    # Server and 4 workers. Before: 4 pushes of 10 packets, then 4 pulls of 10, through the
    # server's port at 1,000 packets/s: 80 ms. With the pulls on the uplinks: 40 ms.
    assert CollectiveLink(PORT, 5, "star").seconds(MESSAGE) == pytest.approx(0.080)
    star = CollectiveLink(PORT, 5, "star", pull_flows=2.75)
    assert star.seconds(MESSAGE) == pytest.approx(0.040)
    # The round trip: 2 steps of 3 hops (6 ms), and the busiest uplink's 2.75 pulls of 10
    # packets (27.5 ms); the push's credit comes back after the steps' latency alone.
    assert star.round_trip_s(MESSAGE) == pytest.approx(0.0335)
    assert star.credit_s(MESSAGE) == pytest.approx(0.006)
    assert CollectiveLink(PORT, 5, "star").credit_s(MESSAGE) == pytest.approx(0.006)  # no pulls apart: completion


def test_the_next_push_starts_at_the_credit_not_after_the_pulls() -> None:
    # Two layers of 3,610 values (one 14,440-byte partition each), ready 1 ms into backward;
    # P3 with one partition of credit. Push 1 holds the port 1-41 ms, its credit is back at
    # 47 ms (6 ms of steps), so push 2 holds it 47-87 ms; each completes 33.5 ms after it left
    # the port (the pulls): 74.5 and 120.5 ms.
    layers = [Layer(0, "a", 3610, 0.0, 0.0), Layer(1, "b", 3610, 0.0, 0.001)]
    star = CollectiveLink(PORT, 5, "star", pull_flows=2.75)
    steady = simulate(layers, create("p3", partition_bytes=14_440), star, overlap_forward=False).steady
    records = sorted(steady.transfers, key=lambda r: r.start)
    assert [r.start for r in records] == pytest.approx([0.001, 0.047])
    assert [r.done for r in records] == pytest.approx([0.0745, 0.1205])
    # Without the pulls apart the credit waits for completion: push 2 starts at 81 + 6 = 87 ms.
    whole = simulate(layers, create("p3", partition_bytes=14_440), CollectiveLink(PORT, 5, "star"),
                     overlap_forward=False).steady
    assert sorted(r.start for r in whole.transfers) == pytest.approx([0.001, 0.087])


def test_a_kernel_tcp_push_gives_its_credit_back_as_it_leaves_the_link() -> None:
    # The same two partitions over kernel TCP: sendall returns once the socket's buffer holds the
    # push, so push 2 holds the port right after push 1, 41-81 ms, and completes at 114.5 ms.
    layers = [Layer(0, "a", 3610, 0.0, 0.0), Layer(1, "b", 3610, 0.0, 0.001)]
    star = CollectiveLink(PORT, 5, "star", pull_flows=2.75, credit_on_send=True)
    assert star.credit_s(MESSAGE) == 0.0
    steady = simulate(layers, create("p3", partition_bytes=14_440), star, overlap_forward=False).steady
    records = sorted(steady.transfers, key=lambda r: r.start)
    assert [r.start for r in records] == pytest.approx([0.001, 0.041])
    assert [r.done for r in records] == pytest.approx([0.0745, 0.1145])
