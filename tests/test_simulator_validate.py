"""`sim validate`: the port model's figures by hand, and a validation of synthetic runs."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from gradfabric.command.cli import main
from simulator.errors import SimulatorError
from simulator.fabric_model import port_model


def test_port_model_by_scenario() -> None:
    above = port_model(port_pps=1000, queue_packets=32, background="tcp", job_above_background=True)
    assert (above.share, above.queued_packets, above.loss_rate) == (1.0, 0.5, 0.0)
    assert above.step_latency_s == pytest.approx(3.5e-3)  # 3 hops + half a packet, 1 ms each
    fifo = port_model(port_pps=1000, queue_packets=32, background="tcp", job_above_background=False)
    # CUBIC keeps 0.7..1 of the queue: 27.2 packets; Mathis with a 30.2-packet window: (1.22 / 30.2)^2.
    assert fifo.share == 0.5 and fifo.queued_packets == pytest.approx(27.2)
    assert fifo.loss_rate == pytest.approx(0.0016320, rel=1e-4)
    udp = port_model(port_pps=1000, queue_packets=32, background="udp", job_above_background=False, udp_share=0.3)
    assert udp.share == pytest.approx(0.7) and udp.loss_rate == 0.0
    with pytest.raises(SimulatorError, match="unknown background"):
        port_model(port_pps=1000, queue_packets=32, background="icmp", job_above_background=False)


def _run(folder: Path, index: int, scenario: str, config: str, iterations: list[float]) -> None:
    records = [{"iteration": i, "iteration_s": t} for i, t in enumerate([9.9] + iterations)]  # iteration 0 left out
    run = {"index": index, "scenario": scenario, "config": config, "status": "ok", "port_pps": 1000,
           "jobs": {"1": {"ranks": {"0": {"records": records}}}}}
    (folder / "runs").mkdir(parents=True, exist_ok=True)
    (folder / "runs" / f"{index:03d}-{scenario}-{config}.json").write_text(json.dumps(run))


def test_validate_predicts_a_one_layer_job(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    job = tmp_path / "job.csv"
    job.write_text("name,numel,forward_us,backward_us\nw,722,1000,1000\n")
    runs = tmp_path / "runs"
    _run(runs / "a", 0, "tcp", "qos", [0.010, 0.012])
    _run(runs / "b", 0, "tcp", "qos", [0.011])  # the other sweep: its fit (host cost 0) predicts sweep a
    _run(runs / "a", 1, "storm", "qos", [0.020])  # a scenario the model does not know
    _run(runs / "a", 2, "tcp", "gloo", [0.030])  # gloo ran in sweep a only: no calibration
    out = tmp_path / "out"
    notes = tmp_path / "notes.md"
    notes.write_text("Cause of a swapped pair: measured here.\n")
    assert main(["sim", "validate", str(runs), "--job-trace", str(job), "--notes", str(notes), "--out", str(out)]) == 0
    with (out / "validation.csv").open() as f:
        rows = {(r["scenario"], r["configuration"]): r for r in csv.DictReader(f)}
    # By hand: 2,888 bytes at 1,000 x 1,444 B/s hold the port 2 ms; two ring steps of 3.5 ms
    # latency; forward 1 ms + backward 1 ms + 9 ms of all-reduce after it = 11 ms.
    qos = rows[("tcp", "qos")]
    assert (qos["sweeps"], qos["runs"], qos["CPU starvation s"]) == ("2", "2", "-")
    assert qos["p50 measured (ms)"] == "11.0" and qos["p50 predicted (ms)"] == "11.0"
    assert qos["p99 predicted (ms)"] == "11.0" and qos["p50 error"] == "+0%"
    assert qos["host cost (us/pkt, calibrated on other sweeps)"] == "0 (on 1+ runs)"
    assert rows[("storm", "qos")]["p50 error"] == "out of reach"
    assert "uncalibrated" in rows[("tcp", "gloo")]["notes"]
    assert (out / "validation.png").stat().st_size > 0
    md = (out / "validation.md").read_text()
    assert "Median absolute error of the predicted iteration p50: **0%** over 1" in md
    assert f"--notes {notes}" in md  # the command that made it
    # the notes sit under the ranking, before the host costs
    assert md.index("**Ranking**") < md.index("Cause of a swapped pair: measured here.") < md.index("**Host cost")
    assert main(["sim", "validate", str(runs), "--notes", str(tmp_path / "none.md"), "--out", str(out)]) == 1


def test_validate_leaves_out_the_sweeps_named(tmp_path: Path) -> None:
    job = tmp_path / "job.csv"
    job.write_text("name,numel,forward_us,backward_us\nw,722,1000,1000\n")
    runs = tmp_path / "runs"
    _run(runs / "a", 0, "tcp", "qos", [0.011])
    _run(runs / "b", 0, "tcp", "qos", [0.011])
    _run(runs / "later-1", 0, "tcp", "qos", [0.500])  # a sweep still running
    out = tmp_path / "out"
    assert main(["sim", "validate", str(runs), "--job-trace", str(job), "--leave-out", "later-", "--out", str(out)]) == 0
    with (out / "validation.csv").open() as f:
        (qos,) = list(csv.DictReader(f))
    assert (qos["sweeps"], qos["runs"], qos["p50 measured (ms)"]) == ("2", "2", "11.0")  # later-1's 500 ms not read
    md = (out / "validation.md").read_text()
    assert "--leave-out later-" in md and "Left out by the command (`--leave-out later-`): the runs of later-1." in md


def test_validate_needs_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", "validate", str(tmp_path), "--out", str(tmp_path / "o")]) == 1
    assert "no raw runs" in capsys.readouterr().err


def test_a_trace_driven_job_is_the_h100_trace_scaled() -> None:
    from simulator.cli import DEFAULT_TRACES
    from simulator.traces import load_trace
    from simulator.run_model import scaled_trace

    real = load_trace(DEFAULT_TRACES / "h100_pytorch_layer_traces.csv", model="resnet50", precision="bf16")
    # 100 Gbit/s over 20,000 frames of 1,500 bytes a second is a ratio of 416.7; k = 50 leaves b = 8.33.
    job = scaled_trace({"model": "resnet50", "precision": "bf16", "real_gbps": 100, "port_pps": 20000, "k": 50},
                       DEFAULT_TRACES)
    assert job.compute_s == pytest.approx(real.compute_s * 50)
    assert job.layers[-1].numel == -(-real.layers[-1].numel * 3 // 25)  # ceil(n / (25/3))
    same = scaled_trace({"model": "resnet50", "precision": "bf16", "b": 25 / 3, "k": 50}, DEFAULT_TRACES)
    assert [l.numel for l in same.layers] == [l.numel for l in job.layers]


def test_validate_with_a_cache_reads_the_curves_it_kept_and_writes_the_same_table(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import simulator.validate as v
    from simulator.run_model import DRAWS_PER_RUN

    job = tmp_path / "job.csv"
    job.write_text("name,numel,forward_us,backward_us\nw,722,1000,1000\n")
    runs = tmp_path / "runs"
    _run(runs / "a", 0, "tcp", "qos", [0.010, 0.012])
    _run(runs / "b", 0, "tcp", "qos", [0.011])
    cache = tmp_path / "cache"
    base = ["sim", "validate", str(runs), "--job-trace", str(job)]
    assert main([*base, "--out", str(tmp_path / "plain")]) == 0
    assert main([*base, "--cache", str(cache), "--out", str(tmp_path / "first")]) == 0
    (kept,) = list(cache.glob("curves-*.json"))
    assert len(json.loads(kept.read_text())) == 2  # one curve per run
    calls = []
    real = v.predict_run
    monkeypatch.setattr(v, "predict_run", lambda *a, **k: calls.append(k.get("draws", DRAWS_PER_RUN)) or real(*a, **k))
    assert main([*base, "--cache", str(cache), "--out", str(tmp_path / "second")]) == 0
    # Every curve read back: the only predictions left are the table's (draws of 2,000), none on the grid.
    assert calls and set(calls) == {DRAWS_PER_RUN}
    tables = [(tmp_path / d / "validation.csv").read_text() for d in ("plain", "first", "second")]
    assert tables[0] == tables[1] == tables[2]
    # A third sweep lands: only its run is calibrated.
    _run(runs / "c", 0, "tcp", "qos", [0.011])
    calls.clear()
    assert main([*base, "--cache", str(cache), "--out", str(tmp_path / "third")]) == 0
    assert calls.count(v.CALIBRATION_DRAWS) == len(v.COST_GRID)
