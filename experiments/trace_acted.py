"""Did each configuration's mechanisms act in every run? Per-run ranges of the switches' counters.

Per configuration of a trace sweep's folder (ok runs): the smallest and largest per run of the
share of gradient values zero-filled, magnitude drops, ECN marks, sprayed packets, the
(switch, group, member) cells that took them, and packets sent from the job's class queue (5)
and the layer queues (6-7) (:func:`experiments.trace_report.run_figures`), and how many runs had
each above zero. A mechanism acted in a configuration when every run shows it; one that should
be off (the configuration leaves it out) shows zero in every run.

``python -m experiments.trace_acted FOLDER`` prints the table.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from experiments.errors import ExperimentError
from experiments.trace_report import format_number, run_figures

FIGURES = (("lost_values", "values zero-filled"), ("magnitude_drops", "magnitude drops"), ("ecn_marks", "ECN marks"),
           ("sprayed_packets", "sprayed packets"), ("sprayed_members", "sprayed members"),
           ("queue5_tx", "queue 5 sent"), ("queues67_tx", "queues 6-7 sent"))


def acted(records: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """Per configuration (in first-seen order) and figure: ``low``, ``high`` and ``runs_above_zero``
    over the ok runs that recorded it, and ``runs`` (those runs)."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    figs: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        if r["status"] == "ok":
            figs.setdefault(r["config"], []).append(run_figures(r))
    for config, runs in figs.items():
        out[config] = {}
        for key, _ in FIGURES:
            values = [f[key] for f in runs if f.get(key) is not None]
            out[config][key] = {"low": min(values) if values else None, "high": max(values) if values else None,
                                "runs_above_zero": sum(1 for v in values if v > 0), "runs": len(values)}
    return out


def acted_table(folder: Path) -> str:
    """Markdown: a row per configuration, a cell per figure, ``low-high (k of n runs > 0)``."""
    records = [json.loads(p.read_text()) for p in sorted((folder / "runs").glob("*.json"))]
    table = acted(records)
    if not table:
        raise ExperimentError(f"{folder}: no ok run recorded")
    lines = ["| configuration | " + " | ".join(name for _, name in FIGURES) + " |", "|---|" + "---|" * len(FIGURES)]
    for config, cells in table.items():
        lines.append(f"| {config} | " + " | ".join(
            f"{format_number(c['low'])}-{format_number(c['high'])} ({c['runs_above_zero']} of {c['runs']} > 0)"
            if c["runs"] else "not recorded" for c in (cells[k] for k, _ in FIGURES)) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.trace_acted", description=__doc__.split("\n")[0])
    parser.add_argument("folder", type=Path)
    print(acted_table(parser.parse_args(argv).folder))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
