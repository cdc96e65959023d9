"""A sweep knows which code its runs ran and stops when the code changes under it."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from experiments import code_version, trace_sweep
from experiments.code_version import CodeChangedError, check_unchanged, snapshot


def _tree(root: Path) -> None:
    (root / "hosts").mkdir(parents=True)
    (root / "hosts" / "receiver.py").write_text("x = 1\n")
    (root / "experiments" / "results").mkdir(parents=True)
    (root / "experiments" / "results" / "run.py").write_text("results are not code\n")
    (root / "p4src").mkdir()
    (root / "p4src" / "dlcp.p4").write_text("control c() {}\n")


def test_a_saved_edit_is_named_and_results_are_not_code(tmp_path: Path) -> None:
    _tree(tmp_path)
    began = snapshot(tmp_path)
    assert sorted(began.files) == ["hosts/receiver.py", "p4src/dlcp.p4"]
    (tmp_path / "experiments" / "results" / "run.py").write_text("a new result\n")
    check_unchanged(tmp_path, began, "before run 1")  # results change during a sweep
    (tmp_path / "hosts" / "receiver.py").write_text("x = 2\n")
    with pytest.raises(CodeChangedError, match=r"before run 2: .*hosts/receiver\.py"):
        check_unchanged(tmp_path, began, "before run 2")
    assert snapshot(tmp_path).fingerprint != began.fingerprint


def test_resuming_a_sweep_whose_code_changed_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from experiments.training import grad_values
    from experiments.training.trace_worker import TraceJob

    monkeypatch.setattr(grad_values, "load_pool", lambda: None)
    runs = trace_sweep.plan_runs({"lossy-1": ("ddp-tcp", "dlcp")}, 2)
    (tmp_path / "plan.json").write_text(json.dumps({
        "command": "x", "sweep": {"lossy-1": ["ddp-tcp", "dlcp"]}, "repetitions": 2,
        "job": asdict(TraceJob(iterations=15)), "runs": [asdict(r) for r in runs],
        "code": {"commit": "abc", "dirty": [], "fingerprint": "0000000000000000"}}))
    with pytest.raises(CodeChangedError, match="differ from those the sweep began with"):
        trace_sweep.run_trace_sweep(trace_sweep.TraceSettings(resume=tmp_path, command="resume"), say=lambda m: None)
    assert "resumed" not in json.loads((tmp_path / "plan.json").read_text())


def test_a_sweep_stops_before_the_run_after_an_edit(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The first run goes; the code changes during it; the sweep stops before the second."""
    import contextlib

    import mininet_topos.launcher
    import mininet_topos.programming
    from experiments.training import grad_values

    real = snapshot(trace_sweep_root())
    edited = code_version.CodeVersion(real.commit, real.dirty, {**real.files, "hosts/receiver.py": "edited"})
    versions = iter([real, real])
    monkeypatch.setattr(code_version, "snapshot", lambda root: next(versions, edited))

    @contextlib.contextmanager
    def fake_fabric(options: Any) -> Any:
        yield type("F", (), {"description_path": tmp_path / "fabric.json"})()

    ran: list[str] = []

    def one_run(site: Any, scenario: Any, config: Any, run: Any, *args: Any) -> dict[str, Any]:
        ran.append(run.run_id)
        raise RuntimeError("no fabric here")  # recorded as a failed run; the sweep goes on

    monkeypatch.setattr(mininet_topos.launcher, "Fabric", fake_fabric)
    monkeypatch.setattr(mininet_topos.programming, "program_fabric", lambda *a: None)
    monkeypatch.setattr(grad_values, "load_pool", lambda: None)
    monkeypatch.setattr(trace_sweep, "TraceSite", lambda fabric: None)
    monkeypatch.setattr(trace_sweep, "run_trace_once", one_run)
    settings = trace_sweep.TraceSettings(sweep={"lossy-1": ("ddp-tcp", "dlcp")}, repetitions=1,
                                         out=tmp_path / "sweep", command="x")
    with pytest.raises(CodeChangedError, match=r"before run 001-lossy-1-dlcp-r0: .*hosts/receiver\.py"):
        trace_sweep.run_trace_sweep(settings, say=lambda m: None)
    assert ran == ["000-lossy-1-ddp-tcp-r0"]
    plan = json.loads((tmp_path / "sweep" / "plan.json").read_text())
    assert plan["code"]["fingerprint"] == real.fingerprint and plan["code"]["commit"] == real.commit


def trace_sweep_root() -> Path:
    from gradfabric.paths import ROOT

    return ROOT
