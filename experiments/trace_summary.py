"""One table and one plot over several trace-driven sweep folders (one scenario or more each).

Reads each folder's ``results.json`` and ``plan.json`` as :func:`experiments.trace_report.write_trace_report`
wrote them; nothing is recomputed: every figure is the folder's own (medians over runs, paired
speed-ups with their CIs). The code each folder ran is listed, so a reader sees whether the
scenarios are one sweep's parts (one commit) or not, with the rounds each completed (a sweep
ended by its stopping rule: ``plan.json``'s ``stopped``).

Pooled folders, ``A+B`` (a sweep and its continuation, :mod:`experiments.trace_continue`): the
run records of both, which ran the same code and settings in distinct rounds, summarized
together by :func:`experiments.trace_report.summarize` (one pair per round, one CI).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from experiments.errors import ExperimentError
from experiments.trace_report import BASELINE, format_number, format_ratio, mechanism_cell, summarize

#: plan.json entries that pooled folders must share (the runs' settings and code)
POOLED_SAME = ("sweep", "job", "scale", "timers", "starved_share", "cpu_bound_share")


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


def planned_rounds(plan: dict[str, Any]) -> int | None:
    """Rounds in a plan: those of its runs (a continued plan holds only the rounds left), else
    ``repetitions``."""
    runs = plan.get("runs")
    return len({r["repetition"] for r in runs}) if runs else plan.get("repetitions")


def rounds_completed(plan: dict[str, Any]) -> int | None:
    """Rounds a sweep completed: ``stopped``'s count when its stopping rule ended it, else the
    planned rounds (None when the plan says neither)."""
    stopped = plan.get("stopped")
    if stopped and "rounds_completed" in stopped:
        return int(stopped["rounds_completed"])
    return planned_rounds(plan)


def _rounds_text(plan: dict[str, Any]) -> str:
    done = rounds_completed(plan)
    if plan.get("stopped"):
        return f"{done} of {planned_rounds(plan)} planned rounds completed (stopping rule)"
    return f"{'?' if done is None else done} rounds"


def load_pooled(folders: list[Path], against: tuple[str, ...] = ()) -> tuple[dict[str, Any], dict[str, Any]]:
    """(plan of the first, summary of every run record of all) of folders run as one sweep's parts.

    Refuses folders whose code fingerprint or settings differ, or that hold the same run twice."""
    plans = [load_folder(f)[0] for f in folders]
    for folder, plan in zip(folders[1:], plans[1:]):
        for key in ("code", *POOLED_SAME):
            mine = plan.get(key, {}).get("fingerprint") if key == "code" else plan.get(key)
            first = plans[0].get(key, {}).get("fingerprint") if key == "code" else plans[0].get(key)
            if mine != first:
                raise ExperimentError(f"{folder}: {key} differs from {folders[0]}'s; only parts of one sweep pool")
    records: list[dict[str, Any]] = []
    seen: dict[tuple[str, str, int], Path] = {}
    for folder in folders:
        for path in sorted((folder / "runs").glob("*.json")):
            r = json.loads(path.read_text())
            key = (r["scenario"], r["config"], int(r["repetition"]))
            if key in seen:
                raise ExperimentError(f"{path}: round {key[2]} of {key[0]} {key[1]} is also in {seen[key]}")
            seen[key] = folder
            records.append(r)
    if not records:
        raise ExperimentError(f"{'+'.join(map(str, folders))}: no run records to pool")
    return plans[0], summarize(records, against)


def _code_line(name: str, plans: list[dict[str, Any]]) -> str:
    c = plans[0].get("code") or {}
    dirty = f", {len(c['dirty'])} uncommitted file(s)" if c.get("dirty") else ""
    parts = "; ".join(f"started {p.get('started', '?')}, {_rounds_text(p)}" for p in plans)
    pooled = f", pooled ({sum(rounds_completed(p) or 0 for p in plans)} rounds)" if len(plans) > 1 else ""
    return f"`{name}`: commit {str(c.get('commit', 'not recorded'))[:7]}{dirty}, {parts}{pooled}"


def summary_rows(folders: list[Path], against: tuple[str, ...] = ()) -> tuple[list[dict[str, Any]], list[str]]:
    """One row per (scenario, configuration) in folder order, and one line per folder's code;
    ``against``: configurations each row is also compared with (from the run records)."""
    rows: list[dict[str, Any]] = []
    code: list[str] = []
    seen: set[str] = set()
    for folder in folders:
        parts = [Path(p) for p in str(folder).split("+")]
        if len(parts) > 1 or any((parts[0] / "runs").glob("*.json")):  # from the run records, as results.md
            _, summary = load_pooled(parts, against)
            plans = [load_folder(p)[0] for p in parts]
        else:
            plan, summary = load_folder(folder)
            plans = [plan]
        name = "+".join(p.name for p in parts)
        code.append(_code_line(name, plans))
        for scenario, configs in summary.items():
            if scenario in seen:
                raise ExperimentError(f"{folder}: scenario {scenario!r} is in two of the folders given")
            seen.add(scenario)
            for config, r in configs.items():
                rows.append({"scenario": scenario, "config": config, "folder": name, **r})
    return rows, code


def write_summary(folders: list[Path], out: Path, command: str = "",
                  against: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """Write ``summary.md`` (naming `command`, the one that made it, when given) and
    ``summary.png`` into ``out`` (created); return the rows. ``against``: configurations whose paired
    p50 speed-up columns are added (each row over each of them, where both ran)."""
    if not folders:
        raise ExperimentError("no sweep folder given")
    rows, code = summary_rows(folders, against)
    out.mkdir(parents=True, exist_ok=True)
    lines = ["# Trace-driven sweeps, side by side", "",
             f"Paired speed-up over {BASELINE} (median of the per-round ratios, 95% bootstrap CI) and medians "
             "over each configuration's runs, as each folder's results.md gives them (pooled folders, A+B: "
             "computed the same way from the run records of both).", "",
             *([f"Command: `{command}`", ""] if command else []),
             "Code per folder:", "", *[f"* {c}" for c in code], "",
             "The strongest TCP baseline of a scenario is its configuration over kernel TCP with the smallest "
             "median p50; each configuration's paired p50 speed-up over it is in the last column.", "",
             "Mechanisms (medians per run): magnitude drops / ECN marks / sprayed packets (over how many "
             "(switch, group, member) cells) / packets the switches sent from the layer queues 6-7; blank where "
             "a folder's records predate the counter.", "",
             "| scenario | configuration | runs (CPU-bound) | p50 (ms) | speed-up p50 | speed-up p99 | "
             "values zero-filled | mechanisms | queue drops | RR FCT p99 (ms) | "
             "speed-up p50 vs the strongest TCP |" + "".join(f" speed-up p50 vs {n} |" for n in against),
             "|---|---|---|---|---|---|---|---|---|---|---|" + "---|" * len(against)]
    for r in rows:
        lines.append(f"| {r['scenario']} | {r['config']} | {r['runs']} ({r['cpu_bound']}) | "
                     f"{format_number(r['p50_s'], 1e3)} | {format_ratio(r.get('speedup_p50'), pairs=False)} | "
                     f"{format_ratio(r.get('speedup_p99'), pairs=False)} | {format_number(r['loss_share'], 100, 3)}% | "
                     f"{mechanism_cell(r)} | "
                     f"{format_number(r['queue_drops'])} | {format_number(r['rr_fct_p99_ms'], 1, 1)} | "
                     f"{_strongest_cell(r)} |"
                     + "".join(f" {format_ratio(r.get('speedup_p50_vs', {}).get(n), pairs=False)} |" for n in against))
    (out / "summary.md").write_text("\n".join(lines) + "\n")
    _plot(rows, out / "summary.png")
    return rows


def _strongest_cell(row: dict[str, Any]) -> str:
    """The row's speed-up over its scenario's strongest TCP baseline, naming that baseline."""
    name = row.get("strongest_tcp")
    if not name:
        return ""
    if row["config"] == name:
        return "(the strongest)"
    return f"{format_ratio(row.get('speedup_p50_strongest_tcp'), pairs=False)} vs {name}"


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
