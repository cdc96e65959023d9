"""The sweep runner: a tiny sweep on loopback (real DDP ranks), and a failing run that is
recorded with its logs while the sweep goes on."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from experiments import runner
from experiments.errors import ExperimentError
from experiments.runner import SweepSettings, run_sweep
from experiments.training.ddp_worker import DdpJob


def _settings(tmp_path: Path, configs: tuple[str, ...], repetitions: int) -> SweepSettings:
    return SweepSettings(sweep={"tcp": configs}, repetitions=repetitions, job=replace(DdpJob(), iterations=6),
                         target=0.0, out=tmp_path / "out", loopback=True, command="test sweep")


@pytest.mark.slow
def test_a_tiny_sweep_on_loopback_writes_every_run_and_the_report(tmp_path: Path) -> None:
    lines: list[str] = []
    out = run_sweep(_settings(tmp_path, ("gloo", "reliable"), 1), say=lines.append)
    runs = sorted((out / "runs").glob("*.json"))
    assert [p.name for p in runs] == ["000-tcp-gloo-r0.json", "001-tcp-reliable-r0.json"]
    records = [json.loads(p.read_text()) for p in runs]
    assert all(r["status"] == "ok" for r in records), [r.get("error") for r in records]
    for r in records:
        rank0 = r["jobs"]["1"]["ranks"]["0"]["records"]
        assert [x["iteration"] for x in rank0] == list(range(6))
    # The same seed and no loss: DLCP's reliable all-reduce trains exactly as gloo's.
    accuracy = [[x["accuracy"] for x in r["jobs"]["1"]["ranks"]["0"]["records"]] for r in records]
    assert accuracy[0] == accuracy[1]
    assert records[1]["jobs"]["1"]["ranks"]["0"]["totals"]["packets"] > 0
    assert records[0]["jobs"]["1"]["ranks"]["0"]["totals"]["packets"] == 0  # gloo: no DLCP packets
    result = json.loads((out / "results.json").read_text())
    assert result["meta"]["command"] == "test sweep" and len(result["meta"]["load_at_start"]) == 3
    assert result["summary"]["tcp"]["reliable"]["ok"] == 1
    assert "| reliable | 1 / 0 / 0 |" in (out / "results.md").read_text()
    assert {p.name for p in out.glob("*.png")} == {"accuracy_tcp.png", "iteration_cdf_tcp.png", "speedup_tcp.png"}
    assert any("[  2/2] tcp/reliable" in line for line in lines) and "1 failed" not in lines[-1]


def test_a_failed_run_is_recorded_with_its_logs_and_the_sweep_goes_on(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    def fake_run_once(site: Any, sc: Any, config: Any, run: Any, settings: Any, logs: Path, policies: Path,
                      say: Any) -> dict[str, Any]:
        calls.append(run.config)
        if len(calls) == 1:
            logs.mkdir(parents=True)
            (logs / "job1-rank0.log").write_text("rank 0 crashed here\n")
            raise ExperimentError("job 1 rank 0 exited with 1")
        rank = {"records": [{"iteration": 0, "wall_s": 1.0, "iteration_s": 1.0, "accuracy": 0.5}],
                "totals": {}, "receive": {}}
        return {"jobs": {"1": {"ranks": {"0": rank}}}, "background": [], "switch": {}, "seconds": 1.0}

    monkeypatch.setattr(runner, "run_once", fake_run_once)
    lines: list[str] = []
    out = run_sweep(_settings(tmp_path, ("gloo", "qos", "dlcp"), 2), say=lines.append)
    assert calls == ["gloo", "qos", "dlcp", "qos", "dlcp", "gloo"]  # rotated in the second round
    first = json.loads((out / "runs" / "000-tcp-gloo-r0.json").read_text())
    assert first["status"] == "failed" and "rank 0 exited" in first["error"]
    assert (out / first["logs"] / "job1-rank0.log").read_text() == "rank 0 crashed here\n"
    assert sum(1 for p in (out / "runs").glob("*.json") if json.loads(p.read_text())["status"] == "ok") == 5
    summary = json.loads((out / "results.json").read_text())["summary"]["tcp"]
    assert (summary["gloo"]["ok"], summary["gloo"]["failed"]) == (1, 1)
    assert any("FAILED" in line for line in lines) and "5 ok, 1 failed" in lines[-1]


def test_results_go_to_a_new_timestamped_folder_unless_out_is_given(tmp_path: Path) -> None:
    settings = SweepSettings()
    folder = settings.output_folder()
    assert folder.parent == runner.RESULTS and folder.name[:8].isdigit()
    assert replace(settings, out=tmp_path).output_folder() == tmp_path


def test_pooled_report_sums_the_runs_of_several_folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from experiments.sweep_report import pool

    def fake_run_once(site: Any, sc: Any, config: Any, run: Any, *args: Any) -> dict[str, Any]:
        wall = {"gloo": 4.0, "qos": 2.0}[config.name]
        rank = {"records": [{"iteration": 4, "wall_s": wall, "iteration_s": 1.0, "accuracy": 0.9}],
                "totals": {}, "receive": {}}
        return {"jobs": {"1": {"ranks": {"0": rank}}}, "background": [], "switch": {}, "seconds": 1.0}

    monkeypatch.setattr(runner, "run_once", fake_run_once)
    folders = [run_sweep(replace(_settings(tmp_path, ("gloo", "qos"), 2), out=tmp_path / f"s{i}"), say=lambda _: None)
               for i in range(2)]
    out = pool(folders, tmp_path / "pooled", "pool command")
    result = json.loads((out / "results.json").read_text())
    row = result["summary"]["tcp"]["qos"]
    assert row["ok"] == 4 and row["speedup_vs_gloo"]["median"] == 2.0
    assert result["meta"]["repetitions"] == 4 and len(result["meta"]["pooled_from"]) == 2
    assert "`pool command`" in (out / "results.md").read_text()
