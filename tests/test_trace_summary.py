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
