"""`sim validate`'s split of the hosts' transport that defers window cuts on reordering (its own
host-cost family and scenario rows) and its leaving out of timing-logged sweeps, on hand-made
records."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator.errors import SimulatorError
from simulator.fabric_runs import REORDER_DEFER, load_runs, timing_logged
from simulator.host_model import cross_validated
from simulator.run_model import cost_family
from tests.sim_validate_helpers import TRACE_PLAN, iterations, ring_record, write_sweep

GSO = "2026-11-26 15:00:00 UTC"


def _dlcp(deferred: list[int | None], code: str) -> dict[str, object]:
    """A full-DLCP run of two ranks, each recording ``deferred`` window cuts (None: no such record)."""
    ranks = {}
    for r, cuts in enumerate(deferred):
        totals: dict[str, int] = {"packets": 10, "retransmitted": 0}
        if cuts is not None:
            totals["window_cuts_deferred"] = cuts
        ranks[str(r)] = {"records": iterations(2), "totals": totals}
    return {"scenario": "tcp", "config": "dlcp", "started": GSO, "code": code, "jobs": {"1": {"ranks": ranks}}}


def _sweeps(root: Path) -> None:
    tcp = {**ring_record("tcp", "ddp-tcp"), "started": GSO}
    write_sweep(root, "old", {"000-dlcp-r0": _dlcp([None, None], "aaaa"), "001-tcp-r0": {**tcp, "code": "aaaa"}},
                plan=TRACE_PLAN)
    write_sweep(root, "new", {"000-dlcp-r0": _dlcp([0, 3], "bbbb"), "001-tcp-r0": {**tcp, "code": "bbbb"},
                              "002-tcp-r0": {**tcp, "code": "cccc"}}, plan=TRACE_PLAN)


def test_runs_that_record_deferred_cuts_are_their_own_family_and_rows(tmp_path: Path) -> None:
    _sweeps(tmp_path)
    by = {(r.sweep, r.config, r.code): r for r in load_runs(tmp_path)}
    old, new = by[("old", "dlcp", "aaaa")], by[("new", "dlcp", "bbbb")]
    assert old.deferred_cuts is None and new.deferred_cuts == 3
    assert old.family == "trace/dlcp+ecn (gso)" and new.family == f"trace/dlcp+ecn (gso, {REORDER_DEFER})"
    assert cost_family(new, "dlcp-recorded") != cost_family(old, "dlcp-recorded")
    assert old.scenario_label == "tcp (gso)" and new.scenario_label == f"tcp (gso, {REORDER_DEFER})"
    # Kernel TCP's run of the same sweep and code ran on it: the same scenario rows, but kernel
    # TCP's family (it does not use the DLCP transport); another code in that sweep is not known to.
    tcp_new, tcp_other = by[("new", "ddp-tcp", "bbbb")], by[("new", "ddp-tcp", "cccc")]
    assert tcp_new.scenario_label == new.scenario_label and tcp_new.family == "trace/tcp"
    assert tcp_other.scenario_label == "tcp (gso)" and by[("old", "ddp-tcp", "aaaa")].transport_code == ""


def test_a_family_of_one_sweep_gets_no_cost_from_the_old_transport(tmp_path: Path) -> None:
    # Before the split the new run's fold would be fitted on the old sweep's run (same family);
    # with it, no other sweep ran the new family: no cost, the run is left uncalibrated.
    _sweeps(tmp_path)
    runs = [r for r in load_runs(tmp_path) if r.config == "dlcp"]
    calibration = [(r.sweep, cost_family(r, "dlcp-recorded"), r.p50_s) for r in runs]
    curves = [[0.05, 0.1, 0.2] for _ in runs]
    costs = cross_validated(calibration, curves, grid=[1e-6, 2e-6, 3e-6])
    assert len({f for _, f, _ in calibration}) == 2 and costs == {}
    # One family: each run's cost from the other's curve (its 0.1 s p50 at 2 us).
    merged = cross_validated([(sw, "one", p) for sw, _, p in calibration], curves, grid=[1e-6, 2e-6, 3e-6])
    assert merged == {("new", "one"): (2e-6, 1), ("old", "one"): (2e-6, 1)}


def test_sweeps_with_timing_logs_are_left_out(tmp_path: Path) -> None:
    _sweeps(tmp_path)
    write_sweep(tmp_path / "new", "after-timing", {"000-dlcp-r0": _dlcp([1, 1], "bbbb")}, plan=TRACE_PLAN)
    (tmp_path / "new" / "after-timing" / "timing").mkdir()
    write_sweep(tmp_path / "new", "no-logs", {"000-dlcp-r0": _dlcp([1, 1], "bbbb")}, plan=TRACE_PLAN)
    assert timing_logged(tmp_path) == ["after-timing"]
    sweeps = sorted({r.sweep for r in load_runs(tmp_path)})
    assert sweeps == ["new", "no-logs", "old"]
    with pytest.raises(SimulatorError, match="but those of timing-logged sweeps: after-timing"):
        load_runs(tmp_path / "new" / "after-timing")
