"""What the TCP ring's sockets said at the end of each iteration (``tcp_info`` of a trace run's records).

Each TCP rank records, per iteration, every peer socket's ``TCP_INFO`` (cumulative counters and the
state at that moment). Per iteration after the first (as the report leaves the first out) this
module takes the differences of the cumulative counters (segments retransmitted, bytes
retransmitted against bytes sent, time busy) and the state at the iteration's end (congestion
window, slow-start threshold, RTO backoff, congestion state: 4 is Loss, entered on a
retransmission timeout), summed or taken at the extreme over a run's ranks and sockets. Per run
beside it: the iteration p50 and the hosts' retransmission timeouts counted by ``nstat`` (every
host, the background's flows included).

A snapshot shows a timeout only if the socket is still backing off when the iteration ends;
the run's ``nstat`` count says how many there were in all.

``python -m experiments.trace_tcpinfo FOLDER [--configs ddp-tcp,ddp-tcp-qos]`` prints a table per
configuration, one row per run in round order, and the rank correlations across runs and
iterations.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

from experiments.errors import ExperimentError
from experiments.trace_report import format_number, run_figures

LOSS_STATE = 4  # TCP_CA_Loss: after a retransmission timeout


def iteration_rows(record: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per iteration after the first: the ranks' sockets summed (counters) or at their
    extreme (state). :class:`ExperimentError` when a rank recorded no ``tcp_info``."""
    ranks = [r for r in record["jobs"][sorted(record["jobs"], key=int)[0]]["ranks"].values()
             if r.get("role") != "server"]
    if not ranks or any(not rec.get("tcp_info") for r in ranks for rec in r["records"]):
        raise ExperimentError(f"{record.get('run_id')}: a TCP rank recorded no tcp_info (code before 6e45087?)")
    count = min(len(r["records"]) for r in ranks)
    rows = []
    for i in range(1, count):
        now = [s for r in ranks for s in r["records"][i]["tcp_info"].values()]
        before = [s for r in ranks for s in r["records"][i - 1]["tcp_info"].values()]

        def delta(key: str) -> int:
            return sum(a[key] for a in now) - sum(b[key] for b in before)

        sent = delta("bytes_sent")
        rows.append({"iteration": i, "iteration_s": float(np.mean([r["records"][i]["iteration_s"] for r in ranks])),
                     "retrans": delta("total_retrans"), "retrans_share": delta("bytes_retrans") / sent if sent else 0.0,
                     "cwnd_min": min(s["snd_cwnd"] for s in now), "ssthresh_min": min(s["snd_ssthresh"] for s in now),
                     "backoff_max": max(s["backoff"] for s in now),
                     "loss_state": any(s["ca_state"] == LOSS_STATE for s in now)})
    return rows


def run_row(record: dict[str, Any]) -> dict[str, Any]:
    """A run's p50 beside its sockets' figures over the iterations after the first."""
    its = iteration_rows(record)
    return {"run_id": record["run_id"], "config": record["config"], "round": record["repetition"],
            "p50_s": run_figures(record)["p50_s"],
            "retrans_per_iteration": float(np.median([r["retrans"] for r in its])),
            "retrans_share": float(np.median([r["retrans_share"] for r in its])),
            "cwnd_median": float(np.median([r["cwnd_min"] for r in its])),
            "cwnd_min": min(r["cwnd_min"] for r in its),
            "backoff_iterations": sum(1 for r in its if r["backoff_max"] > 0 or r["loss_state"]),
            "iterations": len(its), "nstat_timeouts": record.get("switch", {}).get("tcp_timeouts")}


def _spearman(x: list[float], y: list[float]) -> str:
    from scipy.stats import spearmanr

    if len(x) < 3 or len(set(x)) < 2 or len(set(y)) < 2:
        return "n/a"
    rho, p = spearmanr(x, y)
    return f"{rho:+.2f} (p {p:.2f}, n {len(x)})"


def tcpinfo_report(folder: Path, configs: tuple[str, ...]) -> str:
    """Markdown: a table per configuration, one row per ok run in round order, and the rank
    correlations of p50 with the retransmitted share (across runs) and of an iteration's time
    with its retransmissions (across iterations)."""
    records = [json.loads(p.read_text()) for p in sorted((folder / "runs").glob("*.json"))]
    out: list[str] = []
    for config in configs:
        mine = sorted((r for r in records if r["config"] == config and r["status"] == "ok"),
                      key=lambda r: r["repetition"])
        if not mine:
            continue
        rows = [run_row(r) for r in mine]
        its = [it for r in mine for it in iteration_rows(r)]
        out += [f"### {config}", "",
                "| round | p50 (ms) | retrans. segments per iteration | bytes retransmitted / sent | "
                "cwnd at iteration end (median / min) | iterations ending in backoff or Loss | "
                "nstat RTOs (all hosts) |", "|---|---|---|---|---|---|---|"]
        out += [f"| {r['round']} | {format_number(r['p50_s'], 1e3)} | {format_number(r['retrans_per_iteration'])} | "
                f"{format_number(r['retrans_share'], 100, 1)}% | {format_number(r['cwnd_median'])} / "
                f"{r['cwnd_min']} | {r['backoff_iterations']} of {r['iterations']} | "
                f"{format_number(r['nstat_timeouts'])} |" for r in rows]
        out += ["", "Rank correlation (Spearman): run p50 with its retransmitted share "
                f"{_spearman([r['p50_s'] for r in rows], [r['retrans_share'] for r in rows])}; with its median cwnd "
                f"{_spearman([r['p50_s'] for r in rows], [r['cwnd_median'] for r in rows])}; with its nstat RTOs "
                f"{_spearman([r['p50_s'] for r in rows], [float(r['nstat_timeouts'] or 0) for r in rows])}; "
                "an iteration's time with its retransmitted segments "
                f"{_spearman([i['iteration_s'] for i in its], [float(i['retrans']) for i in its])}.", ""]
    if not out:
        raise ExperimentError(f"{folder}: no ok run of {', '.join(configs)}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.trace_tcpinfo", description=__doc__.split("\n")[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--configs", default="ddp-tcp,ddp-tcp-qos")
    args = parser.parse_args(argv)
    print(tcpinfo_report(args.folder, tuple(c for c in args.configs.split(",") if c)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
