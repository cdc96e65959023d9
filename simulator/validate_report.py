"""The validation table of `gradfabric sim validate`: Markdown, CSV and a plot of predicted
against measured iteration times."""

from __future__ import annotations

import csv
import io
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path

from simulator.report import markdown_table

HEADER = ["job", "scenario", "port (pkt/s)", "configuration", "sweeps", "runs", "CPU starvation s",
          "p50 measured (ms)", "p50 predicted, host cost 0 (ms)", "host cost (us/pkt, calibrated on other sweeps)",
          "p50 predicted (ms)", "p50 error", "p99 measured (ms)", "p99 predicted (ms)", "p99 error",
          "exposed comm. measured (ms)", "exposed comm. predicted (ms)", "notes"]
RANK_HEADER = ["job", "scenario", "port (pkt/s)", "measured", "predicted", "same",
               "same in every clearly ordered pair", "pairs in the same order",
               "of the pairs the runs order clearly (gap outside its paired 95% CI)",
               "ties predicted the other way (gap inside its paired 95% CI)",
               "pairs predicted the other way (share of resamples keeping the measured order)",
               "paired rule: every clear pair kept", "paired rule: clear pairs kept",
               "paired rule: pairs not judged (fewer than 3 rounds run side by side)",
               "paired rule on the pairs predicted the other way"]
CLEAN_HEADER = ["job", "scenario", "port (pkt/s)", "configuration", "runs", "p50 measured (ms)", "p50 predicted (ms)",
                "p50 error"]
FAMILY_HEADER = ["family", "sweeps", "runs", "host cost per fold (us/pkt, each fitted without one sweep)",
                 "fitted on every run (us/pkt; for reference, not used)"]


def _median(values: Sequence[float]) -> str:
    return f"{statistics.median(values):.0%}" if values else "-"


def write_report(out: Path, command: str, rows: Sequence[Sequence[str]], rank_rows: Sequence[Sequence[str]],
                 points: Sequence[tuple[str, float, float, float, float]], errors: Mapping[str, Sequence[float]],
                 family_rows: Sequence[Sequence[str]] = (), note: str = "", clean: str = "", notes: str = "") -> str:
    """Write ``validation.md``, ``validation.csv`` and ``validation.png`` under ``out``; return the Markdown.
    ``clean``: a section on a subset of the sweeps (:func:`clean_section`), after the table; ``notes``:
    Markdown under the ranking table."""
    out.mkdir(parents=True, exist_ok=True)
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(HEADER)
    writer.writerows(rows)
    (out / "validation.csv").write_text(buf.getvalue())
    _plot(points, out / "validation.png")
    md = (
        "# The simulator against the training experiment's runs\n\n"
        f"Made by `{command}`. Model: simulator/run_model.py, simulator/fabric_model.py and "
        "simulator/host_model.py (module docs), calibrated by simulator/validate.py. Host costs per packet are calibrated leave one sweep out: "
        "each run is predicted with costs fitted on the other sweeps' runs only.\n\n"
        + "Median absolute error of the predicted iteration p50: " + summary(errors, rank_rows) + " "
        + by_port(rows) + " " + tails(rows) + "\n\n"
        + note
        + markdown_table(HEADER, rows)
        + "\n**Ranking** of configurations by iteration p50 (fastest first):\n\n"
        + markdown_table(RANK_HEADER, rank_rows)
        + (f"\n{notes}\n" if notes else "")
        + "\n**Host cost per packet** by family (seconds of an uncontended CPU per packet the busiest host "
        "sends or receives):\n\n"
        + markdown_table(FAMILY_HEADER, family_rows)
        + clean
        + "\n![](validation.png)\n"
    )
    (out / "validation.md").write_text(md)
    return md


