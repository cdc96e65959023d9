"""The validation model's CPU terms from the per-process record, figures by hand."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from simulator.errors import SimulatorError
from simulator.fabric_runs import Run, load_runs
from simulator.host_model import process_available, run_available, switches_available
from simulator.run_model import predict_run
from tests.sim_validate_helpers import ONE_LAYER



def test_a_process_gets_its_use_over_use_and_wait() -> None:
    # 0.3 of a core used, runnable but waiting 0.1 of the wall time: it ran 3/4 of the time it wanted to.
    assert process_available(0.3, 0.1) == pytest.approx(0.75)
    assert process_available(0.2, 0.0) == 1.0
    assert process_available(None, 0.1) is None and process_available(0.0, 0.0) is None
    with pytest.raises(SimulatorError, match="must not be negative"):
        process_available(-0.1, 0.1)
    # Pooled switches: (0.3 + 0.1) used over (0.3 + 0.1) + (0.1 + 0.3) = 0.5, not the mean of 0.75 and 0.25.
    assert switches_available({"a": (0.3, 0.1), "b": (0.1, 0.3)}) == pytest.approx(0.5)
    assert switches_available({}) is None


def test_the_recorded_figures_replace_the_summed_one_and_the_load() -> None:
    base = Run("s", "r", "tcp", "qos", 1000.0, 32, [0.01], starvation=0.9, load=4.0)
    recorded = Run("s", "r", "tcp", "qos", 1000.0, 32, [0.01], starvation=0.9, load=4.0, cpu_use=0.2, cpu_wait=0.2,
                   switch_cpu={"l1": (0.3, 0.1)})
    # Rank 0.2 / 0.4 = 0.5, switches 0.75: the slower is the rank's. The summed 0.9 and the load are not read.
    assert run_available(recorded, "recorded") == (pytest.approx(0.5), "per process")
    # Without the record: 2 tasks a core on 2 cores leave each 0.5; or, by default (summed), the
    # rank's summed figure (0.1 left) against 2 / 4 = 0.5 for the switches, record or not.
    assert run_available(base, "recorded") == (pytest.approx(0.5), "load")
    assert run_available(base, "recorded-summed") == (pytest.approx(0.1), "summed")
    assert run_available(recorded) == (pytest.approx(0.1), "summed")
    assert run_available(Run("s", "r", "tcp", "qos", 1000.0, 32, [0.01]), "recorded") == (1.0, "-")  # nothing recorded
    # The wait share of wall time as the share lacked: the rank's 0.2 and the switch's 0.1, the larger.
    assert run_available(recorded, "wall") == (pytest.approx(0.8), "per process")
    with pytest.raises(SimulatorError, match="unknown CPU measure 'x'"):
        run_available(base, "x")


def _record(ranks: dict[str, dict[str, object]], scenario: str, **extra: object) -> dict[str, object]:
    return {"scenario": scenario, "config": "dlcp", "status": "ok", "started": "2026-11-26 17:00:00 UTC",
            "jobs": {"1": {"ranks": ranks}}, **extra}


def test_a_run_record_gives_its_processes_cpu_and_its_bulk_job(tmp_path: Path) -> None:
    sweep = tmp_path / "trace-1"
    (sweep / "runs").mkdir(parents=True)
    (sweep / "plan.json").write_text(json.dumps({"job": {"model": "resnet50", "precision": "fp32", "k": 8.0,
                                                          "port_pps": 20000.0}, "scale": {"b": 13.0}}))
    records = [{"iteration": i, "iteration_s": 1.0} for i in range(2)]
    ring = {"0": {"cpu_share": 0.2, "cpu_wait_share": 0.1, "starvation": 0.9, "records": records},
            "1": {"cpu_share": 0.4, "cpu_wait_share": 0.3, "starvation": 0.9, "records": records}}
    switch = {"switch_cpu": {"gtl1": 0.3, "gts2": 0.01}, "switch_cpu_wait": {"gtl1": 0.1, "gts2": 0.03},
              "other_cpu": {"job2 rank0": 0.2, "job2 rank1": 0.2}}
    (sweep / "runs" / "000-hotspot-dlcp-r0.json").write_text(json.dumps(_record(ring, "hotspot", switch=switch)))
    star = {"0": {"role": "server", "cpu_share": 0.24, "cpu_wait_share": 0.06, "records": records},
            **{str(w): {"role": "worker", "cpu_share": c, "cpu_wait_share": 0.1, "records": records}
               for w, c in ((1, 0.1), (2, 0.1), (3, 0.14), (4, 0.14))}}
    (sweep / "runs" / "001-incast-dlcp-r0.json").write_text(json.dumps(_record(star, "incast")))
    ring_run, star_run = load_runs(tmp_path)
    # A ring's ranks: means 0.3 used, 0.2 waited; the switches as recorded; the bulk job is a second tenant.
    assert (ring_run.cpu_use, ring_run.cpu_wait) == (pytest.approx(0.3), pytest.approx(0.2))
    assert ring_run.switch_cpu == {"gtl1": (0.3, 0.1), "gts2": (0.01, 0.03)}
    assert ring_run.tenants == 2 and ring_run.server_cost is None and ring_run.starvation == 0.9
    # Rank 0.3 / 0.5 = 0.6; switches 0.31 / 0.44 = 0.705: the path moves at 0.6.
    assert run_available(ring_run, "recorded") == (pytest.approx(0.6), "per process")
    # A star: the server's figures; it handles 4 workers' packets with 0.24 / 0.12 = 2 times a
    # worker's CPU, so each of its packets costs half a worker's.
    assert (star_run.cpu_use, star_run.cpu_wait) == (pytest.approx(0.24), pytest.approx(0.06))
    assert star_run.server_cost == pytest.approx(0.5) and star_run.tenants == 1 and star_run.switch_cpu == {}


def test_a_star_server_handles_its_packets_at_its_recorded_cost() -> None:
    def run(cost: float | None) -> Run:  # a server and two workers, the job one class above the background
        return Run("s", "r", "incast", "qos", 1000.0, 32, [0.01], ranks=3, server_cost=cost)

    # 2,888 bytes: the server's port carries 2 pushes and 2 pulls, 8 packets of at most 1,444 B,
    # all of which the server handles: 8 ms at 1 ms a packet, 4 ms at half a worker's cost.
    full, half = (predict_run(run(c), ONE_LAYER, 1e-3, draws=10).draws for c in (None, 0.5))
    assert full - half == pytest.approx(np.full(10, 0.004))
    left_out = predict_run(run(0.5), ONE_LAYER, 1e-3, draws=10, without=frozenset({"server-cost"})).draws
    assert left_out == pytest.approx(full)
    # Kernel TCP's packet work is mostly the kernel's (softirq), not charged to the server: not scaled.
    gloo = [predict_run(Run("s", "r", "incast", "gloo", 1000.0, 32, [0.01], ranks=3, server_cost=c), ONE_LAYER,
                        1e-3, draws=10).draws for c in (None, 0.5)]
    assert gloo[0] == pytest.approx(gloo[1])
    with pytest.raises(SimulatorError, match="unknown model terms"):
        predict_run(run(0.5), ONE_LAYER, 1e-3, draws=10, without=frozenset({"window"}))


def test_the_background_term_can_be_left_out() -> None:
    # 1 ms a packet with the whole CPU: 1,000 packets/s; a background of 600 leaves 500 (max-min's half).
    run = Run("s", "r", "tcp", "qos", 1000.0, 32, [0.01], background_pps=600.0)
    with_bg = predict_run(run, ONE_LAYER, 1e-3, draws=10).draws
    without = predict_run(run, ONE_LAYER, 1e-3, draws=10, without=frozenset({"background"})).draws
    # A ring of two handles 4 packets at its busiest host: 8 ms at 500/s, 4 ms at 1,000/s.
    assert with_bg - without == pytest.approx(np.full(10, 0.004))


def test_a_hotspot_bulk_job_collides_on_an_uplink_as_a_second_tenant_does() -> None:
    # As multitenant: 10 ms apart, 12 ms when the bulk ring hashes onto the job's uplink.
    hashed = predict_run(Run("s", "r", "hotspot", "qos", 1000.0, 32, [0.01]), ONE_LAYER, 0.0, draws=4000)
    assert set(np.round(hashed.draws, 6)) == {0.010, 0.012}
    assert (hashed.draws > 0.011).mean() == pytest.approx(0.5, abs=0.05)


def test_a_star_pulls_leave_the_port_the_background_comes_in_by() -> None:
    from hosts.schedulers import Segment, Transfer
    from simulator.fabric_model import CollectiveLink, port_model

    # Long TCP into the server's port: the pushes get half of it, the pulls all of it. 2,888
    # bytes from each of 2 workers: 5,776 B of pushes at 722,000 B/s (8 ms), then 5,776 B of
    # pulls at 1,444,000 B/s (4 ms); at the pushes' share both ways it was 16 ms.
    port = port_model(port_pps=1000, queue_packets=32, background="tcp", job_above_background=False)
    transfer = Transfer(segments=(Segment(0, 0, 722),), nbytes=2888)
    assert CollectiveLink(port, 3, "star").seconds(transfer) == pytest.approx(0.016)
    assert CollectiveLink(port, 3, "star", pull_share=1.0).seconds(transfer) == pytest.approx(0.012)
    assert CollectiveLink(port, 2, "ring", pull_share=1.0).seconds(transfer) == pytest.approx(0.004)  # a ring: no pulls


def test_a_sweep_marked_not_a_result_is_left_out(tmp_path: Path) -> None:
    from simulator.fabric_runs import not_results

    records = [{"iteration": i, "iteration_s": 1.0} for i in range(2)]
    for name in ("kept", "marked"):
        (tmp_path / name / "runs").mkdir(parents=True)
        (tmp_path / name / "runs" / "000-tcp-qos-r0.json").write_text(json.dumps(
            {"scenario": "tcp", "config": "qos", "status": "ok", "jobs": {"1": {"ranks": {"0": {"records": records}}}}}))
    (tmp_path / "marked" / "README.md").write_text("# Not a result of the project's code: to be re-run\n")
    (tmp_path / "kept" / "README.md").write_text("# A sweep\n\nNot a result of anything else.\n")
    assert [run.sweep for run in load_runs(tmp_path)] == ["kept"]
    assert not_results(tmp_path) == ["marked"]
    with pytest.raises(SimulatorError, match="but those of sweeps marked not results: marked"):
        load_runs(tmp_path / "marked")
