"""Each DLCP mechanism on and off, measured in a burst on both targets (tests/dlcp_burst.py).

A background flow and a DLCP job share a rate-limited port. The assertions are about what
leaves the switch (loss, delay, departure order, ECN bits, ports) and about the counters;
they would fail if dropping were decided after the queue (important packets would wait as
long and be tail-dropped as often as without it) or if two mechanisms shared a knob.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from gradfabric.paths import P4SRC
from tests.dlcp_burst_bmv2 import run_bmv2
from tests.dlcp_burst import (
    DROP_THRESHOLD,
    ECN_THRESHOLD,
    EARLY,
    JOB,
    MEMBERS,
    OUT_PORT,
    RED,
    BurstResult,
    Scenario,
    commodity_scenario,
    dropping_scenario,
    ecn_scenario,
    priority_scenario,
    run_embedded,
    spraying_scenario,
    together_scenario,
)
from tests.p4c_builds import p4c_build

CE = 3
#: Each member's share of one randomly sprayed message stays within +-25% of an even split
#: (800 packets over 4 members: more than 4 standard deviations).
SPRAY_TOLERANCE = 0.25
TARGETS = ["embedded", pytest.param("bmv2", marks=[pytest.mark.bmv2, pytest.mark.slow])]


@pytest.fixture(scope="module")
def bmv2_json() -> Path:
    return p4c_build(P4SRC / "dlcp.p4").device_config


@pytest.fixture
def run(request: pytest.FixtureRequest, tmp_path: Path):
    """run(target, scenario) -> BurstResult."""
    count = iter(range(100))

    def go(target: str, scenario: Scenario) -> BurstResult:
        if target == "embedded":
            return run_embedded(scenario)
        json_path = request.getfixturevalue("bmv2_json")
        return run_bmv2(scenario, json_path, tmp_path / f"run{next(count)}")

    return go


def p(values: np.ndarray, q: float) -> float:
    return float(np.percentile(values, q))


@pytest.mark.parametrize("target", TARGETS)
def test_dropping_before_the_queue_protects_important_packets(run, target: str) -> None:
    off, on = run(target, dropping_scenario(False)), run(target, dropping_scenario(True))
    # Off: the queue overflows and tail drop takes important and background packets too.
    assert off.lost("important") > 0 and off.counters("DlcpIngress.ingress_drops", EARLY) == 0
    # On: only drop-eligible small gradients are lost, all of them counted as early drops.
    assert on.lost("important") == 0 and on.lost("background") == 0
    lost = {q.index for q in on.scenario.packets if q.index not in on.delivered}
    assert lost and {on.kind(i) for i in lost} == {"eligible"}
    assert on.counters("DlcpIngress.ingress_drops", EARLY) == len(lost)
    assert on.counters("DlcpIngress.early_drops", JOB) == len(lost)
    assert 0 < len(on.of("eligible")) - len(lost)   # those that found the queue short passed
    # The important packets wait less: the eligible ones never took their queue slots.
    assert p(on.delays_ms("important"), 50) < p(off.delays_ms("important"), 50)
    assert p(on.delays_ms("important"), 99) < 0.85 * p(off.delays_ms("important"), 99)
    # Dropping alone marks nothing; port_tx counts exactly what left.
    assert all(d.ecn != CE for d in on.delivered.values())
    assert on.counters("DlcpEgress.port_tx", OUT_PORT * 8) == len(on.delivered)
    if target == "embedded":   # the exact rule: eligible and its queue >= threshold on arrival
        expected = {i for i, depth in on.depth_q0.items() if on.kind(i) == "eligible" and depth >= DROP_THRESHOLD}
        assert on.early_dropped == expected


@pytest.mark.parametrize("target", TARGETS)
def test_ecn_marks_and_drops_nothing(run, target: str) -> None:
    off, on = run(target, ecn_scenario(False)), run(target, ecn_scenario(True))
    for result in (off, on):
        assert len(result.delivered) == len(result.scenario.packets)   # nothing dropped
        assert result.counters("DlcpIngress.ingress_drops", EARLY) == 0
    assert all(d.ecn != CE for d in off.delivered.values())
    marked = [d for d in on.delivered.values() if d.ecn == CE]
    assert marked and {on.kind(d.index) for d in marked} <= {"important", "eligible"}   # the job's only
    assert all(d.ecn != CE for d in on.delivered.values() if on.kind(d.index) == "background")
    assert on.counters("DlcpEgress.ecn_marks", JOB) == len(marked)
    if target == "embedded":   # CE exactly when its queue held the threshold or more on arrival
        for d in on.delivered.values():
            if on.kind(d.index) != "background":
                assert (d.ecn == CE) == (d.depth_at_arrival >= ECN_THRESHOLD), d


@pytest.mark.parametrize("target", TARGETS)
def test_priority_lets_front_layers_leave_first(run, target: str) -> None:
    off, on = run(target, priority_scenario(False)), run(target, priority_scenario(True))

    def times(r: BurstResult, kind: str) -> list[float]:
        return sorted(r.delivered[q.index].time_us for q in r.of(kind))

    # Off: one FIFO queue, the front layers leave after every back-layer packet.
    assert min(times(off, "front")) > max(times(off, "important"))
    # On: their own queue, so they wait behind their own packets only: less than the back
    # layers queued before them (each queue is paced on its own, BMv2's model), and far less
    # than behind everything.
    assert p(on.delays_ms("front"), 50) < 0.75 * p(on.delays_ms("important"), 50)
    assert p(on.delays_ms("front"), 99) < p(off.delays_ms("front"), 50)
    assert len(on.delivered) == len(on.scenario.packets)
    assert on.counters("DlcpEgress.port_tx", OUT_PORT * 8 + 7) == len(on.of("front"))
    assert on.counters("DlcpEgress.port_tx", OUT_PORT * 8 + 1) == len(on.of("important"))
    assert off.counters("DlcpEgress.port_tx", OUT_PORT * 8 + 7) == 0


@pytest.mark.parametrize("target", TARGETS)
def test_spraying_spreads_a_message_and_keeps_tcp_on_one_member(run, target: str) -> None:
    off, on = run(target, spraying_scenario(None)), run(target, spraying_scenario("spray_random"))
    for result in (off, on):
        assert len(result.delivered) == len(result.scenario.packets)
        assert len({result.delivered[q.index].port for q in result.of("tcp")}) == 1
    assert len({off.delivered[q.index].port for q in off.of("important")}) == 1
    sprayed = Counter(on.delivered[q.index].port for q in on.of("important"))
    even = len(on.of("important")) / len(MEMBERS)
    assert set(sprayed) == set(MEMBERS)
    assert all(abs(sprayed[m] - even) <= SPRAY_TOLERANCE * even for m in MEMBERS), sprayed
    per_port = Counter(d.port for d in on.delivered.values())
    assert all(on.counters("DlcpEgress.port_tx", m * 8) == per_port[m] for m in MEMBERS)


@pytest.mark.parametrize("target", TARGETS)
def test_all_mechanisms_together(run, target: str) -> None:
    r = run(target, together_scenario())
    lost = {q.index for q in r.scenario.packets if q.index not in r.delivered}
    assert lost and {r.kind(i) for i in lost} == {"eligible"}
    assert r.counters("DlcpIngress.ingress_drops", EARLY) == len(lost)
    # Round-robin spraying alternates the job's packets over both members; background stays on one.
    ports = Counter(r.delivered[q.index].port for q in r.scenario.packets
                    if q.index in r.delivered and r.kind(q.index) != "background")
    assert set(ports) == {2, 3}
    assert len({r.delivered[q.index].port for q in r.of("background")}) == 1
    # Front layers: their own queue on each member, so they wait less than the important
    # back-layer packets queued with the burst.
    assert p(r.delays_ms("front"), 50) < p(r.delays_ms("important"), 50)
    assert r.counters("DlcpEgress.port_tx", 2 * 8 + 7) + r.counters("DlcpEgress.port_tx", 3 * 8 + 7) == len(r.of("front"))
    marked = sum(d.ecn == CE for d in r.delivered.values())
    assert r.counters("DlcpEgress.ecn_marks", JOB) == marked


@pytest.mark.parametrize("target", TARGETS)
def test_the_commodity_profile_drops_not_ect_early_and_marks_the_rest(run, target: str) -> None:
    """The same burst as dropping on/off, marked by hosts for a commodity switch: the queue's
    step drops the Not-ECT (eligible) packets before they take a slot, marks ECN-capable ones
    (important and background alike: a DSCP switch knows no job), and the job's own drop
    class and ECN threshold do nothing."""
    off, r = run(target, dropping_scenario(False)), run(target, commodity_scenario())
    lost = {q.index for q in r.scenario.packets if q.index not in r.delivered}
    assert lost and {r.kind(i) for i in lost} == {"eligible"}
    assert r.counters("DlcpIngress.ingress_drops", RED) == len(lost)
    assert r.counters("DlcpIngress.queue_red_drops", OUT_PORT * 8) == len(lost)
    assert r.counters("DlcpIngress.ingress_drops", EARLY) == 0 and r.counters("DlcpIngress.early_drops", JOB) == 0
    assert r.counters("DlcpEgress.ecn_marks", JOB) == 0
    marked = [d for d in r.delivered.values() if d.ecn == CE]
    assert {r.kind(d.index) for d in marked} == {"important", "background"}
    assert r.counters("DlcpEgress.queue_ecn_marks", OUT_PORT * 8) == len(marked)
    assert p(r.delays_ms("important"), 99) < 0.85 * p(off.delays_ms("important"), 99)
    if target == "embedded":   # the exact rule: Not-ECT and its queue >= threshold on arrival
        expected = {i for i, depth in r.depth_q0.items() if r.kind(i) == "eligible" and depth >= DROP_THRESHOLD}
        assert r.early_dropped == expected
        assert all((d.ecn == CE) == (d.depth_at_arrival >= DROP_THRESHOLD) for d in r.delivered.values())
