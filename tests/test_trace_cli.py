"""`gradfabric experiment trace`'s options reach the sweep's settings (the sweep itself is
replaced: it needs root and a fabric)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
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


def test_port_rate_option_keeps_b_and_scales_every_time(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """At 5,000 packets/s, 25 Gbit/s real: the capacity ratio is 25e9 / (5,000 x 1,500 x 8) = 416.67;
    b stays 20,000 packets/s' 13.02 (104.17 / 8), so k = 416.67 / 13.02 = 32, and every time is 4x
    the reference's: probe timer 0.2 -> 0.8 s, reorder allowance 5 -> 20 ms, tuned rto_min 1 ms x 32
    = 32 ms, request/response every 50 -> 200 ms; the switches forward 5,000 packets/s from the same
    51-packet queues; the DLCP ranks pace at 5,000 packets/s."""
    import json

    import mininet_topos.launcher
    import yaml
    from experiments.trace_configs import scaled_background, trace_scenario
    from experiments.training import grad_values

    run_sweep = trace_sweep.run_trace_sweep
    s = _settings(monkeypatch, "--scenarios", "multitenant,hotspot", "--configs", "ddp-tcp,dlcp,dlcp-merged",
                  "--port-pps", "5000", "--iterations", "10", "--out", str(tmp_path))
    job = s.job
    assert (job.port_pps, job.rate_pps, job.iterations) == (5000, 5000, 10)
    assert job.k == pytest.approx(32.0, abs=1e-6) and job.rule.b == pytest.approx(13.0208, abs=1e-3)
    assert job.rule.queue_packets() == 51
    rr = [f for f in scaled_background(trace_scenario("multitenant").background, job) if f.protocol == "rr"]
    assert [f.interval_s for f in rr] == [pytest.approx(0.2)]
    with_k = _settings(monkeypatch, "--scenarios", "hotspot", "--port-pps", "5000", "--k", "16").job
    assert with_k.k == 16 and with_k.rule.b == pytest.approx(26.04, abs=0.01)
    default = _settings(monkeypatch, "--scenarios", "hotspot").job
    assert (default.port_pps, default.rate_pps, default.k) == (20_000, 20_000, 8)

    class Booted(Exception):
        pass

    seen: list[Any] = []

    def no_fabric(options: Any) -> None:
        seen.append(options.topo)
        raise Booted

    monkeypatch.setattr(mininet_topos.launcher, "Fabric", no_fabric)
    monkeypatch.setattr(grad_values, "load_pool", lambda: None)
    with pytest.raises(Booted):
        run_sweep(s, say=lambda msg: None)
    meta = json.loads((tmp_path / "plan.json").read_text())
    assert meta["scale"]["k"] == pytest.approx(32.0) and meta["scale"]["emulated_mbps"] == pytest.approx(60.0)
    assert meta["timers"] == {"probe_timeout": pytest.approx(0.8), "reorder_grace": pytest.approx(0.02),
                              "tuned_rto_min": pytest.approx(0.032), "rr_interval": pytest.approx(0.2)}
    topo = yaml.safe_load(Path(seen[0]).read_text())
    assert Path(seen[0]) == tmp_path / "topology.yaml" == Path(meta["topology"])
    assert topo["defaults"]["switch"]["egress_rate_pps"] == 5000 and topo["defaults"]["switch"]["queue_depth"] == 51
    assert len(meta["runs"]) == 2 * 3 * 10


def test_transport_timers_at_the_reference_k_are_the_endpoints_defaults() -> None:
    import inspect

    from experiments.scaling import transport_timers
    from hosts.endpoint import Endpoint

    defaults = inspect.signature(Endpoint.__init__).parameters
    assert transport_timers(8.0) == {name: defaults[name].default for name in ("probe_timeout", "reorder_grace")}
    assert transport_timers(32.0)["reorder_grace"] == pytest.approx(4 * defaults["reorder_grace"].default)


def test_no_round_after_is_parsed_with_its_zone(monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    s = _settings(monkeypatch, "--scenarios", "hotspot", "--no-round-after", "2026-11-27T18:30Z")
    assert s.no_round_after == datetime(2026, 11, 27, 18, 30, tzinfo=timezone.utc)
    assert _settings(monkeypatch, "--scenarios", "hotspot").no_round_after is None
    assert _settings(monkeypatch, "--scenarios", "hotspot", "--runs-end-by", "2026-11-27T18:35:00+00:00"
                     ).runs_end_by == datetime(2026, 11, 27, 18, 35, tzinfo=timezone.utc)
    assert cli.main(["experiment", "trace", "--no-round-after", "2026-11-27T18:30"]) != 0
    assert "give a zone" in capsys.readouterr().err


def test_no_round_starts_after_the_stopping_time_but_a_begun_round_finishes() -> None:
    runs = trace_sweep.plan_runs({"hotspot": ("ddp-tcp", "dlcp", "dlcp-merged")}, 3)
    stop = datetime(2026, 11, 27, 18, 30, tzinfo=timezone.utc)
    before, after = stop - timedelta(seconds=1), stop + timedelta(minutes=5)
    assert [trace_sweep.round_may_start(runs, r, after, stop) for r in runs[2:]] == \
        [True, False, True, True, False, True, True]  # resumed mid-round 0: that round finishes
    assert all(trace_sweep.round_may_start(runs, r, before, stop) for r in runs)
    assert all(trace_sweep.round_may_start(runs, r, after, None) for r in runs)
    # a round of 400 s started 10 min before the end is allowed, 5 min before it is not
    end = datetime(2026, 11, 27, 18, 35, tzinfo=timezone.utc)
    opening = runs[3]
    assert trace_sweep.round_may_start(runs, opening, end - timedelta(minutes=10), stop, end, 400.0)
    assert not trace_sweep.round_may_start(runs, opening, end - timedelta(minutes=5), stop, end, 400.0)
    assert trace_sweep.round_may_start(runs, runs[4], end - timedelta(minutes=5), stop, end, 400.0)


def test_completed_rounds_counts_whole_rounds_from_the_first() -> None:
    runs = trace_sweep.plan_runs({"incast": ("ddp-tcp", "dlcp")}, 3)
    ids = [r.run_id for r in runs]
    assert trace_sweep.completed_rounds(runs, set(ids[:4])) == 2
    assert trace_sweep.completed_rounds(runs, set(ids[:3])) == 1
    assert trace_sweep.completed_rounds(runs, set(ids[1:])) == 0
    assert trace_sweep.completed_rounds(runs, set(ids)) == 3


def test_report_of_a_stopped_sweep_says_how_many_rounds(tmp_path: Any) -> None:
    """results.md of a sweep ended by --no-round-after names the rule and the rounds completed."""
    import json
    import re
    import shutil

    from experiments.trace_report import write_trace_report

    folder = tmp_path / "sweep"
    shutil.copytree(Path(__file__).resolve().parents[1] / "experiments/results/training/trace-tcp-20261126", folder)
    meta = json.loads((folder / "plan.json").read_text())
    meta["stopped"] = {"at": "2026-11-27 18:31:02 UTC", "no_round_after": "2026-11-27T18:30:00+00:00",
                       "runs_end_by": "2026-11-27T18:35:00+00:00", "rounds_completed": 3}
    (folder / "plan.json").write_text(json.dumps(meta))
    write_trace_report(folder)
    text = re.sub(r"\s+", " ", (folder / "results.md").read_text())
    assert f"3 of {meta['repetitions']} planned rounds completed" in text
    assert "3 pairs per configuration" in text
    assert "no round after 2026-11-27T18:30:00+00:00; runs end by 2026-11-27T18:35:00+00:00" in text