def summary(errors: Mapping[str, Sequence[float]], rank_rows: Sequence[Sequence[str]]) -> str:
    """The median |p50 error| over the groups (``errors`` by job kind) and how many scenarios and
    pairs of ``rank_rows`` (:func:`simulator.validate.rank_row` after job, scenario, port) keep the
    measured order, as one sentence."""
    every = [e for values in errors.values() for e in values]
    per_kind = ", ".join(f"{kind} job {_median(v)} over {len(v)}" for kind, v in sorted(errors.items()))
    same = sum(1 for r in rank_rows if r[5] == "yes")
    same_clear = sum(1 for r in rank_rows if r[6].startswith("yes"))
    only_ties = [f"{r[0]} {r[1]} ({r[2]} pkt/s)" for r in rank_rows if r[6].startswith("yes (")]
    kept = sum(int(r[7].split()[0]) for r in rank_rows)
    pairs = sum(int(r[7].split()[-1]) for r in rank_rows)
    kept_clear = sum(int(r[8].split()[0]) for r in rank_rows)
    clear = sum(int(r[8].split()[-1]) for r in rank_rows)
    swapped_ties = sum(int(r[9].split()[0]) for r in rank_rows)
    ties = sum(int(r[9].split()[-1]) for r in rank_rows)
    paired_every = sum(1 for r in rank_rows if r[11] == "yes")
    kept_paired = sum(int(r[12].split()[0]) for r in rank_rows)
    clear_paired = sum(int(r[12].split()[-1]) for r in rank_rows)
    unjudged = sum(int(r[13].split()[0]) for r in rank_rows)
    return (f"**{_median(every)}** over {len(every)} job x scenario x configuration x port-rate groups ({per_kind}; "
            f"target 10%, goal 5%). Same ranking of configurations in {same} of {len(rank_rows)} scenarios; the "
            f"same order of every clearly ordered pair in {same_clear} of {len(rank_rows)}"
            + (f" (where the strict ranking differs only in ties: {', '.join(only_ties)})" if only_ties else "")
            + f"; {kept} of {pairs} pairs of configurations in the same order, {kept_clear} of the {clear} pairs "
            "whose measured order is clear (the paired 95% confidence interval of their gap over 1,000 resamples of "
            f"the runs excludes 0); {ties} pairs are ties (the interval includes 0), {swapped_ties} of them predicted "
            f"the other way. On paired runs only (the same sweep's rounds side by side, 3 at least): every clear pair "
            f"kept in {paired_every} of {len(rank_rows)} scenarios, {kept_paired} of the {clear_paired} clear pairs; "
            f"{unjudged} of the {pairs} pairs were never run so and are not judged.")


def by_port(rows: Sequence[Sequence[str]]) -> str:
    """The median |p50 error| of the table's ``rows`` (:data:`HEADER`) per port rate, as one sentence
    (from the printed errors, whole percents; groups out of reach left out)."""
    port, column = HEADER.index("port (pkt/s)"), HEADER.index("p50 error")
    found: dict[float, list[float]] = {}
    for row in rows:
        if row[column].endswith("%"):
            found.setdefault(float(row[port].replace(",", "")), []).append(abs(float(row[column].rstrip("%"))) / 100)
    parts = [f"{pps:,.0f} pkt/s {_median(v)} over {len(v)}" for pps, v in sorted(found.items())]
    return f"By port rate: {', '.join(parts)}." if parts else ""


def tails(rows: Sequence[Sequence[str]]) -> str:
    """How the predicted p99 of the table's ``rows`` (:data:`HEADER`) falls: per job kind, the groups
    whose p99 is under-predicted and the median |p99 error|, as one sentence."""
    column = HEADER.index("p99 error")
    by_kind: dict[str, list[str]] = {}
    for row in rows:
        if row[column] not in ("-", ""):
            by_kind.setdefault(row[0], []).append(row[column])
    # By the error's sign as printed: "-0%" is under-predicted by less than half a percent.
    parts = [f"{kind} job under-predicted in {sum(1 for e in v if e.startswith('-'))} of {len(v)} groups, median "
             f"|p99 error| {_median([abs(float(e.rstrip('%'))) / 100 for e in v])}"
             for kind, v in sorted(by_kind.items())]
    return f"The p99: {'; '.join(parts)}." if parts else ""


def clean_section(title: str, sweeps: Sequence[str], errors: Mapping[str, Sequence[float]],
                  rows: Sequence[Sequence[str]], rank_rows: Sequence[Sequence[str]]) -> str:
    """A section on the runs of ``sweeps`` alone (each predicted as in the table above): their
    summary, their groups and their ranking."""
    if not rows:
        return ""
    return (f"\n## {title}\n\nThe runs of {', '.join(sweeps)} alone, each predicted as above (the same "
            "host costs and spread, from the other sweeps). Median absolute error of the predicted iteration p50: "
            + summary(errors, rank_rows) + "\n\n" + markdown_table(CLEAN_HEADER, rows)
            + "\n" + markdown_table(RANK_HEADER, rank_rows))


def _plot(points: Sequence[tuple[str, float, float, float, float]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 7))
    for label, m50, p50, m99, p99 in points:
        ax.scatter([m50 * 1e3], [p50 * 1e3], marker="o")
        ax.scatter([m99 * 1e3], [p99 * 1e3], marker="^", alpha=0.4)
        ax.annotate(label, (m50 * 1e3, p50 * 1e3), fontsize=6)
    values = [v * 1e3 for p in points for v in p[1:]] or [1.0, 10.0]
    lo, hi = min(values) / 1.5, max(values) * 1.5
    ax.plot([lo, hi], [lo, hi], color="grey", linewidth=0.8)
    for f in (0.9, 1.1):
        ax.plot([lo, hi], [lo * f, hi * f], color="grey", linewidth=0.5, linestyle=":")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("measured iteration time (ms)")
    ax.set_ylabel("predicted (ms); o p50, ^ p99; dotted: +-10%")
    ax.set_title("Simulator vs fabric runs (host cost calibrated leave one sweep out)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
