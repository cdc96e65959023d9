"""The accuracy figures quoted in experiments/README.md are the committed results'."""

from __future__ import annotations

import json
from pathlib import Path

from experiments.accuracy.sweep import SETTINGS, TARGET_BPB

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "experiments" / "results" / "accuracy" / "synthetic"


def readme_table() -> dict[str, list[str]]:
    text = (ROOT / "experiments" / "README.md").read_text()
    section = text.split("### Results: synthetic masks", 1)[1]
    rows: dict[str, list[str]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and cells[0] not in ("condition",) and not cells[0].startswith("---"):
            rows[cells[0]] = cells[1:]
        elif rows and not line.startswith("|"):
            break
    return rows


def est(d: dict[str, float], digits: int) -> str:
    f = f"{{:+.{digits}f}}"
    return f"{f.format(d['mean'])} [{f.format(d['ci_low'])}, {f.format(d['ci_high'])}]"


def test_readme_table_matches_results_json() -> None:
    results = json.loads((RESULTS / "results.json").read_text())
    assert results["settings"]["target_bpb"] == TARGET_BPB
    assert results["settings"]["settings"]["steps"] == SETTINGS.steps
    rows = {r["condition"]: r for r in results["rows"]}
    table = readme_table()
    assert set(table) == set(rows)
    for name, cells in table.items():
        r = rows[name]
        assert r["seeds"] == 5 and r["reached"] == 5, name
        assert cells[1] == f"{r['iterations']:.1f}", name
        if name == "none":
            assert cells[0] == "0%" and cells[4] == f"({r['final_bpb']:.3f})"
            continue
        assert cells[0] == f"{r['lost_share']:.2%}", name
        assert cells[2] == est(r["d_iterations"], 1), name
        assert cells[3] == est(r["r_iterations"], 3).replace("+", ""), name
        assert cells[4] == est(r["d_final_bpb"], 3), name


def test_readme_prose_figures_match() -> None:
    text = (ROOT / "experiments" / "README.md").read_text().split("### Results: synthetic masks", 1)[1]
    rows = {r["condition"]: r for r in json.loads((RESULTS / "results.json").read_text())["rows"]}
    for name in ("random-1", "random-10", "smallest-10", "random-30"):
        ratio = rows[name]["r_iterations"]["mean"]
        assert f"+{(ratio - 1) * 100:.1f}%" in text, name
    s30 = rows["smallest-30"]["r_iterations"]
    assert f"+{(s30['mean'] - 1) * 100:.1f}% iterations (CI +{(s30['ci_low'] - 1) * 100:.1f}% to " \
           f"+{(s30['ci_high'] - 1) * 100:.1f}%)" in text
    for name in ("smallest-1", "random-1"):
        t = rows[name]["r_time_to_target"]
        assert f"{t['mean']:.3f} [{t['ci_low']:.3f}, {t['ci_high']:.3f}]" in text, name
    assert f"{rows['none']['time_to_target_s']:.1f} s for `none`" in text
