"""What goes with spraying and the layer queues in a trace sweep's runs: reordering, resends and
where the switches' queues dropped.

Per configuration of a trace sweep's folder (ok runs), the median over runs of: the p50
iteration; the DLCP ranks' packets shown missing that arrived without a resend (``reordered``),
resent packets, values zero-filled and the window's cuts standing, taken back and deferred to a
confirmation (both ranks; records that carry them); and the switches' queue drops by port kind
(a leaf's port to a host, a leaf's port to a spine, a spine's port) and queue (0: the long flows
and the request/response traffic, 5-7: the job). The ports come from the folder's
``topology.yaml``. With ``--timing DIR`` (``GRADFABRIC_TRACE_TIMING`` logs, gzipped or not), per log: the
window's cuts, cuts taken back, loss episodes whose cut waited for a confirmation, and the
median window.

``python -m experiments.trace_reorder FOLDER [--timing DIR]`` prints the tables.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import statistics
from pathlib import Path
from typing import Any

import yaml

from experiments.errors import ExperimentError
from experiments.trace_report import format_number, run_figures

#: Port kinds, in table order.
KINDS = ("host", "uplink", "spine")
#: The ranks' window cuts (run records since they carry them; empty before).
WINDOW = (("window_cuts", "cuts standing"), ("window_cuts_undone", "cuts taken back"),
          ("window_cuts_deferred", "cuts deferred"))


def port_kinds(topology: dict[str, Any]) -> dict[tuple[str, int], str]:
    """(switch, port) -> ``host`` (a leaf's port to a host), ``uplink`` (a leaf's port to a
    spine) or ``spine`` (a spine's port)."""
    roles = {s["name"]: s.get("role", "") for s in topology["switches"]}
    out: dict[tuple[str, int], str] = {}
    for link in topology["links"]:
        a, b = link["a"], link["b"]
        if a in roles and b not in roles:
            out[(a, int(link["a_port"]))] = "host"
        elif a in roles and b in roles:
            for sw, port, other in ((a, link["a_port"], b), (b, link["b_port"], a)):
                out[(sw, int(port))] = "spine" if roles[sw] == "spine" else "uplink"
    return out


def queue_drops(switch: dict[str, Any], kinds: dict[tuple[str, int], str]) -> dict[str, int]:
    """Queue drops by ``<kind> q0`` (queue 0) and ``<kind> q5-7`` (queues 5-7); device names
    carry a prefix before the topology's switch name (``gtl1`` for ``l1``)."""
    names = {name for name, _ in kinds}
    out = {f"{k} {q}": 0 for k in KINDS for q in ("q0", "q5-7")}
    for key, n in switch.get("queue_drops_by_queue", {}).items():
        device, port, queue = key.rsplit(":", 2)
        name = next((s for s in names if device.endswith(s)), None)
        kind = kinds.get((name, int(port))) if name is not None else None
        if kind is None:
            raise ExperimentError(f"queue drops at {key}: no such switch port in the topology")
        if int(queue) == 0:
            out[f"{kind} q0"] += n
        elif int(queue) >= 5:
            out[f"{kind} q5-7"] += n
    return out


def per_run(record: dict[str, Any], kinds: dict[tuple[str, int], str]) -> dict[str, float]:
    """One run's figures (see the module doc)."""
    ranks = [r for j in record["jobs"].values() for r in j["ranks"].values() if r.get("role") != "server"]
    total = {k: sum(r.get("totals", {}).get(k, 0) for r in ranks) for k in ("reordered", "retransmitted", "lost")}
    recorded = bool(ranks) and all(key in r.get("totals", {}) for key, _ in WINDOW for r in ranks)
    cuts = {name: float(sum(r["totals"][key] for r in ranks)) if recorded else math.nan for key, name in WINDOW}
    return {"p50 (ms)": 1e3 * run_figures(record)["p50_s"], "reordered": total["reordered"],
            "resent": total["retransmitted"], "zero-filled": total["lost"], **cuts,
            **queue_drops(record.get("switch", {}), kinds)}


def table(folder: Path) -> str:
    """Markdown: a row per configuration (first-seen order), the median over its ok runs."""
    topo = folder / "topology.yaml"
    if not topo.exists():
        raise ExperimentError(f"{folder}: no topology.yaml")
    kinds = port_kinds(yaml.safe_load(topo.read_text()))
    runs: dict[str, list[dict[str, float]]] = {}
    for path in sorted((folder / "runs").glob("*.json")):
        record = json.loads(path.read_text())
        if record.get("status") == "ok":
            runs.setdefault(record["config"], []).append(per_run(record, kinds))
    if not runs:
        raise ExperimentError(f"{folder}: no ok run recorded")
    cols = list(next(iter(runs.values()))[0])
    lines = ["| configuration (runs) | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
    for config, rows in runs.items():
        cells = [format_number(statistics.median(r[c] for r in rows)) for c in cols]
        lines.append(f"| {config} ({len(rows)}) | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def timing_table(folder: Path) -> str:
    """Markdown: per timing log, the window's cuts (net of those taken back), cuts taken back,
    deferred loss episodes (logs that record them) and the median window (packets)."""
    lines = ["| log | cuts standing | cuts taken back | cuts deferred to a confirmation | median cwnd |",
             "|---|---|---|---|---|"]
    for path in sorted([*folder.glob("*.jsonl"), *folder.glob("*.jsonl.gz")]):
        text = gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()
        window = [json.loads(t) for t in text.splitlines() if '"event": "window"' in t]
        if not window:
            continue
        last = window[-1]
        lines.append(f"| {path.name} | {last['cuts']} | {last['undone']} | {last.get('deferred', '')} | "
                     f"{statistics.median(s['cwnd'] for s in window):.1f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.trace_reorder", description=__doc__.split("\n")[0])
    parser.add_argument("folder", type=Path, help="a trace sweep's folder (runs/, topology.yaml)")
    parser.add_argument("--timing", type=Path, default=None, help="a folder of GRADFABRIC_TRACE_TIMING logs")
    args = parser.parse_args(argv)
    print(table(args.folder))
    if args.timing is not None:
        print()
        print(timing_table(args.timing))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
