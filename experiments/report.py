"""Results of training runs: a terminal table, Markdown, JSON and plots."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from experiments.metrics import RunMetrics
from gradfabric.console import console as make_console

COLUMNS = ("configuration", "iteration p50 (ms)", "iteration p99 (ms)", "time to target (s)",
           "final accuracy", "packets sent", "retransmitted", "dropped", "gradient loss")


def _time(value: float | None) -> str:
    return "not reached" if value is None else f"{value:.1f}"


def rows(metrics: Sequence[RunMetrics]) -> list[list[str]]:
    return [[m.name, f"{m.iteration_p50_s * 1e3:.1f}", f"{m.iteration_p99_s * 1e3:.1f}", _time(m.time_to_target_s),
             f"{m.final_accuracy:.3f}", str(m.packets_sent), str(m.retransmitted), str(m.dropped),
             f"{m.gradient_loss * 100:.2f}%"] for m in metrics]


#: Short headers of the terminal table (same columns).
SHORT = ("config", "p50 ms", "p99 ms", "to target s", "final acc", "sent", "resent", "dropped", "grad loss")


def print_summary(metrics: Sequence[RunMetrics], console: Console | None = None) -> None:
    table = Table(title=f"target accuracy {metrics[0].target_accuracy:.2f}" if metrics else None)
    for c in SHORT:
        table.add_column(c, justify="left" if c == "config" else "right")
    for row in rows(metrics):
        table.add_row(*row)
    (console or make_console()).print(table)


def markdown_table(metrics: Sequence[RunMetrics]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" + "---:|" * (len(COLUMNS) - 1)]
    lines += ["| " + " | ".join(row) + " |" for row in rows(metrics)]
    return "\n".join(lines)


def speedups(metrics: Sequence[RunMetrics], baseline: str) -> dict[str, float | None]:
    """Time-to-target of the baseline divided by each run's (None where one did not reach it)."""
    base = next((m for m in metrics if m.name == baseline), None)
    out: dict[str, float | None] = {}
    for m in metrics:
        if base is None or base.time_to_target_s is None or m.time_to_target_s is None:
            out[m.name] = None
        else:
            out[m.name] = base.time_to_target_s / m.time_to_target_s
    return out


def write_json(metrics: Sequence[RunMetrics], path: Path, meta: dict[str, Any]) -> None:
    path.write_text(json.dumps({"meta": meta, "runs": [m.to_dict() for m in metrics]}, indent=1) + "\n")


def plot(metrics: Sequence[RunMetrics], out_dir: Path) -> list[Path]:
    """accuracy.png (test accuracy against wall time) and iteration_cdf.png."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    paths = []
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for m in metrics:
        if m.accuracy_curve:
            t, a = zip(*m.accuracy_curve)
            ax.plot(t, a, label=m.name, marker=".")
    if metrics:
        ax.axhline(metrics[0].target_accuracy, color="grey", linestyle=":", linewidth=1, label="target")
    ax.set_xlabel("wall time (s)")
    ax.set_ylabel("test accuracy")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize="small")
    fig.tight_layout()
    paths.append(out_dir / "accuracy.png")
    fig.savefig(paths[-1], dpi=120)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for m in metrics:
        if m.iteration_times:
            x = np.sort(np.asarray(m.iteration_times) * 1e3)
            ax.step(x, np.arange(1, x.size + 1) / x.size, where="post", label=m.name)
    ax.set_xscale("log")
    ax.set_xlabel("iteration time (ms)")
    ax.set_ylabel("CDF")
    ax.grid(alpha=0.3, which="both")
    ax.legend(loc="lower right", fontsize="small")
    fig.tight_layout()
    paths.append(out_dir / "iteration_cdf.png")
    fig.savefig(paths[-1], dpi=120)
    plt.close(fig)
    return paths
