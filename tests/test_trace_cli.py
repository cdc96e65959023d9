"""`gradfabric experiment trace`'s options reach the sweep's settings (the sweep itself is
replaced: it needs root and a fabric)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from experiments import trace_sweep
from gradfabric.command import cli


def _settings(monkeypatch: pytest.MonkeyPatch, *argv: str) -> Any:
    seen: list[Any] = []
    monkeypatch.setattr(trace_sweep, "run_trace_sweep", lambda settings: seen.append(settings))
    assert cli.main(["experiment", "trace", *argv]) == 0
    return seen[0]


def test_the_lossy_sweep_command_plans_its_pairs(monkeypatch: pytest.MonkeyPatch) -> None:
    s = _settings(monkeypatch, "--scenarios", "lossy-1", "--configs", "ddp-tcp,ddp-tcp-rto,p3-tcp,transport,"
                  "dropping,dlcp", "--repetitions", "10")
    assert s.sweep == {"lossy-1": ("ddp-tcp", "ddp-tcp-rto", "p3-tcp", "transport", "dropping", "dlcp")}
    runs = trace_sweep.plan_runs(s.sweep, s.repetitions)
    assert len(runs) == 60 and {r.seed for r in runs} == set(range(2000, 2010))
    assert s.starved_share == trace_sweep.STARVED == 0.5


def test_starved_share_is_an_option(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    assert _settings(monkeypatch, "--scenarios", "lossy-0.1", "--starved-share", "1").starved_share == 1.0
    assert cli.main(["experiment", "trace", "--starved-share", "0"]) != 0
    assert "--starved-share must be in (0, 1]" in capsys.readouterr().err


def test_resume_with_more_rounds_extends_the_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    s = _settings(monkeypatch, "--resume", "/tmp/some-sweep", "--repetitions", "10")
    assert str(s.resume) == "/tmp/some-sweep" and s.extend_to == 10
    assert _settings(monkeypatch, "--resume", "/tmp/some-sweep").extend_to is None


def test_extend_plan_appends_rounds_in_the_same_order() -> None:
    from experiments.errors import ExperimentError

    sweep = {"tcp": ("a", "b", "c", "d")}
    eight = trace_sweep.plan_runs(sweep, 8)
    ten = trace_sweep.extend_plan(eight, sweep, 10)
    assert ten[:32] == eight and len(ten) == 40
    # round 8 starts at configuration 8 mod 4 = a, round 9 at b; seeds 2008, 2009; indexes go on from 32
    assert [(r.index, r.config, r.repetition, r.seed) for r in ten[32:]] == [
        (32, "a", 8, 2008), (33, "b", 8, 2008), (34, "c", 8, 2008), (35, "d", 8, 2008),
        (36, "b", 9, 2009), (37, "c", 9, 2009), (38, "d", 9, 2009), (39, "a", 9, 2009)]
    assert ten[39].run_id == "039-tcp-a-r9"
    with pytest.raises(ExperimentError, match="cannot shorten"):
        trace_sweep.extend_plan(eight, sweep, 7)
    with pytest.raises(ExperimentError, match="cannot be extended"):
        trace_sweep.extend_plan(eight, {"tcp": ("a", "b", "c")}, 10)


def test_resuming_an_extended_sweep_records_its_new_plan(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """The plan on disk gains the new rounds before the fabric boots (an interrupted extension resumes)."""
    import json
    from dataclasses import asdict

    import mininet_topos.launcher
    from experiments.training import grad_values
    from experiments.training.trace_worker import TraceJob

    class Booted(Exception):
        pass

    def no_fabric(*args: Any, **kwargs: Any) -> None:
        raise Booted

    monkeypatch.setattr(mininet_topos.launcher, "Fabric", no_fabric)
    monkeypatch.setattr(grad_values, "load_pool", lambda: None)
    sweep = {"lossy-1": ("ddp-tcp", "dlcp")}
    runs = trace_sweep.plan_runs(sweep, 2)
    (tmp_path / "plan.json").write_text(json.dumps({"command": "x", "sweep": sweep, "repetitions": 2,
                                                    "job": asdict(TraceJob(iterations=15)),
                                                    "runs": [asdict(r) for r in runs]}))
    settings = trace_sweep.TraceSettings(resume=tmp_path, extend_to=3, command="extend")
    with pytest.raises(Booted):
        trace_sweep.run_trace_sweep(settings, say=lambda msg: None)
    meta = json.loads((tmp_path / "plan.json").read_text())
    assert meta["repetitions"] == 3 and len(meta["runs"]) == 6
    assert meta["runs"][4] == {"index": 4, "scenario": "lossy-1", "config": "ddp-tcp", "repetition": 2, "seed": 2002}
    assert meta["extended"][0]["from"] == 2 and meta["extended"][0]["to"] == 3


def test_readme_commands_for_the_remaining_scenarios_plan_what_it_says(monkeypatch: pytest.MonkeyPatch) -> None:
    """experiments/README.md's commands for the remaining scenarios: each a sweep of one scenario,
    four configurations, 8 rounds (32 runs), --starved-share 1, its own folder."""
    import re
    import shlex
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "experiments" / "README.md").read_text()
    section = text.split("#### The remaining scenarios at the same setting", 1)[1]
    block = section.split("```", 2)[1].replace("\\\n", " ")
    commands = [shlex.split(line.split("#")[0]) for line in block.splitlines() if "gradfabric" in line]
    sweeps = [c for c in commands if "--scenarios" in c]
    assert sorted(c[c.index("--scenarios") + 1] for c in sweeps) == ["hotspot", "incast", "lossy-0.1", "multitenant"]
    outs = set()
    for argv in sweeps:
        args = argv[argv.index("gradfabric") + 3:]  # after "gradfabric experiment trace"
        s = _settings(monkeypatch, *args)
        runs = trace_sweep.plan_runs(s.sweep, s.repetitions)
        assert len(s.sweep) == 1 and len(next(iter(s.sweep.values()))) == 4 and len(runs) == 32
        assert s.starved_share == 1.0 and s.job.iterations == 15
        outs.add(str(s.out))
    assert len(outs) == 4
    assert "Each is 32 runs (8 pairs per configuration)" in re.sub(r"\s+", " ", section)
    extend = [c for c in commands if "--repetitions" in c and "--resume" in c]
    assert extend and _settings(monkeypatch, *extend[0][extend[0].index("gradfabric") + 3:]).extend_to == 10


def test_report_of_an_extended_sweep_names_the_extension(tmp_path: Any) -> None:
    """results.md keeps the first command and says how the sweep was extended."""
    import json
    import shutil

    from experiments.trace_report import write_trace_report

    folder = tmp_path / "sweep"
    shutil.copytree(Path(__file__).resolve().parents[1] / "experiments/results/training/trace-tcp-20261126", folder)
    meta = json.loads((folder / "plan.json").read_text())
    assert "extended" not in meta
    write_trace_report(folder)
    assert "Extended from" not in (folder / "results.md").read_text()
    meta["extended"] = [{"at": "2026-11-26 18:00:00 UTC", "from": 8, "to": 10}]
    (folder / "plan.json").write_text(json.dumps(meta))
    write_trace_report(folder)
    text = (folder / "results.md").read_text()
    assert text.index(f"Command: `{meta['command']}`") < text.index(
        "Extended from 8 to 10 rounds at 2026-11-26 18:00:00 UTC: `gradfabric experiment trace --resume DIR "
        "--repetitions 10`")
