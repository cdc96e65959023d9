"""experiments.trace_tcpinfo: the TCP ring's socket figures per iteration, from run records."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from experiments.errors import ExperimentError
from experiments.trace_tcpinfo import iteration_rows, main, run_row


def _info(retrans: int, sent: int, bytes_retrans: int, cwnd: int, backoff: int = 0, state: int = 0) -> dict[str, int]:
    return {"total_retrans": retrans, "bytes_sent": sent, "bytes_retrans": bytes_retrans, "snd_cwnd": cwnd,
            "snd_ssthresh": 100, "backoff": backoff, "ca_state": state}


def _record(rep: int, infos: dict[str, list[dict[str, int]]], times: list[float]) -> dict[str, Any]:
    ranks = {}
    for rank, per_it in infos.items():
        peer = "1" if rank == "0" else "0"
        recs = [{"iteration": i, "iteration_s": t, "compute_s": 0.3, "forward_wait_s": 0.0, "tcp_info": {peer: info},
                 "lost_by_tensor": {}} for i, (t, info) in enumerate(zip(times, per_it))]
        ranks[rank] = {"role": "worker", "totals": {}, "records": recs}
    return {"run_id": f"{rep:03d}-tcp-ddp-tcp-r{rep}", "scenario": "tcp", "config": "ddp-tcp", "repetition": rep,
            "status": "ok", "jobs": {"1": {"ranks": ranks}}, "switch": {"tcp_timeouts": 3}, "background": []}


def _two_ranks(rep: int) -> dict[str, Any]:
    a = [_info(10, 1000, 100, 20), _info(30, 3000, 300, 8), _info(30, 5000, 300, 40, backoff=1)]
    b = [_info(0, 1000, 0, 50), _info(5, 2000, 50, 30), _info(25, 3000, 250, 60, state=4)]
    return _record(rep, {"0": a, "1": b}, [9.0, 2.0, 3.0])


def test_iterations_take_the_differences_of_both_ranks_sockets() -> None:
    rows = iteration_rows(_two_ranks(0))
    assert [r["iteration"] for r in rows] == [1, 2]  # the first iteration is left out
    # iteration 1: (30 - 10) + (5 - 0) segments; (200 + 50) of (2000 + 1000) bytes resent; the smaller cwnd
    assert rows[0]["retrans"] == 25 and rows[0]["retrans_share"] == pytest.approx(250 / 3000)
    assert rows[0]["cwnd_min"] == 8 and not rows[0]["loss_state"] and rows[0]["backoff_max"] == 0
    assert rows[1]["retrans"] == 20 and rows[1]["backoff_max"] == 1 and rows[1]["loss_state"]
    run = run_row(_two_ranks(0))
    assert run["backoff_iterations"] == 1 and run["cwnd_min"] == 8 and run["nstat_timeouts"] == 3


def test_a_record_without_tcp_info_is_refused_and_the_command_prints_a_row_per_round(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old = _two_ranks(0)
    for rank in old["jobs"]["1"]["ranks"].values():
        rank["records"][1].pop("tcp_info")
    with pytest.raises(ExperimentError, match="recorded no tcp_info"):
        iteration_rows(old)
    (tmp_path / "runs").mkdir()
    for rep in (1, 0):
        (tmp_path / "runs" / f"{rep}.json").write_text(json.dumps(_two_ranks(rep)))
    assert main([str(tmp_path), "--configs", "ddp-tcp"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ") and "round" not in line]
    assert [line.split(" | ")[0] for line in lines] == ["| 0", "| 1"]
    assert "| 1 of 2 | 3 |" in lines[0]
