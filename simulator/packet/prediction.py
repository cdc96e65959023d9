"""A prediction table from ns-3's runs, and later the same table against the fabric's.

Per model (a name and its ns-3 result folders), scenario, port rate and configuration: the
iteration p50 and p99 with every rank's iterations pooled, iteration 0 left out (as
:mod:`simulator.packet.validation` counts them), and the speed-up against a baseline
configuration of the same model, scenario and port rate (baseline p50 over the
configuration's; p99 likewise). With fabric sweeps (``--fabric``): the fabric's figures
read the same way beside each prediction, the error of each p50 and of each speed-up.

``python -m simulator.packet.prediction --model NAME=DIR ... [--fabric DIR ...] [--baseline ddp-tcp]``
prints the Markdown table. A folder given as ``DIR::CONFIG+CONFIG`` gives only those
configurations' runs; ``DIR::CONFIG:NAME`` gives CONFIG's runs as configuration NAME (ns-3's
ddp-tcp under CUBIC as the fabric's ddp-tcp-cubic), so one model can hold runs made with
different settings.
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from simulator.errors import SimulatorError
from simulator.fabric_runs import Run, load_runs

Key = tuple[str, float, str]  # scenario, port pps, configuration


def pooled(runs: Sequence[Run]) -> dict[Key, tuple[float, float, int]]:
    """(scenario, port, configuration) -> (p50, p99) seconds of every rank's iterations pooled, runs."""
    grouped: dict[Key, list[Run]] = defaultdict(list)
    for run in runs:
        grouped[(run.scenario, run.port_pps, run.config)].append(run)
    out = {}
    for key, group in grouped.items():
        times = [t for r in group for t in r.iterations]
        out[key] = (float(np.percentile(times, 50)), float(np.percentile(times, 99)), len(group))
    return out


def speedups(figures: dict[Key, tuple[float, float, int]], baseline: str) -> dict[Key, tuple[float, float]]:
    """(p50, p99) speed-up of each configuration against ``baseline`` in its scenario and port rate."""
    out = {}
    for (scenario, pps, config), (p50, p99, _) in figures.items():
        base = figures.get((scenario, pps, baseline))
        if base is not None:
            out[(scenario, pps, config)] = (base[0] / p50, base[1] / p99)
    return out


def _ms(x: float) -> str:
    return f"{x * 1e3:,.1f}"


def folder_runs(spec: str | Path) -> list[Run]:
    """The runs of ``DIR``, ``DIR::CONFIG+...`` or ``DIR::CONFIG:NAME`` (module doc)."""
    folder, _, only = str(spec).partition("::")
    runs = load_runs(Path(folder))
    if not only:
        return runs
    config, colon, name = only.partition(":")
    if colon:
        if not name or "+" in config:
            raise SimulatorError(f"{spec!r}: expected DIR::CONFIG:NAME (one configuration, renamed)")
        return [replace(r, config=name) for r in runs if r.config == config]
    wanted = {c for c in only.split("+") if c}
    return [r for r in runs if r.config in wanted]


def table(models: Sequence[tuple[str, Sequence[Path | str]]], fabric: Sequence[Path] = (),
          baseline: str = "ddp-tcp") -> str:
    """The Markdown table (module doc)."""
    measured = pooled([r for f in fabric for r in load_runs(f)]) if fabric else {}
    measured_up = speedups(measured, baseline)
    head = ["scenario", "port (pkt/s)", "configuration", "model", "runs", "p50 (ms)", "p99 (ms)",
            f"speed-up p50 / p99 vs {baseline}"]
    if fabric:
        head += ["fabric runs", "fabric p50 (ms)", "fabric p99 (ms)", "fabric speed-up p50 / p99", "p50 error",
                 "p99 error", "speed-up p50 error"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    found = False
    for name, folders in models:
        figures = pooled([r for f in folders for r in folder_runs(f)])
        ups = speedups(figures, baseline)
        for key in sorted(figures, key=lambda k: (k[0], k[1], k[2] != baseline, k[2])):
            if fabric and key not in measured:
                continue
            found = True
            p50, p99, n = figures[key]
            up = ups.get(key)
            row = [key[0], f"{key[1]:,.0f}", key[2], name, str(n), _ms(p50), _ms(p99),
                   "-" if up is None else f"{up[0]:.2f}x / {up[1]:.2f}x"]
            if fabric:
                m50, m99, mn = measured[key]
                mup = measured_up.get(key)
                row += [str(mn), _ms(m50), _ms(m99), "-" if mup is None else f"{mup[0]:.2f}x / {mup[1]:.2f}x",
                        f"{p50 / m50 - 1:+.0%}", f"{p99 / m99 - 1:+.0%}",
                        "-" if up is None or mup is None else f"{up[0] / mup[0] - 1:+.0%}"]
            lines.append("| " + " | ".join(row) + " |")
    if not found:
        raise SimulatorError("no scenario x port x configuration of the models"
                             + (" was run on the fabric" if fabric else " has runs"))
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m simulator.packet.prediction", description=__doc__.splitlines()[0])
    p.add_argument("--model", action="append", required=True,
                   help="NAME=DIR[,DIR...]: ns-3 result folders (runs/*.json under them), pooled (repeatable); "
                        "DIR::CONFIG+... only those configurations, DIR::CONFIG:NAME one of them renamed")
    p.add_argument("--fabric", type=Path, action="append", default=[], help="a fabric sweep folder (repeatable)")
    p.add_argument("--baseline", default="ddp-tcp", help="the configuration speed-ups are against")
    args = p.parse_args(argv)
    models = []
    for item in args.model:
        name, sep, rest = item.partition("=")
        if not sep or not name or not rest:
            raise SimulatorError(f"--model {item!r}: expected NAME=DIR[,DIR...]")
        models.append((name, [x for x in rest.split(",") if x]))
    print(table(models, args.fabric, args.baseline), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
