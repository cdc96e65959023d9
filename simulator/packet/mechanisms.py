"""What the network and the hosts did, the fabric's runs beside ns-3's, per scenario and
configuration: the figures a "why not within 10%" is read from, none of them an iteration time.

Per group (scenario, configuration; a folder given as ``TAG=DIR`` names its scenario
"scenario (TAG)", as :mod:`simulator.packet.validation` does), the median over runs of:

* the request/response flow's completion time (its median per run), both sides;
* ECN marks and drops a run: the fabric's ``switch.ecn_marks``, ``switch.queue_drops`` (tail
  drops) and ``switch.magnitude_drops`` (early drops of eligible packets); ns-3's
  ``simulation.ports`` ``ecn_marks``, ``overflow_drops`` and ``early_drops``;
* the fabric's kernel TCP retransmissions a run (``switch.tcp_retransmitted``; ns-3 does not
  count its TCP's) and DLCP packets resent per rank (``totals.retransmitted``, both);
* ns-3's deepest port queue (the fabric's switches keep no maximum);
* the fabric's switches (traffic-carrying ones: at least 0.02 of a core): CPU share and the wait
  share of their busiest thread, of the wall; the ranks' CPU and wait share.

``python -m simulator.packet.mechanisms --fabric [TAG=]DIR ... --model DIR[@TAG] ...`` prints the table.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from simulator.errors import SimulatorError

#: A switch below this share of a core carried no traffic (host_cpu.SWITCH_IDLE_SHARE).
IDLE_SHARE = 0.02
Group = tuple[str, str]  # scenario (tagged), configuration


def _records(folder: Path) -> Iterable[dict[str, Any]]:
    for path in sorted(folder.rglob("runs/*.json")):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise SimulatorError(f"{path}: not a run record: {exc}") from None
        if record.get("status") == "ok":
            yield record


def _median(values: Iterable[float | None]) -> float:
    kept = [float(v) for v in values if v is not None]
    return statistics.median(kept) if kept else float("nan")


def run_figures(record: dict[str, Any]) -> dict[str, float]:
    """One run's figures (module doc); NaN where the run does not record one."""
    rr = [float(x) for flow in record.get("background") or [] if flow.get("protocol") == "rr"
          for x in flow.get("fct_s") or []]
    switch = record.get("switch") or {}
    ports = (record.get("simulation") or {}).get("ports")
    ranks = [r for job in (record.get("jobs") or {}).values() for r in (job.get("ranks") or {}).values()
             if r.get("role", "worker") == "worker"]
    cpu, wait = switch.get("switch_cpu") or {}, switch.get("switch_cpu_wait") or {}
    busy = [n for n, share in cpu.items() if share is not None and float(share) >= IDLE_SHARE]
    out = {"rr_ms": statistics.median(rr) * 1e3 if rr else float("nan"),
           "resent_per_rank": _median((r.get("totals") or {}).get("retransmitted") for r in ranks),
           "switch_cpu": _median(cpu[n] for n in busy), "switch_wait": _median(wait.get(n) for n in busy),
           "rank_cpu": _median(r.get("cpu_share") for r in ranks),
           "rank_wait": _median(r.get("cpu_wait_share") for r in ranks)}
    if ports is not None:  # ns-3
        out.update(marks=float(ports.get("ecn_marks", 0)), tail_drops=float(ports.get("overflow_drops", 0)),
                   early_drops=float(ports.get("early_drops", 0)), tcp_retx=float("nan"),
                   max_depth=float(ports.get("max_depth", 0)))
    else:
        out.update(marks=float(switch.get("ecn_marks") or 0), tail_drops=float(switch.get("queue_drops") or 0),
                   early_drops=float(switch.get("magnitude_drops") or 0),
                   tcp_retx=float(switch.get("tcp_retransmitted") or 0), max_depth=float("nan"))
    return out


def group_figures(folders: Sequence[tuple[Path, str]]) -> dict[Group, dict[str, float]]:
    """(tagged scenario, configuration) -> the median of each figure over its runs."""
    runs: dict[Group, list[dict[str, float]]] = defaultdict(list)
    for folder, tag in folders:
        for record in _records(folder):
            scenario = str(record.get("scenario"))
            runs[(f"{scenario} ({tag})" if tag else scenario, str(record.get("config")))].append(run_figures(record))
    return {g: {k: _median(r[k] if r[k] == r[k] else None for r in rs) for k in rs[0]} for g, rs in runs.items()}


def _f(x: float, digits: int = 0) -> str:
    return "-" if x != x else f"{x:,.{digits}f}"


HEADER = ["scenario", "configuration", "request/response fabric / ns-3 (ms)", "ECN marks fabric / ns-3",
          "tail drops fabric / ns-3", "early drops fabric / ns-3", "fabric TCP retransmissions",
          "DLCP resent per rank fabric / ns-3", "ns-3 deepest queue", "fabric switch CPU / wait",
          "fabric rank CPU / wait"]


def table(fabric: Sequence[tuple[Path, str]], models: Sequence[tuple[Path, str]]) -> str:
    """The Markdown table of every group both sides have (module doc)."""
    measured, simulated = group_figures(fabric), group_figures(models)
    groups = sorted(set(measured) & set(simulated))
    if not groups:
        raise SimulatorError("no scenario x configuration is in both the fabric's folders and the models'")
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "|".join("---" for _ in HEADER) + "|"]
    for g in groups:
        m, s = measured[g], simulated[g]
        lines.append("| " + " | ".join([
            g[0], g[1], f"{_f(m['rr_ms'], 2)} / {_f(s['rr_ms'], 2)}", f"{_f(m['marks'])} / {_f(s['marks'])}",
            f"{_f(m['tail_drops'])} / {_f(s['tail_drops'])}", f"{_f(m['early_drops'])} / {_f(s['early_drops'])}",
            _f(m["tcp_retx"]), f"{_f(m['resent_per_rank'])} / {_f(s['resent_per_rank'])}", _f(s["max_depth"]),
            f"{_f(m['switch_cpu'], 2)} / {_f(m['switch_wait'], 2)}",
            f"{_f(m['rank_cpu'], 2)} / {_f(m['rank_wait'], 2)}"]) + " |")
    return "\n".join(lines) + "\n"


def _tagged(item: str, sep: str) -> tuple[Path, str]:
    if sep == "=":
        tag, eq, folder = item.rpartition("=")
        return Path(folder), tag if eq else ""
    folder, _, tag = item.partition("@")
    return Path(folder), tag


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m simulator.packet.mechanisms", description=__doc__.splitlines()[0])
    p.add_argument("--fabric", action="append", required=True, help="[TAG=]DIR: a fabric sweep folder (repeatable)")
    p.add_argument("--model", action="append", required=True, help="DIR[@TAG]: an ns-3 result folder (repeatable)")
    args = p.parse_args(argv)
    print(table([_tagged(f, "=") for f in args.fabric], [_tagged(m, "@") for m in args.model]), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
