"""experiments.trace_acted: per-run ranges of what the switches' mechanisms did."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from experiments.trace_acted import acted, main


def _record(config: str, rep: int, switch: dict[str, int], lost: int = 0, status: str = "ok") -> dict[str, Any]:
    recs = [{"iteration": i, "iteration_s": 1.0, "compute_s": 0.3, "forward_wait_s": 0.0, "lost_by_tensor": {}}
            for i in range(3)]
    return {"run_id": f"{rep}-{config}", "scenario": "tcp", "config": config, "repetition": rep, "status": status,
            "jobs": {"1": {"ranks": {"0": {"role": "worker", "totals": {"lost": lost, "reduced": 1000},
                                           "records": recs}}}}, "switch": switch, "background": []}


def test_ranges_and_runs_above_zero_per_configuration(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    counted = {"sprayed_packets": 0, "sprayed_members": 0}
    records = [_record("dlcp", 0, {"magnitude_drops": 300, "ecn_marks": 9, **counted, "tx_packets_priority_6": 5}, 40),
               _record("dlcp", 1, {"magnitude_drops": 0, "ecn_marks": 12, "sprayed_packets": 70, "sprayed_members": 3,
                                   "tx_packets_priority_7": 8}, 10),
               _record("dlcp", 2, {"magnitude_drops": 999}, status="failed"),  # not an ok run: left out
               _record("ddp-tcp", 0, {"magnitude_drops": 0, "ecn_marks": 0})]  # before the counters
    table = acted(records)
    assert table["dlcp"]["magnitude_drops"] == {"low": 0, "high": 300, "runs_above_zero": 1, "runs": 2}
    assert table["dlcp"]["lost_values"]["low"] == 10 and table["dlcp"]["queues67_tx"]["high"] == 8
    assert table["dlcp"]["sprayed_members"]["runs_above_zero"] == 1
    assert table["ddp-tcp"]["sprayed_packets"]["runs"] == 0
    (tmp_path / "runs").mkdir()
    for r in records:
        (tmp_path / "runs" / f"{r['run_id']}.json").write_text(json.dumps(r))
    assert main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "| dlcp | 10-40 (2 of 2 > 0) | 0-300 (1 of 2 > 0) | 9-12 (2 of 2 > 0) |" in out
    assert "not recorded" in next(line for line in out.splitlines() if line.startswith("| ddp-tcp |"))
