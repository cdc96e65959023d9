"""One table and one plot over several trace-driven sweep folders (one scenario or more each).

Reads each folder's ``results.json`` and ``plan.json`` as :func:`experiments.trace_report.write_trace_report`
wrote them; nothing is recomputed: every figure is the folder's own (medians over runs, paired
speed-ups with their CIs). The code each folder ran is listed, so a reader sees whether the
scenarios are one sweep's parts (one commit) or not.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from experiments.errors import ExperimentError
from experiments.trace_report import BASELINE, format_number, format_ratio


def load_folder(folder: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(plan, summary) of one sweep folder; :class:`ExperimentError` says what is missing where."""
    files = {name: folder / name for name in ("plan.json", "results.json")}
    for name, path in files.items():
        if not path.is_file():
            raise ExperimentError(f"{folder}: no {name} (not a trace sweep's folder, or its report was never written)")
    try:
        plan = json.loads(files["plan.json"].read_text())
        summary = json.loads(files["results.json"].read_text())["summary"]
    except (ValueError, KeyError) as e:
        raise ExperimentError(f"{folder}: unreadable plan.json or results.json ({e})") from e
    return plan, summary


def summary_rows(folders: list[Path]) -> tuple[list[dict[str, Any]], list[str]]:
    """One row per (scenario, configuration) in folder order, and one line per folder's code."""
    rows: list[dict[str, Any]] = []
    code: list[str] = []
    seen: set[str] = set()
    for folder in folders:
        plan, summary = load_folder(folder)
        c = plan.get("code") or {}
        dirty = f", {len(c['dirty'])} uncommitted file(s)" if c.get("dirty") else ""
        code.append(f"`{folder.name}`: commit {str(c.get('commit', 'not recorded'))[:7]}{dirty}, "
                    f"started {plan.get('started', '?')}, {plan.get('repetitions', '?')} rounds")
        for scenario, configs in summary.items():
            if scenario in seen:
                raise ExperimentError(f"{folder}: scenario {scenario!r} is in two of the folders given")
            seen.add(scenario)
            for config, r in configs.items():
                rows.append({"scenario": scenario, "config": config, "folder": folder.name, **r})
    return rows, code


def write_summary(folders: list[Path], out: Path, command: str = "") -> list[dict[str, Any]]:
    """Write ``summary.md`` (naming `command`, the one that made it, when given) and
    ``summary.png`` into ``out`` (created); return the rows."""
    if not folders:
        raise ExperimentError("no sweep folder given")
    rows, code = summary_rows(folders)
    out.mkdir(parents=True, exist_ok=True)
    lines = ["# Trace-driven sweeps, side by side", "",
             f"Paired speed-up over {BASELINE} (median of the per-round ratios, 95% bootstrap CI) and medians "
             "over each configuration's runs, as each folder's results.md gives them.", "",
             *([f"Command: `{command}`", ""] if command else []),
             "Code per folder:", "", *[f"* {c}" for c in code], "",
             "| scenario | configuration | runs (CPU-bound) | p50 (ms) | speed-up p50 | speed-up p99 | "
             "values zero-filled | mag. drops / ECN marks | queue drops | RR FCT p99 (ms) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['scenario']} | {r['config']} | {r['runs']} ({r['cpu_bound']}) | "
                     f"{format_number(r['p50_s'], 1e3)} | {format_ratio(r.get('speedup_p50'), pairs=False)} | "
                     f"{format_ratio(r.get('speedup_p99'), pairs=False)} | {format_number(r['loss_share'], 100, 3)}% | "
                     f"{format_number(r['magnitude_drops'])} / {format_number(r['ecn_marks'])} | "
                     f"{format_number(r['queue_drops'])} | {format_number(r['rr_fct_p99_ms'], 1, 1)} |")
    (out / "summary.md").write_text("\n".join(lines) + "\n")
    _plot(rows, out / "summary.png")
    return rows


def _plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    scenarios = list(dict.fromkeys(r["scenario"] for r in rows))
    configs = [c for c in dict.fromkeys(r["config"] for r in rows) if c != BASELINE]
    width = 0.8 / max(len(configs), 1)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.6 * len(scenarios)), 4))
    for i, config in enumerate(configs):
        xs, meds, lo, hi = [], [], [], []
        for j, scenario in enumerate(scenarios):
            s = next((r.get("speedup_p50") for r in rows if r["scenario"] == scenario and r["config"] == config), None)
            if s and s.get("median") is not None:
                m = s["median"]
                xs.append(j + (i - (len(configs) - 1) / 2) * width)
                meds.append(m)
                lo.append(m - (s["low"] if s.get("low") is not None else m))
                hi.append((s["high"] if s.get("high") is not None else m) - m)
        if xs:
            ax.bar(xs, meds, width, yerr=[lo, hi], capsize=3, label=config)
    ax.axhline(1.0, color="gray", lw=0.8)
    ax.set_xticks(np.arange(len(scenarios)), scenarios)
    ax.set_ylabel(f"p50 speed-up vs {BASELINE} (paired, 95% CI)")
    if ax.patches:
        ax.legend(fontsize=8, ncol=min(len(configs), 5))
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
