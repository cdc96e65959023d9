"""`gradfabric experiment trace-summary`: every figure of the side-by-side table is a folder's own."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gradfabric.command import cli


def _row(p50_s: float, speedup: float | None, low: float | None, high: float | None, **more: Any) -> dict[str, Any]:
    ratio = {"median": speedup, "low": low, "high": high, "pairs": 10}
    return {"runs": 10, "cpu_bound": 0, "p50_s": p50_s, "loss_share": more.get("loss", 0.0),
            "magnitude_drops": more.get("drops", 0.0), "ecn_marks": more.get("marks", 0.0), "queue_drops": 1234.4,
            "rr_fct_p99_ms": more.get("rr", 1022.44), "speedup_p50": ratio,
            "speedup_p99": {"median": 0.41, "low": 0.37, "high": 0.49, "pairs": 10}}


def _folder(root: Path, name: str, commit: str, summary: dict[str, Any]) -> Path:
    folder = root / name
    folder.mkdir()
    plan = {"started": "2026-11-27 03:01:01 UTC", "repetitions": 10,
            "code": {"commit": commit, "dirty": [], "fingerprint": "x"}}
    (folder / "plan.json").write_text(json.dumps(plan))
    (folder / "results.json").write_text(json.dumps({"meta": {}, "summary": summary}))
    return folder


def test_the_table_gives_each_folders_figures_and_code(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = _folder(tmp_path, "trace10-lossy-1", "df23125c884615c9", {"lossy-1": {
        "ddp-tcp": _row(0.6622, 1.0, None, None),
        "dlcp": _row(1.1153, 0.6, 0.56, 0.62, loss=0.01476, drops=274.0, marks=18030.0, rr=171.1)}})
    b = _folder(tmp_path, "trace10-incast", "0123456789abcdef", {"incast": {
        "ddp-tcp": _row(5.0, 1.0, None, None), "dlcp": _row(4.0, 1.25, 1.1, 1.3)}})
    out = tmp_path / "out"
    assert cli.main(["experiment", "trace-summary", str(a), str(b), "--out", str(out)]) == 0
    text = (out / "summary.md").read_text()
    assert "`trace10-lossy-1`: commit df23125" in text and "`trace10-incast`: commit 0123456" in text
    assert ("| lossy-1 | dlcp | 10 (0) | 1,115 | 0.60x [0.56, 0.62] | 0.41x [0.37, 0.49] | 1.476% | 274 / 18,030 "
            "| 1,234 | 171.1 |") in text
    assert "| lossy-1 | ddp-tcp | 10 (0) | 662 | 1.00x (no CI) |" in text
    assert "| incast | dlcp | 10 (0) | 4,000 | 1.25x [1.10, 1.30] |" in text
    assert (out / "summary.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "4 rows from 2 folder(s)" in capsys.readouterr().out
    # the command that made it (the one given, not this process's), for the figures quoted from it
    assert f"\nCommand: `gradfabric experiment trace-summary {a} {b} --out {out}`\n" in text


def test_a_folder_without_results_or_a_scenario_given_twice_is_refused(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    assert cli.main(["experiment", "trace-summary", str(empty), "--out", str(tmp_path / "o1")]) != 0
    assert f"{empty}: no plan.json" in capsys.readouterr().err
    one = _folder(tmp_path, "one", "aaaaaaa", {"tcp": {"ddp-tcp": _row(1.0, 1.0, None, None)}})
    two = _folder(tmp_path, "two", "aaaaaaa", {"tcp": {"ddp-tcp": _row(1.0, 1.0, None, None)}})
    assert cli.main(["experiment", "trace-summary", str(one), str(two), "--out", str(tmp_path / "o2")]) != 0
    assert "scenario 'tcp' is in two of the folders given" in capsys.readouterr().err
    assert not (tmp_path / "o2").exists()


def _record(config: str, repetition: int, p50_s: float) -> dict[str, Any]:
    iters = [{"iteration_s": t, "compute_s": 0.5, "forward_wait_s": 0.0} for t in (9.0, p50_s, p50_s, p50_s)]
    return {"status": "ok", "scenario": "tcp", "config": config, "repetition": repetition,
            "run_id": f"{repetition}-{config}", "jobs": {"1": {"ranks": {"0": {"records": iters, "totals": {}}}}}}


def _part(root: Path, name: str, rounds: dict[int, tuple[float, float]], **plan: Any) -> Path:
    folder = root / name
    (folder / "runs").mkdir(parents=True)
    base = {"started": f"{name} start", "repetitions": 3, "job": {"port_pps": 5000.0},
            "sweep": {"tcp": ["ddp-tcp", "dlcp"]}, "code": {"commit": "104fe3319d", "dirty": [], "fingerprint": "f"}}
    runs = [{"scenario": "tcp", "config": c, "repetition": r} for r in rounds for c in ("ddp-tcp", "dlcp")]
    (folder / "plan.json").write_text(json.dumps({**base, "runs": runs, **plan}))
    (folder / "results.json").write_text(json.dumps({"meta": {}, "summary": {}}))
    for r, (tcp, dlcp) in rounds.items():
        for config, p50 in (("ddp-tcp", tcp), ("dlcp", dlcp)):
            (folder / "runs" / f"{r}-{config}.json").write_text(json.dumps(_record(config, r, p50)))
    return folder


def test_pooled_parts_give_one_pair_per_round_and_the_rounds_each_completed(tmp_path: Path) -> None:
    stopped = {"at": "18:31", "rounds_completed": 1}
    a = _part(tmp_path, "trace10-5k-tcp", {0: (2.0, 1.0)}, stopped=stopped)
    plan = json.loads((a / "plan.json").read_text())  # planned 3 rounds, stopped after 1
    plan["runs"] += [{"scenario": "tcp", "config": "dlcp", "repetition": r} for r in (1, 2)]
    (a / "plan.json").write_text(json.dumps(plan))
    b = _part(tmp_path, "trace10-5k-tcp-b", {1: (2.0, 2.0), 2: (2.0, 4.0)})
    out = tmp_path / "out"
    assert cli.main(["experiment", "trace-summary", f"{a}+{b}", "--out", str(out)]) == 0
    text = (out / "summary.md").read_text()
    assert ("`trace10-5k-tcp+trace10-5k-tcp-b`: commit 104fe33, started trace10-5k-tcp start, 1 of 3 planned "
            "rounds completed (stopping rule); started trace10-5k-tcp-b start, 2 rounds, pooled (3 rounds)") in text
    # ratios 2.0, 1.0, 0.5 over three rounds of two folders: median 1.0; runs' p50s 1, 2, 4 s: median 2 s
    row = next(line for line in text.splitlines() if line.startswith("| tcp | dlcp |"))
    assert row.startswith("| tcp | dlcp | 3 (0) | 2,000 | 1.00x [")
    low, high = (float(x) for x in row.split("1.00x [")[1].split("]")[0].split(", "))
    assert 0.5 <= low <= 1.0 <= high <= 2.0 and low < high


def test_a_stopped_folder_shows_its_completed_rounds_not_the_planned(tmp_path: Path) -> None:
    folder = _folder(tmp_path, "trace10-5k-incast", "104fe33", {"incast": {"ddp-tcp": _row(7.6, 1.0, None, None)}})
    plan = json.loads((folder / "plan.json").read_text())
    (folder / "plan.json").write_text(json.dumps({**plan, "stopped": {"at": "18:29", "rounds_completed": 3}}))
    assert cli.main(["experiment", "trace-summary", str(folder), "--out", str(tmp_path / "o")]) == 0
    text = (tmp_path / "o" / "summary.md").read_text()
    assert "3 of 10 planned rounds completed (stopping rule)" in text and ", 10 rounds" not in text


def test_pooling_refuses_a_round_twice_or_other_settings(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = _part(tmp_path, "a", {0: (2.0, 1.0)})
    twice = _part(tmp_path, "twice", {0: (2.0, 3.0)})
    assert cli.main(["experiment", "trace-summary", f"{a}+{twice}", "--out", str(tmp_path / "o1")]) != 0
    assert "round 0 of tcp ddp-tcp is also in" in capsys.readouterr().err
    other = _part(tmp_path, "other", {1: (2.0, 1.0)}, job={"port_pps": 20000.0})
    assert cli.main(["experiment", "trace-summary", f"{a}+{other}", "--out", str(tmp_path / "o2")]) != 0
    assert "job differs" in capsys.readouterr().err
    assert not (tmp_path / "o1").exists() and not (tmp_path / "o2").exists()


def _ablation(root: Path) -> Path:
    """Two rounds of four configurations; DLCP's records carry the switches' mechanism counters."""
    folder = root / "ablation"
    (folder / "runs").mkdir(parents=True)
    p50 = {"ddp-tcp": (4.0, 4.0), "ddp-tcp-qos": (3.0, 2.0), "dlcp-no-spraying": (2.0, 1.0), "dlcp": (1.5, 1.0)}
    configs = list(p50)
    (folder / "plan.json").write_text(json.dumps({
        "started": "s", "repetitions": 2, "code": {"commit": "2aee4a2", "dirty": [], "fingerprint": "f"},
        "command": "c", "job": {"model": "resnet50", "precision": "fp32", "iterations": 4},
        "scale": {"b": 13.0, "k": 32.0, "real_gbps": 25.0, "emulated_mbps": 60.0, "capacity_ratio": 416.7},
        "runs": [{"scenario": "tcp", "config": c, "repetition": r} for r in (0, 1) for c in configs]}))
    (folder / "results.json").write_text(json.dumps({"meta": {}, "summary": {}}))
    for config, times in p50.items():
        for r, t in enumerate(times):
            rec = _record(config, r, t)
            if config.startswith("dlcp"):
                sprayed = 0 if config == "dlcp-no-spraying" else 900 + r * 100
                rec["switch"] = {"magnitude_drops": 40, "ecn_marks": 7, "sprayed_packets": sprayed,
                                 "sprayed_members": 4 if sprayed else 0, "tx_packets_priority_0": 50,
                                 "tx_packets_priority_6": 30, "tx_packets_priority_7": 12}
            (folder / "runs" / f"{r}-{config}.json").write_text(json.dumps(rec))
    return folder


def test_against_columns_and_mechanism_counters_beside_the_ratio(tmp_path: Path) -> None:
    folder = _ablation(tmp_path)
    out = tmp_path / "out"
    assert cli.main(["experiment", "trace-summary", str(folder), "--out", str(out),
                     "--against", "ddp-tcp-qos,dlcp-no-spraying"]) == 0
    rows = {line.split(" | ")[1]: line for line in (out / "summary.md").read_text().splitlines()
            if line.startswith("| tcp |")}
    # dlcp over ddp-tcp-qos per round: 3/1.5 = 2, 2/1 = 2; over dlcp-no-spraying: 2/1.5 and 1/1
    assert rows["dlcp"].endswith("| 2.00x (no CI) | 1.17x (no CI) |")
    # medians per run: 40 drops, 7 marks, 950 sprayed over 4 members, 42 packets from queues 6-7
    assert "| 40 / 7 / 950 (4) / 42 |" in rows["dlcp"]
    assert "| 40 / 7 / 0 (0) / 42 |" in rows["dlcp-no-spraying"]
    assert "| 0 / 0 |" not in rows["ddp-tcp"] and "|  /  |" in rows["ddp-tcp"]  # TCP runs: nothing recorded
    assert cli.main(["experiment", "trace-summary", str(folder), "--out", str(tmp_path / "o2"),
                     "--against", "no-such-config"]) != 0


def test_results_md_compares_each_configuration_with_each_tcp_baseline(tmp_path: Path) -> None:
    from experiments.trace_report import write_trace_report

    folder = _ablation(tmp_path)
    rows = write_trace_report(folder)["tcp"]
    text = (folder / "results.md").read_text()
    # over ddp-tcp: 4/1.5 and 4/1, median 3.33
    assert "| dlcp | 3.33x (no CI) n=2 | 2.00x (no CI) n=2 | 0.000% | 40 / 7 / 950 (4) / 42 | 0 |" in text
    assert rows["dlcp"]["speedup_p50_vs"]["ddp-tcp-qos"]["median"] == 2.0
    assert set(rows["dlcp"]["speedup_p50_vs"]) == {"ddp-tcp-qos"}  # the only other kernel-TCP configuration
    assert rows["dlcp"]["queue5_tx"] == 0 and rows["dlcp"]["queues67_tx"] == 42
    assert rows["ddp-tcp"]["sprayed_packets"] is None
