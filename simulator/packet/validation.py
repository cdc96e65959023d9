"""The packet simulation against the fabric's runs, in the form of `gradfabric sim validate`'s
table: per job, scenario, port rate and configuration, the iteration p50 and p99 of every
rank pooled (iteration 0 left out), ns-3's against the fabric's, and the ranking.

Both sides are read by the simulator's one reader of raw runs (:mod:`simulator.fabric_runs`),
so the fabric's sweeps and ns-3's result folders count alike. Each ns-3 folder is one
**model** (a set of host-side terms, say which in its name); the table has a row per model
and group. Beside the iteration times it shows what the network saw in both: the
request/response flow's completion time (the fabric's round trip for a small exchange) and
the long TCP flows' goodput, read from the same raw records.

``python -m simulator.packet.validation --fabric DIR ... --model NAME=DIR ... --out DIR``
writes ``validation.md``, ``validation.csv`` and ``validation.png``. A folder given as
``TAG=DIR`` (``--fabric``) or ``NAME=DIR@TAG`` (``--model``) puts its runs under the scenario
"scenario (TAG)": two sweeps of one scenario and port rate (a loaded and a quieter machine), each
against the ns-3 runs that read its own records, stay two groups.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import statistics
from collections import defaultdict
from dataclasses import replace
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from simulator.errors import SimulatorError
from simulator.fabric_runs import Run, load_runs

HEADER = ["job", "scenario", "port (pkt/s)", "configuration", "model", "sweeps", "runs", "p50 measured (ms)",
          "p50 ns-3 (ms)", "p50 error", "p99 measured (ms)", "p99 ns-3 (ms)", "p99 error",
          "request/response p50 fabric / ns-3 (ms)", "long TCP goodput fabric / ns-3 (Mbit/s)"]
Key = tuple[str, str, float, str]  # job kind, scenario, port pps, configuration


def _group(runs: Sequence[Run]) -> dict[Key, list[Run]]:
    out: dict[Key, list[Run]] = defaultdict(list)
    for run in runs:
        out[(run.kind, run.scenario, run.port_pps, run.config)].append(run)
    return out


def _pooled(runs: Sequence[Run], q: float) -> float:
    return float(np.percentile([t for r in runs for t in r.iterations], q))


def network_figures(folders: Sequence[Path], configs: Sequence[frozenset[str] | None] | None = None,
                    tags: Sequence[str] | None = None) -> dict[tuple[str, str], dict[str, float]]:
    """(scenario, configuration) -> median request/response FCT (s) and long-TCP goodput
    (Mbit/s) over every run's background flows (``configs``: per folder, those read; None: all;
    ``tags``: per folder, its tag or "", the scenario then named as :func:`tagged` names it)."""
    fct: dict[tuple[str, str], list[float]] = defaultdict(list)
    tcp: dict[tuple[str, str], list[float]] = defaultdict(list)
    for i, folder in enumerate(folders):
        only = configs[i] if configs else None
        for path in sorted(folder.rglob("runs/*.json")):
            try:
                record = json.loads(path.read_text())
            except (OSError, ValueError) as exc:
                raise SimulatorError(f"{path}: not a run record: {exc}") from None
            if record.get("status") != "ok" or (only is not None and str(record.get("config")) not in only):
                continue
            key = (_tag_name(str(record.get("scenario")), tags[i] if tags else ""), str(record.get("config")))
            for flow in record.get("background") or []:
                if flow.get("protocol") == "rr":
                    fct[key].extend(float(x) for x in flow.get("fct_s") or [])
                elif flow.get("protocol") == "tcp" and flow.get("goodput_mbps") is not None:
                    tcp[key].append(float(flow["goodput_mbps"]))
    keys = set(fct) | set(tcp)
    return {k: {"rr_fct_s": statistics.median(fct[k]) if fct[k] else float("nan"),
                "tcp_mbps": statistics.median(tcp[k]) if tcp[k] else float("nan")} for k in keys}


def _error(predicted: float, measured: float) -> float:
    return predicted / measured - 1


def _fmt(x: float, scale: float = 1e3, digits: int = 1) -> str:
    return "-" if x != x else f"{x * scale:.{digits}f}"


#: name, folder, configurations read (None: all), tag ("" none)
Model = tuple[str, Path] | tuple[str, Path, frozenset[str] | None] | tuple[str, Path, frozenset[str] | None, str]


def parse_model(item: str) -> Model:
    """``NAME=DIR``, ``NAME=DIR::CONFIG,CONFIG`` (only those configurations' runs of DIR), either
    with ``@TAG`` at the end (its runs under "scenario (TAG)", module doc)."""
    name, sep, rest = item.partition("=")
    rest, _, tag = rest.partition("@")
    folder, _, only = rest.partition("::")
    if not sep or not name or not folder:
        raise SimulatorError(f"--model {item!r}: expected NAME=DIR[::CONFIG,...][@TAG]")
    return (name, Path(folder), frozenset(c for c in only.split(",") if c) or None, tag)


def parse_fabric(item: str) -> tuple[Path, str]:
    """``DIR`` or ``TAG=DIR``: a fabric sweep folder and its tag ("" none)."""
    tag, sep, folder = item.rpartition("=")
    if sep and not folder:
        raise SimulatorError(f"--fabric {item!r}: expected DIR or TAG=DIR")
    return Path(folder), tag


def _tag_name(scenario: str, tag: str) -> str:
    return f"{scenario} ({tag})" if tag else scenario


def tagged(runs: Sequence[Run], tag: str) -> list[Run]:
    """``runs`` with their scenario named "scenario (tag)" (unchanged without a tag)."""
    return [replace(r, scenario=_tag_name(r.scenario, tag)) for r in runs] if tag else list(runs)


def read_why(path: Path) -> dict[tuple[str, str, str], str]:
    """(model, scenario, configuration) -> why the group is not within 10%, from a CSV with those
    four columns (``model``, ``scenario``, ``configuration``, ``why``; the scenario as the table names
    it, tag included)."""
    try:
        with path.open(newline="") as f:
            return {(r["model"], r["scenario"], r["configuration"]): r["why"] for r in csv.DictReader(f)}
    except (OSError, KeyError, csv.Error) as exc:
        raise SimulatorError(f"{path}: not a CSV of model, scenario, configuration, why: {exc}") from None


def compare(fabric: Sequence[Path | tuple[Path, str]], models: Sequence[Model],
            why: dict[tuple[str, str, str], str] | None = None) -> dict[str, Any]:
    """Rows, ranking rows, plot points and errors per model (module doc); a fabric folder may
    come with its tag, ``(DIR, TAG)``. With ``why`` (:func:`read_why`) each row ends with its
    group's entry there ("-" within 10%, "not given" where a group outside it has none)."""
    sweeps = [f if isinstance(f, tuple) else (f, "") for f in fabric]
    measured = _group([r for folder, tag in sweeps for r in tagged(load_runs(folder), tag)])
    net_fabric = network_figures([f for f, _ in sweeps], tags=[t for _, t in sweeps])
    rows: list[list[str]] = []
    rank_rows: list[list[str]] = []
    points: list[tuple[str, float, float, float, float]] = []
    errors: dict[str, list[float]] = {}
    folders_of: dict[str, list[tuple[Path, frozenset[str] | None, str]]] = defaultdict(list)  # several: pooled
    for model in models:
        folders_of[model[0]].append((model[1], model[2] if len(model) > 2 else None,  # type: ignore[misc]
                                     model[3] if len(model) > 3 else ""))  # type: ignore[misc]
    for name, folders in folders_of.items():
        simulated = _group([r for folder, only, tag in folders for r in tagged(load_runs(folder), tag)
                            if only is None or r.config in only])
        net_sim = network_figures([f for f, _, _ in folders], [only for _, only, _ in folders],
                                  [tag for _, _, tag in folders])
        errors.setdefault(name, [])
        by_scenario: dict[tuple[str, str, float], dict[str, tuple[float, float]]] = defaultdict(dict)
        for key in sorted(set(simulated) & set(measured)):
            kind, scenario, pps, config = key
            m, s = measured[key], simulated[key]
            m50, s50, m99, s99 = _pooled(m, 50), _pooled(s, 50), _pooled(m, 99), _pooled(s, 99)
            errors[name].append(abs(_error(s50, m50)))
            by_scenario[(kind, scenario, pps)][config] = (m50, s50)
            nf, ns_ = net_fabric.get((scenario, config), {}), net_sim.get((scenario, config), {})
            rows.append([kind, scenario, f"{pps:,.0f}", config, name, str(len({r.sweep for r in m})), str(len(m)),
                         _fmt(m50), _fmt(s50), f"{_error(s50, m50):+.0%}", _fmt(m99), _fmt(s99),
                         f"{_error(s99, m99):+.0%}",
                         f"{_fmt(nf.get('rr_fct_s', float('nan')), digits=2)} / "
                         f"{_fmt(ns_.get('rr_fct_s', float('nan')), digits=2)}",
                         f"{_fmt(nf.get('tcp_mbps', float('nan')), 1, 0)} / {_fmt(ns_.get('tcp_mbps', float('nan')), 1, 0)}"])
            if why is not None:
                rows[-1].append("-" if abs(_error(s50, m50)) <= 0.10 else why.get((name, scenario, config), "not given"))
            points.append((f"{config} ({name})", m50, s50, m99, s99))
        for (kind, scenario, pps), figures in sorted(by_scenario.items()):
            fab = sorted(figures, key=lambda c: figures[c][0])
            sim = sorted(figures, key=lambda c: figures[c][1])
            rank_rows.append([kind, scenario, f"{pps:,.0f}", name, " < ".join(fab), " < ".join(sim),
                              "yes" if fab == sim else "no"])
    return {"rows": rows, "rank_rows": rank_rows, "points": points, "errors": errors}


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _plot(points: Sequence[tuple[str, float, float, float, float]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 5.5))
    values = [v * 1e3 for p in points for v in p[1:]]
    lo, hi = (min(values) / 1.5, max(values) * 1.5) if values else (1.0, 10.0)
    grid = np.geomspace(lo, hi, 50)
    ax.fill_between(grid, grid * 0.9, grid * 1.1, color="0.85", label="within 10%")
    ax.plot(grid, grid, color="0.4", lw=0.8)
    # Colour by configuration, marker by model ("config (model)" labels).
    configs = sorted({label.split(" (")[0] for label, *_ in points})
    models = list(dict.fromkeys(label.split(" (", 1)[-1].rstrip(")") for label, *_ in points))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    markers = "osD^v<>ph*"
    for label, m50, s50, m99, s99 in points:
        config, model = label.split(" (")[0], label.split(" (", 1)[-1].rstrip(")")
        colour = colours[configs.index(config) % len(colours)]
        mk = markers[models.index(model) % len(markers)]
        ax.scatter([m50 * 1e3], [s50 * 1e3], marker=mk, color=colour, label=f"{label} p50")
        ax.scatter([m99 * 1e3], [s99 * 1e3], marker=mk, facecolors="none", edgecolors=colour)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("fabric iteration time (ms)")
    ax.set_ylabel("ns-3 iteration time (ms)")
    ax.set_title("ns-3 against the fabric (filled: p50, hollow: p99)")
    ax.legend(fontsize=6, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


def write(out: Path, command: str, fabric: Sequence[Path | tuple[Path, str]], models: Sequence[Model],
          notes: str = "", why: dict[tuple[str, str, str], str] | None = None) -> str:
    """Write validation.md, .csv and .png under ``out``; return the Markdown."""
    result = compare(fabric, models, why)
    header = HEADER + (["why not within 10%"] if why is not None else [])
    if not result["rows"]:
        raise SimulatorError(f"no scenario x configuration of {[str(f) for f in fabric]} was simulated in "
                             f"{[str(p) for _, p in models]}")
    out.mkdir(parents=True, exist_ok=True)
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(result["rows"])
    (out / "validation.csv").write_text(buf.getvalue())
    _plot(result["points"], out / "validation.png")
    summary = "; ".join(f"**{name}**: median absolute p50 error {statistics.median(e):.0%} over {len(e)} groups, "
                        f"{sum(1 for x in e if x <= 0.10)} within 10%" for name, e in result["errors"].items() if e)
    md = ("# ns-3 against the fabric's runs\n\n"
          f"Made by `{command}`. Fabric runs: "
          + ", ".join(f"`{f[0]}` ({f[1]})" if isinstance(f, tuple) and f[1] else f"`{f[0] if isinstance(f, tuple) else f}`"
                      for f in fabric) + "; ns-3 models: "
          + ", ".join(f"{m[0]} (`{m[1]}`" + (f", {', '.join(sorted(m[2]))}" if len(m) > 2 and m[2] else "")
                      + (f", as {m[3]}" if len(m) > 3 and m[3] else "") + ")"  # type: ignore[misc]
                      for m in models) + ".\n\n"
          f"{summary} (target 10%).\n\n" + (notes + "\n\n" if notes else "")
          + _table(header, result["rows"])
          + "\n**Ranking** of configurations by iteration p50 (fastest first):\n\n"
          + _table(["job", "scenario", "port (pkt/s)", "model", "fabric", "ns-3", "same"], result["rank_rows"])
          + "\n![](validation.png)\n")
    (out / "validation.md").write_text(md)
    return md


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m simulator.packet.validation", description=__doc__.splitlines()[0])
    p.add_argument("--fabric", action="append", required=True,
                   help="[TAG=]DIR: a fabric sweep folder (repeatable; a tag keeps its groups apart)")
    p.add_argument("--model", action="append", required=True,
                   help="NAME=DIR[::CONFIG,...][@TAG]: an ns-3 result folder, or only those configurations' runs "
                        "(repeatable; folders of one NAME are pooled; the tag of the fabric sweep it models)")
    p.add_argument("--notes", type=Path, default=None, help="a Markdown file put above the table")
    p.add_argument("--why", type=Path, default=None,
                   help="a CSV of model, scenario, configuration, why: a last column for the groups outside 10%%")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    models = [parse_model(item) for item in args.model]
    fabric = [parse_fabric(item) for item in args.fabric]
    command = "python -m simulator.packet.validation " + " ".join(argv if argv is not None else __import__("sys").argv[1:])
    notes = args.notes.read_text().strip() if args.notes else ""
    why = read_why(args.why) if args.why else None
    print(write(args.out, command, fabric, models, notes, why), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
