"""Per-run checks of the congestion-control folders (portrate5k-tcpcc-*-20261127): what each TCP
socket ran, retransmissions and RTOs, tail drops per switch queue (named by the link they feed),
the job's communication span and goodput against the port rate, CPU; then per scenario and
configuration the medians, and the per-round ratio of the two TCP variants.

    python experiments/results/training/portrate5k-tcpcc-summary-20261127/analysis.py
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

HERE = Path(__file__).resolve().parent
FOLDERS = sorted(p for p in HERE.parent.glob("portrate5k-tcpcc-*-20261127") if p != HERE)
#: leafspine8_training.yaml: leaf ports 1-4 hosts, 5 to s1, 6 to s2; spine port 1 to l1, 2 to l2
LEAF = {"l1": {1: "h1", 2: "h2", 3: "h3", 4: "h4", 5: "s1", 6: "s2"},
        "l2": {1: "h5", 2: "h6", 3: "h7", 4: "h8", 5: "s1", 6: "s2"}}
SPINE = {1: "l1", 2: "l2"}


def link_of(queue: str) -> str:
    """``gtl1:5:0`` -> ``l1->s1 p0``."""
    switch, port, prio = queue.split(":")
    name = switch[-2:]
    to = LEAF[name].get(int(port), "?") if name in LEAF else SPINE.get(int(port), "?")
    return f"{name}->{to} p{prio}"


def run_line(r: dict) -> dict:
    job = r["jobs"][sorted(r["jobs"], key=int)[0]]
    ranks = [v for _, v in sorted(job["ranks"].items())]
    recs = ranks[0]["records"]
    times = sorted(x["iteration_s"] for x in recs[1:])
    spans = [x["last_arrival_s"] - x["first_send_s"] for x in recs[1:]
             if x.get("last_arrival_s") is not None and x.get("first_send_s") is not None]
    exposed = [max(0.0, x["iteration_s"] - x["compute_s"]) for x in recs[1:]]
    sent = ranks[0]["totals"].get("bytes", 0) / len(recs)
    port_bps = 5000 * 1448  # full TCP segments' payload at the port rate
    sw = r["switch"]
    drops: dict[str, int] = {}
    for q, n in sw.get("queue_drops_by_queue", {}).items():
        drops[link_of(q)] = drops.get(link_of(q), 0) + n
    cc = sorted({c for rk in ranks for c in rk["totals"].get("tcp_congestion", {}).values()})
    return {"run": r["run_id"], "config": r["config"], "round": r["repetition"],
            "p50_ms": 1e3 * statistics.median(times), "exposed_ms": 1e3 * statistics.median(exposed),
            "span_ms": 1e3 * statistics.median(spans) if spans else float("nan"),
            "goodput_share": sent / statistics.median(spans) / port_bps if spans else float("nan"),
            "cc": ",".join(cc) or "-", "hosts_default": ",".join(sorted(set(r.get("tcp_default_congestion", {}).values()))),
            "retrans": sw.get("tcp_retransmitted"), "rtos": sw.get("tcp_timeouts"), "queue_drops": sw.get("queue_drops"),
            "drops_by_link": dict(sorted(drops.items(), key=lambda kv: -kv[1])),
            "host_qdisc": sw.get("host_qdisc_drops"), "max_cpu": r.get("max_cpu_share"),
            "load": r.get("load_before", [None])[0]}


def main() -> int:
    for folder in FOLDERS:
        runs = [json.loads(p.read_text()) for p in sorted((folder / "runs").glob("*.json"))]
        ok = [run_line(r) for r in runs if r["status"] == "ok"]
        print(f"## {folder.name}: {len(ok)} of {len(runs)} runs ok")
        print("run | config | cc (sockets) | hosts' default | p50 ms | exposed ms | comm span ms | goodput/port | "
              "retrans / RTOs | queue drops | drops by queue | host qdisc | max CPU | load")
        for x in ok:
            top = ", ".join(f"{k} {v}" for k, v in list(x["drops_by_link"].items())[:3])
            print(f"{x['run']} | {x['config']} | {x['cc']} | {x['hosts_default']} | {x['p50_ms']:.0f} | "
                  f"{x['exposed_ms']:.0f} | {x['span_ms']:.0f} | {x['goodput_share']:.2f} | {x['retrans']} / "
                  f"{x['rtos']} | {x['queue_drops']} | {top} | {x['host_qdisc']} | {x['max_cpu']:.2f} | {x['load']}")
        print("\nmedians per configuration:")
        for cfg in dict.fromkeys(x["config"] for x in ok):
            mine = [x for x in ok if x["config"] == cfg]
            med = {k: statistics.median(x[k] for x in mine) for k in
                   ("p50_ms", "exposed_ms", "span_ms", "goodput_share", "retrans", "rtos", "queue_drops", "max_cpu")}
            print(f"  {cfg}: n={len(mine)} " + ", ".join(f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}"
                                                      for k, v in med.items()))
        by = {(x["config"], x["round"]): x for x in ok}
        rounds = sorted({x["round"] for x in ok})
        ratios = [by[("ddp-tcp", k)]["p50_ms"] / by[("ddp-tcp-cubic", k)]["p50_ms"] for k in rounds
                  if ("ddp-tcp", k) in by and ("ddp-tcp-cubic", k) in by]
        print("  BBR p50 / CUBIC p50 per round: " + ", ".join(f"{v:.3f}" for v in ratios) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
