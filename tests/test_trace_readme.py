"""The trace quick sweep's figures quoted in experiments/README.md and in its folder's README
are the committed results' (runs/*.json, results.json, replay.json)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
QUICK = ROOT / "experiments" / "results" / "training" / "trace-quick-20261126-080603"


def normalized(path: Path) -> str:
    return " ".join(path.read_text().split())


def quoted(text: str, pattern: str) -> tuple[str, ...]:
    m = re.search(pattern, text)
    assert m, f"the README no longer says /{pattern}/: update tests/test_trace_readme.py with the text"
    return m.groups()


def runs() -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((QUICK / "runs").glob("*.json"))]


def summary() -> dict:
    return json.loads((QUICK / "results.json").read_text())["summary"]


def test_experiments_readme_quick_sweep_figures() -> None:
    text = normalized(ROOT / "experiments" / "README.md").split("[trace-quick-20261126-080603]", 1)[1][:1500]
    meta = json.loads((QUICK / "results.json").read_text())["meta"]
    records = runs()
    n, minutes, lo, hi = quoted(text, r"`gradfabric experiment trace --quick` \((\d+) runs;.*?; (\d+) min\) "
                                      r"on a machine at load (\d+)-(\d+)\.")
    loads = [r[k][0] for r in records for k in ("load_before", "load_after")]
    loads += [meta["load_at_start"][0], meta["load_at_end"][0]]
    assert (int(n), int(minutes)) == (len(records), round(meta["elapsed_s"] / 60))
    assert (int(lo), int(hi)) == (round(min(loads)), round(max(loads)))
    lo, hi = quoted(text, r"waited for a CPU (\d+)-(\d+)% of their runnable time")
    starved = [r["max_starvation"] * 100 for r in records]
    assert (int(lo), int(hi)) == (round(min(starved)), round(max(starved)))
    assert "host qdisc drops 0 in every run" in text
    assert all(r["switch"]["host_qdisc_drops"] == 0 for r in records)
    s = summary()
    lo, hi = quoted(text, r"in (\d+)-(\d+)% of iterations \(medians per scenario\)")
    overlap = [s[sc][c]["overlap_share"] * 100 for sc in s for c in ("p3-tcp", "dlcp")]
    assert (int(lo), int(hi)) == (round(min(overlap)), round(max(overlap)))
    lo, hi = quoted(text, r"magnitude drops \(medians (\d+)-(\d+) per run\)")
    drops = [s[sc]["dlcp"]["magnitude_drops"] for sc in s]
    assert (int(lo), int(hi)) == (round(min(drops)), round(max(drops)))
    assert "CIs include 1 in all three scenarios" in text and len(s) == 3
    assert all(s[sc]["p3-tcp"]["speedup_p50"]["low"] <= 1 <= s[sc]["p3-tcp"]["speedup_p50"]["high"] for sc in s)
    lo, hi = quoted(text, r"full DLCP (\d+)-(\d+) times slower than DDP-style TCP")
    slower = [1 / s[sc]["dlcp"]["speedup_p50"]["median"] for sc in s]
    assert (int(lo), int(hi)) == (round(min(slower)), round(max(slower)))


def _reached(curve: list[list[float]], target: float) -> int | None:
    return next((int(step) for step, bpb in curve if bpb <= target), None)


def test_folder_readme_replay_figures_are_replay_json() -> None:
    from experiments.trace_report import run_figures

    text = normalized(QUICK / "README.md")
    replay = json.loads((QUICK / "replay.json").read_text())
    target = replay["target_bits_per_byte"]
    assert f"the {target} bits/byte target" in text
    base = replay["no_masks"]
    step, final = quoted(text, r"Without masks every seed reached the [\d.]+ bits/byte target at step (\d+) "
                              r"\(final ([\d.]+)\)")
    assert {_reached(c, target) for c in base} == {int(step)}
    assert f"{np.median([c[-1][1] for c in base]):.3f}" == final
    by_id = {r["run_id"]: r for r in runs()}
    phrases = {"002-tcp-dlcp-r0": r"tcp DLCP run \(([\d.]+)% of values zero-filled\) (.*?) \(final ([\d.]+)\)",
               "008-multitenant-dlcp-r0": r"multitenant one \(([\d.]+)%\) (.*?) \(final ([\d.]+)\)"}
    assert set(replay["runs"]) == set(phrases)
    for run_id, pattern in phrases.items():
        share, hits, final = quoted(text, pattern)
        curves = replay["runs"][run_id]["curves"]
        assert f"{run_figures(by_id[run_id])['loss_share'] * 100:.3f}" == share, run_id
        assert f"{np.median([c[-1][1] for c in curves]):.3f}" == final, run_id
        steps = sorted(_reached(c, target) for c in curves)
        said = {"140 for four seeds and 160 for one": [140, 140, 140, 140, 160], "140 for all": [140] * 5}
        assert said[hits] == steps, run_id
    tcp_s = replay["runs"]["002-tcp-dlcp-r0"]["iteration_p50_s"]
    it, t = quoted(text, r"(\d+) x ([\d.]+) s = [\d,]+ s for DLCP")
    assert (int(it), t) == (140, f"{tcp_s:.2f}")
