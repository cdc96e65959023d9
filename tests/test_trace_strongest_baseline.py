"""Each configuration against the strongest kernel-TCP baseline of its scenario, paired per round."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments.trace_report import strongest_tcp_baseline, write_trace_report
from experiments.trace_summary import write_summary

# per round p50 (s); ddp-tcp-qos has the smallest median among the kernel-TCP configurations (2.0)
P50 = {"ddp-tcp": [3.0, 3.0, 3.0], "ddp-tcp-qos": [2.0, 2.2, 1.8], "p3-tcp": [2.5, 2.5, 2.5],
       "dlcp": [1.6, 2.0, 2.0]}


def _record(run_id: str, config: str, rep: int, p50: float) -> dict:
    recs = [{"iteration": i, "iteration_s": t, "compute_s": 0.3, "forward_wait_s": 0.0, "first_send_s": 0.1 + i,
             "last_arrival_s": 0.4 + i, "lost_by_tensor": {}} for i, t in enumerate([9.0, p50, p50])]
    return {"run_id": run_id, "scenario": "tcp", "config": config, "repetition": rep, "status": "ok",
            "jobs": {"1": {"ranks": {"0": {"role": "worker", "cpu_share": 0.2, "totals": {"lost": 0, "reduced": 100},
                                           "records": recs}}}},
            "switch": {}, "background": [], "max_cpu_share": 0.2, "cpu_bound": False, "cpu_starved": False}


def _folder(path: Path) -> Path:
    (path / "runs").mkdir(parents=True)
    plan = {"command": "test", "repetitions": 3, "job": {"model": "resnet50", "precision": "fp32", "iterations": 3},
            "scale": {"b": 13.0, "k": 32.0, "real_gbps": 25.0, "emulated_mbps": 60.0, "capacity_ratio": 416.7},
            "runs": [{"repetition": r} for r in range(3) for _ in P50]}
    (path / "plan.json").write_text(json.dumps(plan))
    n = 0
    for rep in range(3):
        for config, p50s in P50.items():
            (path / "runs" / f"{n:03d}.json").write_text(json.dumps(_record(f"{n:03d}", config, rep, p50s[rep])))
            n += 1
    return path


def test_the_strongest_baseline_is_the_fastest_kernel_tcp_configuration() -> None:
    rows = {"ddp-tcp": {"p50_s": 3.0}, "ddp-tcp-qos": {"p50_s": 2.0}, "dlcp": {"p50_s": 1.0},
            "transport": {"p50_s": 1.5}}
    assert strongest_tcp_baseline(rows) == "ddp-tcp-qos"  # dlcp and transport do not run over kernel TCP
    assert strongest_tcp_baseline({"dlcp": {"p50_s": 1.0}}) is None


def test_report_and_summary_give_the_paired_speed_up_over_the_strongest_baseline(tmp_path: Path) -> None:
    folder = _folder(tmp_path / "sweep")
    rows = write_trace_report(folder)["tcp"]
    # dlcp against ddp-tcp-qos per round: 2.0/1.6, 2.2/2.0, 1.8/2.0 = 1.25, 1.1, 0.9 -> median 1.1
    assert rows["dlcp"]["strongest_tcp"] == "ddp-tcp-qos"
    assert rows["dlcp"]["speedup_p50_strongest_tcp"]["median"] == pytest.approx(1.1)
    assert rows["dlcp"]["speedup_p50_strongest_tcp"]["pairs"] == 3
    # against ddp-tcp as before: 3.0/1.6, 3.0/2.0, 3.0/2.0 -> median 1.5
    assert rows["dlcp"]["speedup_p50"]["median"] == pytest.approx(1.5)
    # p3-tcp against ddp-tcp-qos: 2.0/2.5, 2.2/2.5, 1.8/2.5 -> median 0.8
    assert rows["p3-tcp"]["speedup_p50_strongest_tcp"]["median"] == pytest.approx(0.8)
    assert "Against the strongest TCP baseline, ddp-tcp-qos" in (folder / "results.md").read_text()
    write_summary([folder], tmp_path / "summary")
    text = (tmp_path / "summary" / "summary.md").read_text()
    assert "| tcp | dlcp |" in text and "1.10x [" in text and "vs ddp-tcp-qos |" in text
    assert "| (the strongest) |" in text
