"""A stopped trace sweep's remaining rounds, planned in a new folder (experiments.trace_continue)."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest

from experiments.errors import ExperimentError
from experiments.trace_continue import continue_plan
from experiments.trace_sweep import plan_runs


def _stopped_sweep(folder: Path, rounds: int, completed: int) -> dict:
    runs = [{"index": r.index, "scenario": r.scenario, "config": r.config, "repetition": r.repetition,
             "seed": r.seed} for r in plan_runs({"tcp": ("ddp-tcp", "dlcp", "p3-tcp")}, rounds)]
    meta = {"command": "gradfabric experiment trace --scenarios tcp", "started": "2026-11-27 18:29:13 UTC",
            "load_at_start": [5.0, 8.0, 10.0], "repetitions": rounds, "sweep": {"tcp": ["ddp-tcp", "dlcp", "p3-tcp"]},
            "job": {"port_pps": 5000.0, "iterations": 10}, "code": {"fingerprint": "656388eb9f410652"},
            "topology": "/x/topology.yaml", "runs": runs, "elapsed_s": 190.0, "load_at_end": [4.0, 7.0, 9.0],
            "stopped": {"at": "2026-11-27 18:31:55 UTC", "rounds_completed": completed}}
    folder.mkdir(parents=True)
    (folder / "plan.json").write_text(json.dumps(meta))
    return meta


def test_keeps_the_rounds_not_completed_with_their_seeds_and_rotation(tmp_path: Path) -> None:
    old = _stopped_sweep(tmp_path / "a", rounds=4, completed=1)
    new = continue_plan(tmp_path / "a", tmp_path / "b", now=datetime(2026, 11, 27, 19, 55, tzinfo=timezone.utc))
    written = json.loads((tmp_path / "b" / "plan.json").read_text())
    assert written == new
    assert [(r["repetition"], r["seed"]) for r in new["runs"][:3]] == [(1, 2001)] * 3
    assert [r["config"] for r in new["runs"][:3]] == ["dlcp", "p3-tcp", "ddp-tcp"]  # round 1's rotation
    assert {r["repetition"] for r in new["runs"]} == {1, 2, 3} and len(new["runs"]) == 9
    assert new["runs"] == old["runs"][3:]
    assert new["job"] == old["job"] and new["code"] == old["code"] and new["repetitions"] == 4
    for key in ("stopped", "elapsed_s", "load_at_end", "topology"):
        assert key not in new
    assert new["started"] == "2026-11-27 19:55:00 UTC"
    assert new["continues"] == {"folder": str(tmp_path / "a"), "rounds_there": 1, "first_round_here": 1}


def test_refuses_a_sweep_not_stopped_or_complete_or_an_existing_plan(tmp_path: Path) -> None:
    meta = _stopped_sweep(tmp_path / "a", rounds=2, completed=2)
    with pytest.raises(ExperimentError, match="nothing to continue"):
        continue_plan(tmp_path / "a", tmp_path / "b")
    del meta["stopped"]
    (tmp_path / "a" / "plan.json").write_text(json.dumps(meta))
    with pytest.raises(ExperimentError, match="not ended by its stopping rule"):
        continue_plan(tmp_path / "a", tmp_path / "b")
    _stopped_sweep(tmp_path / "c", rounds=3, completed=1)
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "plan.json").write_text("{}")
    with pytest.raises(ExperimentError, match="already holds"):
        continue_plan(tmp_path / "c", tmp_path / "d")
    assert (tmp_path / "d" / "plan.json").read_text() == "{}"


def test_a_stopped_sweep_continued_runs_its_remaining_rounds_and_pools(monkeypatch: pytest.MonkeyPatch,
                                                                       tmp_path: Path) -> None:
    """A sweep stopped after round 0, continued in a new folder: the resumed sweep runs rounds 1-2
    with seeds 2001-2002 and the two folders pool into three pairs."""
    import contextlib
    from typing import Any

    import mininet_topos.launcher
    import mininet_topos.programming
    from experiments import trace_sweep
    from experiments.training import grad_values
    from experiments.trace_summary import load_pooled

    @contextlib.contextmanager
    def fake_fabric(options: Any) -> Any:
        yield type("F", (), {"description_path": tmp_path / "fabric.json"})()

    ran: list[tuple[str, int]] = []

    def one_run(site: Any, scenario: Any, config: Any, run: Any, *args: Any) -> dict[str, Any]:
        ran.append((run.run_id, run.seed))
        p50 = {"ddp-tcp": 2.0, "dlcp": 1.0 + run.repetition}[run.config]  # ratios 2, 1, 2/3
        iters = [{"iteration_s": t, "compute_s": 0.5, "forward_wait_s": 0.0} for t in (9.0, p50, p50)]
        return {"jobs": {"1": {"ranks": {"0": {"records": iters, "totals": {}}}}}, "seconds": 1.0,
                "max_cpu_share": 0.3, "cpu_bound": False}

    monkeypatch.setattr(mininet_topos.launcher, "Fabric", fake_fabric)
    monkeypatch.setattr(mininet_topos.programming, "program_fabric", lambda *a: None)
    monkeypatch.setattr(grad_values, "load_pool", lambda: None)
    monkeypatch.setattr(trace_sweep, "TraceSite", lambda fabric: None)
    monkeypatch.setattr(trace_sweep, "run_trace_once", one_run)
    monkeypatch.setattr("experiments.trace_masks.write_run_masks", lambda *a: None)
    first, second = tmp_path / "first", tmp_path / "second"
    with monkeypatch.context() as m:  # the stopping rule: only round 0 may start
        m.setattr(trace_sweep, "round_may_start", lambda runs, run, *a: run.repetition == 0)
        trace_sweep.run_trace_sweep(trace_sweep.TraceSettings(sweep={"tcp": ("ddp-tcp", "dlcp")}, repetitions=3,
                                                              out=first, command="first"), say=lambda m: None)
    assert json.loads((first / "plan.json").read_text())["stopped"]["rounds_completed"] == 1
    continue_plan(first, second)
    trace_sweep.run_trace_sweep(trace_sweep.TraceSettings(resume=second, command="again"), say=lambda m: None)
    assert ran == [("000-tcp-ddp-tcp-r0", 2000), ("001-tcp-dlcp-r0", 2000), ("002-tcp-dlcp-r1", 2001),
                   ("003-tcp-ddp-tcp-r1", 2001), ("004-tcp-ddp-tcp-r2", 2002), ("005-tcp-dlcp-r2", 2002)]
    assert sorted(p.name for p in (second / "runs").glob("*.json")) == [
        "002-tcp-dlcp-r1.json", "003-tcp-ddp-tcp-r1.json", "004-tcp-ddp-tcp-r2.json", "005-tcp-dlcp-r2.json"]
    _, summary = load_pooled([first, second])
    speedup = summary["tcp"]["dlcp"]["speedup_p50"]
    assert speedup["pairs"] == 3 and speedup["median"] == pytest.approx(1.0)
