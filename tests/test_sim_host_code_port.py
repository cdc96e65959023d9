"""`sim validate`'s host-code term (probes answered in C) and `sim port-predict`'s move of a run
to another port rate, figures by hand."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from simulator.errors import SimulatorError
from simulator.fabric_runs import C_ANSWERS_CODE, Run, load_runs
from simulator.host_model import run_available
from simulator.port_predict import moved
from simulator.run_model import HOST_CODE_CPU, predict_run
from tests.sim_validate_helpers import ONE_LAYER, TRACE_PLAN, iterations, ring_record, write_sweep

GSO = "2026-11-26 15:00:00 UTC"
TRACE_JOB = {"model": "m", "precision": "fp32", "b": 1.0, "k": 8.0}


def _run(config: str, **extra: object) -> Run:
    return Run("s", "r", "tcp", config, 1000.0, 32, [0.01], job=dict(TRACE_JOB), started=GSO, **extra)


def test_a_run_names_its_hosts_code_by_its_record_or_its_commit(tmp_path: Path) -> None:
    totals = {"packets": 10, "retransmitted": 0, "probes_received": 8, "probes_answered_in_c": 3}
    ranks = {str(r): {"records": iterations(2), "totals": totals} for r in range(2)}
    common = {"scenario": "lossy-0.1", "started": GSO, "code": "0123abcd"}
    write_sweep(tmp_path, "trace-1", {"000-dlcp": {**common, "config": "dlcp", "jobs": {"1": {"ranks": ranks}}},
                                      "001-tcp": {**ring_record("lossy-0.1", "ddp-tcp"), **common}}, plan=TRACE_PLAN)
    write_sweep(tmp_path, "trace-2", {"000-tcp": {**ring_record("lossy-0.1", "ddp-tcp"), **common}}, plan=TRACE_PLAN)
    dlcp, tcp, alone = load_runs(tmp_path)
    assert dlcp.answered_in_c == 6 and dlcp.code == "0123abcd"  # both ranks' answers in C
    assert dlcp.host_code == "c-answers" and dlcp.scenario_label == "lossy-0.1 (gso, c-answers)"
    # Kernel TCP's run of the same sweep and code ran on it too; the same code in another sweep
    # with no answer recorded is not known to answer in C.
    assert tcp.host_code == "c-answers" and alone.host_code == "" and alone.scenario_label == "lossy-0.1 (gso)"
    assert _run("dlcp", code=C_ANSWERS_CODE[0]).host_code == "c-answers"  # by the commit it names
    assert _run("dlcp", code="9662f4451e55c4dc", answered_in_c=0).host_code == ""  # answered none
    assert _run("dlcp").scenario_label == "tcp (gso)"


def test_the_c_answers_take_the_dlcp_host_terms_to_their_measured_ratio() -> None:
    # A ring of 2 on one layer above the background: 4 packets at the busiest host at 1 ms each
    # (the whole CPU) and 2 messages at 0.9 ms, 5.8 ms of host time; with the probes answered in
    # C both at 0.88: 5.104 ms, 0.696 ms less. Left out (host-code), nothing changes.
    assert HOST_CODE_CPU == {"c-answers": 0.88}
    before = predict_run(_run("transport-qos"), ONE_LAYER, 1e-3, draws=10).draws
    after = predict_run(_run("transport-qos", code=C_ANSWERS_CODE[0]), ONE_LAYER, 1e-3, draws=10).draws
    assert before - after == pytest.approx(np.full(10, 0.000696))
    off = predict_run(_run("transport-qos", code=C_ANSWERS_CODE[0]), ONE_LAYER, 1e-3, draws=10,
                      without=frozenset({"host-code"})).draws
    assert off == pytest.approx(before)
    # Kernel TCP's runs of the same code are not touched.
    tcp = [predict_run(_run("ddp-tcp-qos", code=c), ONE_LAYER, 1e-3, draws=10).draws for c in ("", C_ANSWERS_CODE[0])]
    assert tcp[0] == pytest.approx(tcp[1])


def test_a_run_moved_to_a_quarter_of_the_port_rate_stretches_its_compute_and_timers() -> None:
    run = _run("dlcp", compute=[0.3, 0.5], rto_min_s=0.008, starvation=0.6, load=4.0, cpu_use=0.2, cpu_wait=0.2,
               switch_cpu={"s1": (0.3, 0.1)}, code="9662f4451e55c4dc")
    there = moved(run, 250.0, 32.0)
    # k 8 -> 32: compute and a tuned rto_min x 4; b kept; the hosts' code of today.
    assert there.port_pps == 250.0 and there.job is not None and (there.job["k"], there.job["b"]) == (32.0, 1.0)
    assert there.compute == pytest.approx([1.2, 2.0]) and there.rto_min_s == pytest.approx(0.032)
    assert there.host_code == "c-answers" and run.host_code == ""
    # As recorded: the rank's 0.2 / 0.4 = 0.5 (switches 0.75); uncontended: the whole CPU.
    assert run_available(there, "dlcp-recorded")[0] == pytest.approx(0.5)
    assert run_available(moved(run, 250.0, 32.0, "free"), "dlcp-recorded")[0] == 1.0
    with pytest.raises(SimulatorError, match="only a trace-driven run"):
        moved(Run("s", "r", "tcp", "qos", 1000.0, 32, [0.01]), 250.0, 32.0)


def test_a_paced_dlcp_job_takes_what_the_background_leaves_at_the_switches() -> None:
    from simulator.host_model import MAX_MIN_FLOOR, host_pps

    # 1 ms a packet with the whole CPU: 1,000 packets/s; the background's 600 leave 400. A
    # window-based job keeps max-min's half, 500; a paced one the 400 (never below 1%: 10).
    assert MAX_MIN_FLOOR == 0.5
    assert host_pps(1e-3, 1.0, 600.0) == pytest.approx(500.0)
    assert host_pps(1e-3, 1.0, 600.0, 0.0) == pytest.approx(400.0)
    assert host_pps(1e-3, 1.0, 1500.0, 0.0) == pytest.approx(10.0)
    with pytest.raises(SimulatorError, match="floor"):
        host_pps(1e-3, 1.0, 0.0, 1.5)

    def host_time(config: str, started: str, without: frozenset[str] = frozenset(), record: bool = True) -> float:
        # The whole CPU, read per process (used 0.5 of a core, never waited) or from nothing recorded.
        cpu = {"cpu_use": 0.5, "cpu_wait": 0.0, "switch_cpu": {"s1": (0.5, 0.0)}} if record else {}
        run = Run("s", "r", "tcp", config, 1000.0, 32, [0.01], job=dict(TRACE_JOB), started=started,
                  background_pps=600.0, **cpu)  # type: ignore[arg-type]
        free = predict_run(run, ONE_LAYER, 1e-3, draws=4, without=without | {"background"}).draws
        return float((predict_run(run, ONE_LAYER, 1e-3, draws=4, without=without).draws - free)[0])

    # The ring of two handles 4 packets at its busiest host: 4/400 - 4/1,000 = 6 ms more than
    # without the background when paced (the GSO and port-rate transports), 4/500 - 4/1,000 =
    # 4 ms when not (the earliest transport, kernel TCP, or the term left out).
    assert host_time("transport-qos", GSO) == pytest.approx(0.006)
    assert host_time("transport-qos", "2026-11-26 12:00:00 UTC") == pytest.approx(0.006)
    assert host_time("transport-qos", "2026-11-26 09:00:00 UTC") == pytest.approx(0.004)
    assert host_time("ddp-tcp-qos", GSO) == pytest.approx(0.004)
    assert host_time("transport-qos", GSO, frozenset({"paced"})) == pytest.approx(0.004)
    # A share not read per process (the summed figure's scale) keeps the floor.
    assert host_time("transport-qos", GSO, record=False) == pytest.approx(0.004)


def test_port_predict_against_sets_measured_speed_ups_beside_the_predicted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import simulator.port_predict as pp

    plan = {"job": {**TRACE_PLAN["job"], "port_pps": 5000.0, "k": 32.0}, "scale": TRACE_PLAN["scale"]}
    runs = {f"00{i}-{c}": ring_record("hotspot", c, times=[9.0, t, t]) for i, (c, t) in
            enumerate((("ddp-tcp", 3.0), ("dlcp", 2.0)))}
    sweep = write_sweep(tmp_path, "portrate-1", runs, plan=plan)
    # The model's p50 stubbed: 2.4 s for DDP-style TCP, 2.0 s for DLCP.
    monkeypatch.setattr(pp, "predict_group", lambda g, *a, **k: 2.4 if g[0].config == "ddp-tcp" else 2.0)
    text = pp.against([sweep], Path("unused"))
    # Measured 3.0 and 2.0 s (iteration 0 left out): DLCP 1.50x; predicted 2.4 / 2.0 = 1.20x; errors -20% and +0%.
    assert "| hotspot | ddp-tcp | 5,000 | 1 | 3,000.0 | 2,400.0 | -20% | 1.00x | 1.00x |" in text
    assert "| hotspot | dlcp | 5,000 | 1 | 2,000.0 | 2,000.0 | +0% | 1.50x | 1.20x |" in text


def test_port_predict_group_gives_the_asked_percentile_of_the_pooled_draws(monkeypatch: pytest.MonkeyPatch) -> None:
    import simulator.port_predict as pp
    from simulator.run_model import RunPrediction

    # Two runs whose draws are stubbed: 1..50 s and 51..100 s; no spread. Pooled 1..100 s:
    # numpy's linear p50 is 50.5 s and p99 is 99 + 0.01 = 99.01 s.
    monkeypatch.setattr(pp, "scaled_trace", lambda job, traces: [])
    monkeypatch.setattr(pp, "merge_layers", lambda layers: ONE_LAYER)
    stub = {0: np.arange(1.0, 51.0), 1: np.arange(51.0, 101.0)}

    def fake(run: Run, job: object, cost: float, draws: int, seed: int) -> object:
        pred = RunPrediction.__new__(RunPrediction)
        object.__setattr__(pred, "draws", stub[seed])
        return pred

    monkeypatch.setattr(pp, "predict_run", fake)
    runs = [_run("ddp-tcp"), _run("ddp-tcp")]
    costs = {"trace/tcp": 7e-6}
    assert pp.predict_group(runs, Path("unused"), costs) == pytest.approx(50.5)
    assert pp.predict_group(runs, Path("unused"), costs, q=99) == pytest.approx(99.01)


def test_port_predict_against_sets_the_prediction_made_before_beside_the_runs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import simulator.port_predict as pp

    prediction = tmp_path / "prediction.md"
    prediction.write_text(
        "Made by `x`.\n\n| scenario | configuration | runs | a | b | CPU as recorded (ms) | up | free | up | p99 |\n"
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n"
        "| hotspot | ddp-tcp | 10 | 1.0 | 1.0 | 2,500.0 | 1.00x | 1.0 | 1.00x | 9.0 |\n"
        "| hotspot | dlcp | 10 | 1.0 | 1.0 | 2,800.0 | 0.89x | 1.0 | 1.00x | 9.0 |\n")
    before = pp.read_prediction(prediction)
    assert before == {("hotspot", "ddp-tcp"): pytest.approx(2.5), ("hotspot", "dlcp"): pytest.approx(2.8)}
    plan = {"job": {**TRACE_PLAN["job"], "port_pps": 5000.0, "k": 32.0}, "scale": TRACE_PLAN["scale"]}
    runs = {f"00{i}-{c}-r{r}": ring_record("hotspot", c, times=[9.0, t + 0.01 * r, t + 0.01 * r])
            for r in range(3) for i, (c, t) in enumerate((("ddp-tcp", 3.0), ("dlcp", 2.0)))}
    sweep = write_sweep(tmp_path, "portrate-1", runs, plan=plan)
    monkeypatch.setattr(pp, "predict_group", lambda g, *a, **k: 2.4 if g[0].config == "ddp-tcp" else 2.0)
    text = pp.against([sweep], Path("unused"), before=before)
    # Measured p50s 3.01 and 2.01 s (the middle run's): before 2.5 s is -17%, 2.8 s +39%; DLCP
    # 1.50x measured, 2.5 / 2.8 = 0.89x before.
    assert "| predicted | predicted before (ms) | error | speed-up, before |\n|---|---|---:|---:|---:|---:|---|---:|---:|---:|---|---:|\n" in text
    assert "| hotspot | ddp-tcp | 5,000 | 3 | 3,010.0 | 2,400.0 | -20% | 1.00x | 1.00x | 2,500.0 | -17% | 1.00x |" in text
    assert "| hotspot | dlcp | 5,000 | 3 | 2,010.0 | 2,000.0 | -0% | 1.50x | 1.20x | 2,800.0 | +39% | 0.89x |" in text
    # Every run has DLCP 1 s ahead: a clear pair, kept from the records, swapped before.
    assert "| hotspot | 5,000 | from the records | dlcp < ddp-tcp | dlcp < ddp-tcp | yes | yes |" in text
    assert "| hotspot | 5,000 | before | dlcp < ddp-tcp | ddp-tcp < dlcp | no | no | 0 of 1 | 0 of 1 |" in text
    # The p99s: measured 3.0 and 2.0 s + r x 10 ms pooled over both ranks (12 iterations each,
    # the top four at r = 2): 3.02 and 2.02 s; before 9.0 s, +198%.
    assert pp.read_prediction(prediction, 9) == {("hotspot", "ddp-tcp"): pytest.approx(0.009),
                                                 ("hotspot", "dlcp"): pytest.approx(0.009)}
    text = pp.against([sweep], Path("unused"), before=before, before_p99={("hotspot", "ddp-tcp"): 9.0})
    assert "| 2,500.0 | -17% | 1.00x | 3,020.0 | 9,000.0 | +198% |" in text
    assert "| 2,800.0 | +39% | 0.89x | 2,020.0 | - | - |" in text


def test_a_configuration_no_sweep_ran_is_predicted_from_another_configurations_records(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import simulator.port_predict as pp

    run = _run("dlcp", loss_rate=0.006, cpu_use=0.3, cpu_wait=0.3, background_pps=2500.0)
    qos = pp.stand_in(run, "transport-qos", 0.0024)
    # The record's CPU and background kept, the configuration and loss replaced: the DLCP
    # transport without the switches' marks is its own host-cost family.
    assert (qos.config, qos.loss_rate, qos.cpu_use, qos.background_pps) == ("transport-qos", 0.0024, 0.3, 2500.0)
    assert qos.family == "trace/dlcp (gso)" and run.family == "trace/dlcp+ecn (gso)"
    assert pp.stand_in(run, "dlcp-no-dropping").loss_rate == 0.006 and run.config == "dlcp"
    with pytest.raises(SimulatorError, match="not kernel TCP's"):
        pp.stand_in(run, "ddp-tcp", 0.01)
    with pytest.raises(SimulatorError, match="not in"):
        pp.stand_in(run, "transport", 1.5)
    plan = {"job": {**TRACE_PLAN["job"], "port_pps": 5000.0, "k": 32.0}, "scale": TRACE_PLAN["scale"]}
    runs = {f"00{i}-{c}-r0": ring_record("tcp", c, times=[9.0, t, t])
            for i, (c, t) in enumerate((("ddp-tcp", 3.0), ("dlcp", 2.0)))}
    sweep = write_sweep(tmp_path, "portrate-1", runs, plan=plan)
    # The model stubbed: 3.2 s for the DDP-style TCP runs, 1.6 s for the DLCP transport without
    # the switches' marks, 2.0 s with them.
    seen: list[tuple[str, float | None]] = []

    def fake(group: list[Run], traces: Path, costs: dict[str, float], **kw: object) -> float:
        seen.append((group[0].config, group[0].loss_rate))
        return 3.2 if group[0].spec.comm == "tcp" else 2.0 if group[0].spec.ecn else 1.6

    monkeypatch.setattr(pp, "predict_group", fake)
    text = pp.port_predict([sweep], 5000.0, 32.0, Path("unused"), "cmd", stand_ins={"transport-qos": ("dlcp", 0.0024)})
    # Measured shown only where the configuration ran; 3.2 / 1.6 = 2.00x over DDP-style TCP.
    assert "| tcp | transport-qos | 1 | - | 1,600.0 | 1,600.0 | 2.00x | 1,600.0 | 2.00x | 1,600.0 |" in text
    assert "| tcp | dlcp | 1 | 2,000.0 | 2,000.0 | 2,000.0 | 1.60x |" in text
    assert ("transport-qos", 0.0024) in seen and "transport-qos from dlcp's, the DLCP transport's loss 0.24%/pkt" in text
    with pytest.raises(SimulatorError, match="ran in the sources"):
        pp.port_predict([sweep], 5000.0, 32.0, Path("unused"), "cmd", stand_ins={"dlcp": ("ddp-tcp", None)})
    with pytest.raises(SimulatorError, match="no runs of priority"):
        pp.port_predict([sweep], 5000.0, 32.0, Path("unused"), "cmd", stand_ins={"spraying": ("priority", None)})
