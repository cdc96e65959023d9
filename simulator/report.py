"""Reporting: Markdown tables, CSV files and PNG plots of simulation rows."""

from __future__ import annotations

import csv
import dataclasses
import io
from collections.abc import Sequence
from pathlib import Path

from simulator.sweep import Row

COLUMNS = (
    ("model", "model", "{}"),
    ("arch", "arch", "{}"),
    ("workers", "workers", "{}"),
    ("scheduler", "scheduler", "{}"),
    ("iteration_s", "iteration (ms)", "{:.2f}"),
    ("throughput", "samples/s", "{:,.0f}"),
    ("speedup", "speedup", "{:.3f}x"),
    ("scaling_efficiency", "scaling eff.", "{:.1%}"),
)


def _cell(row: Row, field: str, fmt: str) -> str:
    value = getattr(row, field)
    if field == "iteration_s":
        value = value * 1e3
    return fmt.format(value)


def markdown_table(header: Sequence[str], body: Sequence[Sequence[str]]) -> str:
    """A GitHub Markdown table; columns after the first text columns are right-aligned."""
    align = ["---" if not any(c[:1].isdigit() for c in col) else "---:" for col in zip(*body)] if body else []
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(align or ["---"] * len(header)) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in body]
    return "\n".join(lines) + "\n"


def rows_markdown(rows: Sequence[Row], baseline: str) -> str:
    header = [label if field != "speedup" else f"speedup vs {baseline}" for field, label, _ in COLUMNS]
    body = [[_cell(r, f, fmt) for f, _, fmt in COLUMNS] for r in rows]
    return markdown_table(header, body)


def rows_csv(rows: Sequence[Row]) -> str:
    out = io.StringIO()
    fields = [f.name for f in dataclasses.fields(Row)]
    writer = csv.DictWriter(out, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    for r in rows:
        writer.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in dataclasses.asdict(r).items()})
    return out.getvalue()


def plot_rows(rows: Sequence[Row], path: Path, title: str, baseline: str) -> None:
    """Throughput and speedup against the worker count, one line per scheduler."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    schedulers = list(dict.fromkeys(r.scheduler for r in rows))
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    for s in schedulers:
        mine = [r for r in rows if r.scheduler == s]
        ax1.plot([r.workers for r in mine], [r.scaling_efficiency for r in mine], marker="o", label=s)
        ax2.plot([r.workers for r in mine], [r.speedup for r in mine], marker="o", label=s)
    for ax in (ax1, ax2):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("workers")
        ax.grid(True, alpha=0.3)
    ax1.set_ylabel("scaling efficiency")
    ax2.set_ylabel(f"speedup over {baseline}")
    ax2.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_rows(rows: Sequence[Row], out_dir: Path, stem: str, title: str, baseline: str) -> list[Path]:
    """``stem``.md, ``stem``.csv and ``stem``.png under ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    md, csv_path, png = out_dir / f"{stem}.md", out_dir / f"{stem}.csv", out_dir / f"{stem}.png"
    md.write_text(f"# {title}\n\n" + rows_markdown(rows, baseline))
    csv_path.write_text(rows_csv(rows))
    plot_rows(rows, png, title, baseline)
    return [md, csv_path, png]
