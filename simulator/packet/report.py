"""Figures of raw runs (the fabric's or the packet simulation's: the same record format) and
the table comparing them.

Per run, as ``experiments/stats.py`` takes them: iteration time p50 and p99 of the first
job's rank 0 (its first iteration left out), switch drops of drop-eligible packets, and the
share of gradient values zero-filled over the job's ranks. Per scenario and configuration:
the median over runs.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from simulator.packet.runtime import PacketSimulationError


def run_figures(record: dict[str, Any]) -> dict[str, float]:
    jobs = record.get("jobs") or {}
    if not jobs:
        raise PacketSimulationError(f"run {record.get('run_id', '?')} has no jobs")
    first = jobs[sorted(jobs, key=int)[0]]
    rank0 = first["ranks"]["0"]["records"]
    times = np.array([r["iteration_s"] for r in rank0[1:]], dtype=float)
    reduced = sum(int(r["totals"].get("reduced", 0)) for r in first["ranks"].values())
    lost = sum(int(r["totals"].get("lost", 0)) for r in first["ranks"].values())
    return {"iteration_p50_s": float(np.percentile(times, 50)) if times.size else float("nan"),
            "iteration_p99_s": float(np.percentile(times, 99)) if times.size else float("nan"),
            "magnitude_drops": float(record.get("switch", {}).get("magnitude_drops", 0)),
            "gradient_loss": lost / reduced if reduced else 0.0,
            "wall_s": float(record.get("simulation", {}).get("wall_s", float("nan")))}


def keep_run(record: dict[str, Any], runs: list[dict[str, Any]], out: Path | None, say: Callable[[str], None]) -> None:
    """A finished run: marked ok, added to `runs`, its figures said, its record written to
    ``out/runs/<run_id>.json`` when there is an `out`."""
    record["status"] = "ok"
    runs.append(record)
    fig = run_figures(record)
    say(f"      iteration p50 {fig['iteration_p50_s'] * 1e3:.1f} ms, p99 {fig['iteration_p99_s'] * 1e3:.1f} ms, "
        f"{fig['magnitude_drops']:.0f} eligible drops, wall {record['simulation']['wall_s']:.1f} s")
    if out is not None:
        (out / "runs" / f"{record['run_id']}.json").write_text(json.dumps(record, indent=1) + "\n")


def load_runs(folders: list[Path]) -> list[dict[str, Any]]:
    """Every successful raw run under ``folders`` (``runs/*.json``)."""
    runs = []
    for folder in folders:
        files = sorted((folder / "runs").glob("*.json"))
        if not files:
            raise PacketSimulationError(f"{folder}: no runs/*.json")
        for path in files:
            try:
                record = json.loads(path.read_text())
            except (OSError, json.JSONDecodeError) as exc:
                raise PacketSimulationError(f"cannot read run {path}: {exc}") from exc
            if record.get("status") == "ok":
                runs.append(record)
    return runs


def summarise(runs: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, float]]:
    """(scenario, configuration) -> median figures over its runs, and the run count."""
    grouped: dict[tuple[str, str], list[dict[str, float]]] = defaultdict(list)
    for record in runs:
        grouped[(record["scenario"], record["config"])].append(run_figures(record))
    out = {}
    for key, figures in grouped.items():
        out[key] = {name: float(np.median([f[name] for f in figures])) for name in figures[0]}
        out[key]["runs"] = len(figures)
    return out


def comparison_markdown(simulated: dict[tuple[str, str], dict[str, float]],
                        fabric: dict[tuple[str, str], dict[str, float]] | None) -> str:
    """One row per scenario and configuration: ns-3's figures, the fabric's, and the ratio."""
    if fabric is None:
        lines = ["| scenario | configuration | runs | iteration p50 (ms) | iteration p99 (ms) | magnitude drops "
                 "| gradient loss (%) | wall per run (s) |", "|---|---|---:|---:|---:|---:|---:|---:|"]
        for (sc, cfg), f in sorted(simulated.items()):
            lines.append(f"| {sc} | {cfg} | {f['runs']:.0f} | {f['iteration_p50_s'] * 1e3:.1f} | "
                         f"{f['iteration_p99_s'] * 1e3:.1f} | {f['magnitude_drops']:.0f} | "
                         f"{f['gradient_loss'] * 100:.2f} | {f['wall_s']:.1f} |")
        return "\n".join(lines) + "\n"
    lines = ["| scenario | configuration | p50 ns-3 (ms) | p50 fabric (ms) | ns-3 / fabric | p99 ns-3 (ms) | "
             "p99 fabric (ms) | drops ns-3 / fabric | loss ns-3 / fabric (%) | within 10% |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for key in sorted(set(simulated) | set(fabric)):
        s, f = simulated.get(key), fabric.get(key)
        if s is None or f is None:
            lines.append(f"| {key[0]} | {key[1]} | {'-' if s is None else format(s['iteration_p50_s'] * 1e3, '.1f')} "
                         f"| {'-' if f is None else format(f['iteration_p50_s'] * 1e3, '.1f')} | - | | | | | "
                         f"{'not simulated' if s is None else 'no fabric run'} |")
            continue
        ratio = s["iteration_p50_s"] / f["iteration_p50_s"]
        lines.append(f"| {key[0]} | {key[1]} | {s['iteration_p50_s'] * 1e3:.1f} | {f['iteration_p50_s'] * 1e3:.1f} | "
                     f"{ratio:.2f} | {s['iteration_p99_s'] * 1e3:.1f} | {f['iteration_p99_s'] * 1e3:.1f} | "
                     f"{s['magnitude_drops']:.0f} / {f['magnitude_drops']:.0f} | "
                     f"{s['gradient_loss'] * 100:.2f} / {f['gradient_loss'] * 100:.2f} | "
                     f"{'yes' if abs(ratio - 1) <= 0.10 else 'no'} |")
    return "\n".join(lines) + "\n"
