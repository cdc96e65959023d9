"""The fabric's and ns-3's network and host figures side by side (simulator/packet/mechanisms.py),
on hand-made run records."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from simulator.errors import SimulatorError
from simulator.packet.mechanisms import main, table


def _write(folder: Path, name: str, record: dict[str, Any]) -> None:
    (folder / "runs").mkdir(parents=True, exist_ok=True)
    (folder / "runs" / f"{name}.json").write_text(json.dumps({"status": "ok", "scenario": "lossy-0", **record}))


def _ranks(resent: int, cpu: float | None = None, wait: float | None = None) -> dict[str, Any]:
    return {"1": {"ranks": {str(i): {"totals": {"retransmitted": resent + i}, "cpu_share": cpu, "cpu_wait_share": wait}
                            for i in (0, 2)}}}


def test_fabric_and_ns3_figures_are_medians_over_runs_side_by_side(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fabric, ns3 = tmp_path / "fabric", tmp_path / "ns3"
    # Fabric, two runs: rr medians 4 and 6 ms -> 5.00; marks 100 and 300 -> 200; queue drops 10, 30 -> 20;
    # TCP retransmissions 7, 9 -> 8; ranks resent 5 and 7 (run 1), 15 and 17 (run 2): 6 and 16 -> 11;
    # switches: l1 (0.2 CPU, 0.4 wait) and l2 (0.3, 0.2) carry traffic, s1 (0.01) does not: 0.25 / 0.30.
    for i, (rr, marks, drops, retx, resent) in enumerate(((0.004, 100, 10, 7, 5), (0.006, 300, 30, 9, 15))):
        _write(fabric, f"f{i}", {"config": "dlcp", "background": [{"protocol": "rr", "fct_s": [rr, rr, 1.0]}],
                                 "jobs": _ranks(resent, 0.2, 0.3),
                                 "switch": {"ecn_marks": marks, "queue_drops": drops, "magnitude_drops": 1,
                                            "tcp_retransmitted": retx,
                                            "switch_cpu": {"l1": 0.2, "l2": 0.3, "s1": 0.01},
                                            "switch_cpu_wait": {"l1": 0.4, "l2": 0.2, "s1": 0.9}}})
    # ns-3, one run: rr 2 ms; its ports' counters; resent 0 and 2 -> 1.
    _write(ns3, "n0", {"config": "dlcp", "background": [{"protocol": "rr", "fct_s": [0.002]}], "jobs": _ranks(0),
                       "switch": {}, "simulation": {"ports": {"ecn_marks": 50, "overflow_drops": 3,
                                                              "early_drops": 4, "max_depth": 27}}})
    out = table([(fabric, "control")], [(ns3, "control")])
    assert ("| lossy-0 (control) | dlcp | 5.00 / 2.00 | 200 / 50 | 20 / 3 | 1 / 4 | 8 | 11 / 1 | 27 | "
            "0.25 / 0.30 | 0.20 / 0.30 |") in out
    with pytest.raises(SimulatorError, match="no scenario x configuration"):
        table([(fabric, "")], [(ns3, "control")])
    assert main(["--fabric", f"control={fabric}", "--model", f"{ns3}@control"]) == 0
    assert "| lossy-0 (control) | dlcp |" in capsys.readouterr().out
