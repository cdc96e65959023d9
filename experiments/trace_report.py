"""Figures, paired statistics, tables and plots of a trace-driven sweep's folder.

Per run (:func:`run_figures`), from the measured job's first worker (rank 0 of a ring, rank
1 under a parameter server): iteration times without the first (p50, p90, p99, max), job
completion time (all iterations), exposed communication (iteration time minus the emulated
compute), the time the forward pass waited for parameters, the communication-to-computation
ratio achieved (first send to last arrival over compute) beside the real job's target, the
share of gradient values zero-filled, and the switch, host and background figures.

CPU: the largest use of one core and the largest wait for a CPU (share of wall time, the
longest-waiting thread) over the run's processes; runs recorded before the wait share carry
only the earlier figure (waits summed over a rank's threads over their runnable time), shown
as such. A run marked ``cpu_bound`` or ``cpu_starved`` (:mod:`experiments.trace_sweep`) is
left out of the headline.

Per scenario and configuration: medians over the runs not marked; speed-up
against ``ddp-tcp`` from *paired* runs (same scenario and round, hence the same seed): the
ratio baseline/config of each pair's p50 (and p99), their median and a 95% bootstrap CI
(:func:`scipy.stats.bootstrap`, percentile, 2,000 resamples) over the pairs. Fewer than
three pairs give no CI. A scenario that ran both TCP variants (``ddp-tcp`` on the host's
default congestion control, ``ddp-tcp-cubic``) also gets each configuration's p50 speed-up
over the faster of the two in each round, and the congestion control the TCP sockets ran.
Every configuration also gets its paired p50 speed-up over the scenario's *strongest* kernel-TCP
baseline: of the configurations over kernel TCP, the one with the smallest median p50 (chosen
from the baselines' own runs only, so the choice does not depend on the configuration compared).
"""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path
from typing import Any

import numpy as np

BASELINE = "ddp-tcp"
#: The TCP baselines whose faster one, per round, is the second reference.
TCP_VARIANTS = ("ddp-tcp", "ddp-tcp-cubic")
MIN_PAIRS_FOR_CI = 3


def _worker_rank(job: dict[str, Any]) -> dict[str, Any]:
    ranks = job["ranks"]
    workers = [r for k, r in sorted(ranks.items(), key=lambda kv: int(kv[0])) if r.get("role") != "server"]
    return workers[0]


def run_figures(record: dict[str, Any]) -> dict[str, Any]:
    jobs = record["jobs"]
    job = jobs[sorted(jobs, key=int)[0]]
    recs = _worker_rank(job)["records"]
    times = np.array([r["iteration_s"] for r in recs[1:]]) if len(recs) > 1 else np.array([np.nan])
    compute = np.array([r["compute_s"] for r in recs[1:]]) if len(recs) > 1 else np.array([np.nan])
    spans = [(r["last_arrival_s"] - r["first_send_s"]) / r["compute_s"] for r in recs
             if r.get("first_send_s") is not None and r.get("last_arrival_s") is not None and r["compute_s"] > 0]
    early = [b["forward_first_s"] < a["last_arrival_s"] for a, b in zip(recs, recs[1:])
             if a.get("last_arrival_s") is not None and b.get("forward_first_s") is not None]
    ranks = [r for j in jobs.values() for r in j["ranks"].values() if r.get("role") != "server"]
    lost = sum(r["totals"].get("lost", 0) for r in ranks)
    reduced = sum(r["totals"].get("reduced", 0) for r in ranks)
    flows = record.get("background", [])
    goodput = [f["goodput_mbps"] for f in flows if f["protocol"] == "tcp" and f.get("goodput_mbps") is not None]
    fcts = [x for f in flows if f["protocol"] == "rr" for x in f.get("fct_s", [])]
    sw = record.get("switch", {})
    return {
        "p50_s": float(np.percentile(times, 50)), "p90_s": float(np.percentile(times, 90)),
        "p99_s": float(np.percentile(times, 99)), "max_s": float(np.max(times)),
        "jct_s": float(sum(r["iteration_s"] for r in recs)), "times": times.tolist(),
        "exposed_s": float(np.median(np.maximum(times - compute, 0.0))),
        "forward_wait_s": float(np.median([r["forward_wait_s"] for r in recs[1:]])) if len(recs) > 1 else 0.0,
        "ratio": float(np.median(spans)) if spans else float("nan"),
        # iterations whose first forward layer started before the previous one's last result arrived
        "overlap_share": float(np.mean(early)) if early else float("nan"),
        "loss_share": lost / reduced if reduced else 0.0, "lost_values": lost,
        "lost_by_tensor": _lost_by_tensor(ranks),
        "magnitude_drops": sw.get("magnitude_drops"), "ecn_marks": sw.get("ecn_marks"),
        "link_loss_drops": sw.get("link_loss_drops"), **_mechanism_counters(sw),
        "queue_drops": sw.get("queue_drops"), "host_qdisc_drops": sw.get("host_qdisc_drops"),
        "tcp_retransmitted": sw.get("tcp_retransmitted"), "tcp_timeouts": sw.get("tcp_timeouts"),
        "bg_goodput_mbps": sum(goodput) if goodput else None,
        "rr_fct_p50_ms": float(np.percentile(fcts, 50) * 1e3) if fcts else None,
        "rr_fct_p99_ms": float(np.percentile(fcts, 99) * 1e3) if fcts else None,
        "max_cpu_share": record.get("max_cpu_share"), "max_starvation": record.get("max_starvation"),
        "max_cpu_wait_share": record.get("max_cpu_wait_share"),
        "cpu_bound": record.get("cpu_bound", False) or record.get("cpu_starved", False),
        "tcp_congestion": sorted({n for r in ranks for n in r["totals"].get("tcp_congestion", {}).values()}),
    }


def _mechanism_counters(sw: dict[str, Any]) -> dict[str, Any]:
    """Sprayed packets, the (switch, group, member) cells that took them, and packets sent from the
    job's class queue (5) and the front layers' queues (6 and 7), every switch port; None for
    records made before the switches' record carried them."""
    tx = {int(k.rsplit("_", 1)[1]): n for k, n in sw.items() if k.startswith("tx_packets_priority_")}
    counted = "sprayed_packets" in sw
    return {"sprayed_packets": sw.get("sprayed_packets"), "sprayed_members": sw.get("sprayed_members"),
            "queue5_tx": tx.get(5, 0) if counted else None,
            "queues67_tx": tx.get(6, 0) + tx.get(7, 0) if counted else None}


def _lost_by_tensor(ranks: list[dict[str, Any]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in ranks:
        for rec in r["records"]:
            for t, n in rec.get("lost_by_tensor", {}).items():
                out[t] = out.get(t, 0) + n
    return out


def paired_ratio(base: list[float], other: list[float]) -> dict[str, Any]:
    """Median of the pairs' base/other ratios with its 95% bootstrap CI (None below 3 pairs)."""
    ratios = np.array([b / o for b, o in zip(base, other) if o and not math.isnan(b) and not math.isnan(o)])
    if ratios.size == 0:
        return {"median": None, "low": None, "high": None, "pairs": 0}
    low = high = None
    if ratios.size >= MIN_PAIRS_FOR_CI and np.ptp(ratios) > 0:
        from scipy.stats import bootstrap

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = bootstrap((ratios,), np.median, n_resamples=2000, confidence_level=0.95, method="percentile",
                            random_state=np.random.default_rng(0))
        low, high = float(res.confidence_interval.low), float(res.confidence_interval.high)
    return {"median": float(np.median(ratios)), "low": low, "high": high, "pairs": int(ratios.size)}


def summarize(records: list[dict[str, Any]], against: tuple[str, ...] = ()) -> dict[str, Any]:
    """Per scenario and configuration: medians and paired speed-ups (module docstring). ``against``:
    configurations that each row is also compared with (paired p50, ``speedup_p50_vs``), besides every
    kernel-TCP configuration of the scenario."""
    out: dict[str, Any] = {}
    ok = [r for r in records if r["status"] == "ok"]
    for scenario in dict.fromkeys(r["scenario"] for r in records):
        mine = [r for r in ok if r["scenario"] == scenario]
        figs = {r["run_id"]: run_figures(r) for r in mine}
        by_cfg: dict[str, dict[int, dict[str, Any]]] = {}
        for r in mine:
            by_cfg.setdefault(r["config"], {})[r["repetition"]] = figs[r["run_id"]]
        rows: dict[str, Any] = {}
        base = by_cfg.get(BASELINE, {})
        clean = any(not v["cpu_bound"] for reps in by_cfg.values() for v in reps.values())
        # headline: runs neither CPU-bound nor starved; when none is left, all runs (marked)
        usable = {cfg: {k: v for k, v in reps.items() if not v["cpu_bound"] or not clean}
                  for cfg, reps in by_cfg.items()}
        for cfg, reps in by_cfg.items():
            good = usable[cfg]
            med = {key: (float(np.median([v[key] for v in good.values() if v[key] is not None]))
                         if any(v[key] is not None for v in good.values()) else None)
                   for key in ("p50_s", "p90_s", "p99_s", "max_s", "jct_s", "exposed_s", "forward_wait_s", "ratio",
                               "overlap_share",
                               "loss_share", "magnitude_drops", "ecn_marks", "link_loss_drops", "queue_drops",
                               "sprayed_packets", "sprayed_members", "queue5_tx", "queues67_tx",
                               "host_qdisc_drops",
                               "tcp_retransmitted", "tcp_timeouts", "bg_goodput_mbps", "rr_fct_p50_ms",
                               "rr_fct_p99_ms", "max_cpu_share", "max_starvation", "max_cpu_wait_share")}
            pairs = sorted(set(good) & set(usable.get(BASELINE, {})))
            rows[cfg] = {"runs": len(reps), "cpu_bound": sum(v["cpu_bound"] for v in reps.values()),
                         "all_runs_marked": not clean, **med,
                         "speedup_p50": paired_ratio([base[k]["p50_s"] for k in pairs], [good[k]["p50_s"] for k in pairs]),
                         "speedup_p99": paired_ratio([base[k]["p99_s"] for k in pairs], [good[k]["p99_s"] for k in pairs])}
        _against_faster_tcp(rows, by_cfg, usable)
        _against_strongest_tcp(rows, usable)
        _against_each(rows, usable, against)
        out[scenario] = rows
    return out


def _against_faster_tcp(rows: dict[str, Any], by_cfg: dict[str, dict[int, dict[str, Any]]],
                        usable: dict[str, dict[int, dict[str, Any]]]) -> None:
    """Each row's TCP congestion control, and, with both TCP variants, its p50 speed-up over the
    faster of them in each round (the pairs where all three runs are in the headline, ``usable``)."""
    for cfg, reps in by_cfg.items():
        rows[cfg]["tcp_congestion"] = sorted({n for v in reps.values() for n in v.get("tcp_congestion", [])})
    if not all(c in usable for c in TCP_VARIANTS):
        return
    fast = {k: min(usable[c][k]["p50_s"] for c in TCP_VARIANTS)
            for k in set.intersection(*(set(usable[c]) for c in TCP_VARIANTS))}
    for cfg, good in usable.items():
        pairs = sorted(set(good) & set(fast))
        rows[cfg]["speedup_p50_faster_tcp"] = paired_ratio([fast[k] for k in pairs], [good[k]["p50_s"] for k in pairs])


def strongest_tcp_baseline(rows: dict[str, Any]) -> str | None:
    """The configuration over kernel TCP with the smallest median p50 among ``rows`` (None if none ran)."""
    from experiments.trace_configs import TRACE_CONFIGS

    tcp = {c.name for c in TRACE_CONFIGS if c.comm == "tcp"}
    medians = {cfg: r["p50_s"] for cfg, r in rows.items() if cfg in tcp and r.get("p50_s") is not None}
    return min(medians, key=lambda cfg: (medians[cfg], cfg)) if medians else None


def _against_strongest_tcp(rows: dict[str, Any], usable: dict[str, dict[int, dict[str, Any]]]) -> None:
    """Each row's paired p50 speed-up over the strongest kernel-TCP baseline of its scenario, on the
    runs in the headline (``usable``)."""
    strongest = strongest_tcp_baseline(rows)
    if strongest is None:
        return
    base = usable[strongest]
    for cfg, good in usable.items():
        pairs = sorted(set(good) & set(base))
        rows[cfg]["strongest_tcp"] = strongest
        rows[cfg]["speedup_p50_strongest_tcp"] = paired_ratio([base[k]["p50_s"] for k in pairs],
                                                              [good[k]["p50_s"] for k in pairs])


def _against_each(rows: dict[str, Any], usable: dict[str, dict[int, dict[str, Any]]], against: tuple[str, ...]) -> None:
    """Each row's paired p50 speed-up over every kernel-TCP configuration of the scenario other than
    the baseline, and over each configuration named in ``against`` that ran (``speedup_p50_vs``)."""
    from experiments.trace_configs import TRACE_CONFIGS

    tcp = [c.name for c in TRACE_CONFIGS if c.comm == "tcp" and c.name != BASELINE]
    names = [n for n in dict.fromkeys([*tcp, *against]) if n in usable]
    for cfg, good in usable.items():
        rows[cfg]["speedup_p50_vs"] = {}
        for name in names:
            pairs = sorted(set(good) & set(usable[name]))
            rows[cfg]["speedup_p50_vs"][name] = paired_ratio([usable[name][k]["p50_s"] for k in pairs],
                                                             [good[k]["p50_s"] for k in pairs])


def mechanism_cell(row: dict[str, Any]) -> str:
    """What DLCP's switch mechanisms did in a row's runs (medians): magnitude drops / ECN marks /
    sprayed packets (ECMP members) / packets sent from queues 6-7; the last two only where recorded."""
    cell = f"{format_number(row.get('magnitude_drops'))} / {format_number(row.get('ecn_marks'))}"
    if row.get("sprayed_packets") is None:
        return cell
    return (f"{cell} / {format_number(row['sprayed_packets'])} ({format_number(row.get('sprayed_members'))}) / "
            f"{format_number(row.get('queues67_tx'))}")


def format_number(x: Any, scale: float = 1.0, digits: int = 0) -> str:
    """A table cell: ``x * scale`` with thousands separators and ``digits`` decimals; empty for None or NaN."""
    return "" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x * scale:,.{digits}f}"


def error_line(error: str, limit: int) -> str:
    """A failed run's error on one line: its first line and, when it goes on (a rank's log), its last."""
    lines = [line.strip() for line in error.strip().splitlines() if line.strip()]
    text = lines[0] if len(lines) < 2 else f"{lines[0]} ... {lines[-1]}"
    return text[:limit]


def _wait(row: dict[str, Any]) -> str:
    """The CPU wait cell: the wait share, or the earlier summed figure marked as such."""
    if row.get("max_cpu_wait_share") is not None:
        return format_number(row["max_cpu_wait_share"], 1, 2)
    return f"{format_number(row['max_starvation'], 1, 2)} (summed)" if row.get("max_starvation") is not None else ""


def format_ratio(s: dict[str, Any] | None, pairs: bool = True) -> str:
    """A paired ratio cell (:func:`paired_ratio`'s dict): ``1.23x [1.10, 1.40]``, ``(no CI)`` when it has
    none, then ``n=pairs`` unless ``pairs`` is false; empty when there is no ratio."""
    if not s or s.get("median") is None:
        return ""
    ci = f" [{s['low']:.2f}, {s['high']:.2f}]" if s.get("low") is not None else " (no CI)"
    return f"{s['median']:.2f}x{ci}" + (f" n={s['pairs']}" if pairs else "")


def write_trace_report(out: Path) -> dict[str, Any]:
    meta = json.loads((out / "plan.json").read_text())
    records = [json.loads(p.read_text()) for p in sorted((out / "runs").glob("*.json"))]
    summary = summarize(records)
    (out / "results.json").write_text(json.dumps({"meta": {k: v for k, v in meta.items() if k != "runs"},
                                                  "summary": summary}, indent=1) + "\n")
    failed = [r for r in records if r["status"] != "ok"]
    reps = meta["repetitions"]
    lines = [f"# Trace-driven sweep ({meta['job']['model']} {meta['job']['precision']}, "
             f"{meta['job']['iterations']} iterations per run)", "",
             f"Command: `{meta['command']}`", "",
             *[f"Extended from {e['from']} to {e['to']} rounds at {e['at']}: `gradfabric experiment trace "
               f"--resume DIR --repetitions {e['to']}`, the added rounds in the same interleaved order." for e in
               meta.get("extended", [])],
             *([""] if meta.get("extended") else []),
             f"Scaling: b = {meta['scale']['b']:.2f}, k = {meta['scale']['k']:g} (real {meta['scale']['real_gbps']:g} "
             f"Gbit/s over an emulated {meta['scale']['emulated_mbps']:.0f} Mbit/s port: ratio "
             f"{meta['scale']['capacity_ratio']:.1f}). Load (1 min) at start {meta.get('load_at_start')}, at end "
             f"{meta.get('load_at_end')}; {len(records)} of {len(meta['runs'])} runs recorded, {len(failed)} failed.", ""]
    stopped = meta.get("stopped")
    if stopped:
        reps = stopped["rounds_completed"]
        rule = "; ".join(f"{k.replace('_', ' ')} {stopped[k]}" for k in ("no_round_after", "runs_end_by") if k in stopped)
        lines += [f"**Stopped by the stopping rule** ({rule}) at "
                  f"{stopped['at']}: {reps} of {meta['repetitions']} planned rounds completed; the figures are "
                  f"those {reps} pairs.", ""]
    if reps < 10:
        lines += [f"**{reps} pairs per configuration: a quick subset, below the 10 pairs the statistics need; "
                  "CIs are wide or absent and no claim rests on them.**", ""]
    for scenario, rows in summary.items():
        lines += [f"## {scenario}", "",
                  "| configuration | runs (CPU-bound) | p50 / p99 / max (ms) | exposed comm (ms) | forward wait (ms) | "
                  "front starts early | comm/compute | speed-up p50 vs ddp-tcp | speed-up p99 | values zero-filled | mag. drops / ECN / lossy link | "
                  "queue drops | host qdisc drops | TCP retrans / RTOs | bg goodput (Mbit/s) | RR FCT p99 (ms) | "
                  "max CPU / CPU wait |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for cfg, r in rows.items():
            lines.append(
                f"| {cfg} | {r['runs']} ({r['cpu_bound']}) | {format_number(r['p50_s'], 1e3)} / {format_number(r['p99_s'], 1e3)} / "
                f"{format_number(r['max_s'], 1e3)} | {format_number(r['exposed_s'], 1e3)} | {format_number(r['forward_wait_s'], 1e3)} | "
                f"{format_number(r['overlap_share'], 100)}% | "
                f"{format_number(r['ratio'], 1, 2)} | {format_ratio(r['speedup_p50'])} | {format_ratio(r['speedup_p99'])} | "
                f"{format_number(r['loss_share'], 100, 3)}% | {format_number(r['magnitude_drops'])} / {format_number(r['ecn_marks'])} / {format_number(r['link_loss_drops'])} | "
                f"{format_number(r['queue_drops'])} | {format_number(r['host_qdisc_drops'])} | {format_number(r['tcp_retransmitted'])} / "
                f"{format_number(r['tcp_timeouts'])} | {format_number(r['bg_goodput_mbps'], 1, 1)} | {format_number(r['rr_fct_p99_ms'], 1, 1)} | "
                f"{format_number(r['max_cpu_share'], 1, 2)} / {_wait(r)} |")
        if any(r.get("speedup_p50_faster_tcp") for r in rows.values()):
            lines += ["", "Against the faster TCP baseline of each round (the smaller p50 of "
                      f"{' and '.join(TCP_VARIANTS)}), paired:", "",
                      "| configuration | TCP congestion control (read from the sockets) | speed-up p50 vs ddp-tcp | "
                      "speed-up p50 vs the faster TCP |", "|---|---|---|---|"]
            lines += [f"| {cfg} | {', '.join(r['tcp_congestion']) or '(no TCP)'} | {format_ratio(r['speedup_p50'])} | "
                      f"{format_ratio(r.get('speedup_p50_faster_tcp'))} |" for cfg, r in rows.items()]
        strongest = next((r["strongest_tcp"] for r in rows.values() if r.get("strongest_tcp")), None)
        if strongest:
            lines += ["", f"Against the strongest TCP baseline, {strongest} (the configuration over kernel TCP with "
                      "the smallest median p50), paired:", "",
                      f"| configuration | speed-up p50 vs {strongest} |", "|---|---|"]
            lines += [f"| {cfg} | {format_ratio(r.get('speedup_p50_strongest_tcp'))} |"
                      for cfg, r in rows.items() if cfg != strongest]
        others = list(next(iter(rows.values()), {}).get("speedup_p50_vs", {}))
        if others:
            lines += ["", "Each configuration against each TCP baseline (paired p50), beside what the mechanisms did "
                      "(medians per run; sprayed packets over how many ECMP members; packets the switches sent from "
                      "the job's class queue 5 and the layer queues 6-7):", "",
                      f"| configuration | speed-up p50 vs {BASELINE} | "
                      + " | ".join(f"speed-up p50 vs {n}" for n in others)
                      + " | values zero-filled | mag. drops / ECN / sprayed (members) / queues 6-7 sent | "
                      "queue 5 sent |", "|---|---|" + "---|" * len(others) + "---|---|---|"]
            lines += [f"| {cfg} | {format_ratio(r['speedup_p50'])} | "
                      + " | ".join(format_ratio(r["speedup_p50_vs"].get(n)) for n in others)
                      + f" | {format_number(r['loss_share'], 100, 3)}% | {mechanism_cell(r)} | "
                      f"{format_number(r.get('queue5_tx'))} |" for cfg, r in rows.items()]
        if any(r.get("max_cpu_wait_share") is None and r.get("max_starvation") is not None for r in rows.values()):
            lines.append("\n(summed): runs recorded before the wait share; the figure is a rank's waits summed over "
                         "its threads over their runnable time, which its own threads inflate.")
        if any(r.get("all_runs_marked") for r in rows.values()):
            lines.append("\n**Every run of this scenario was CPU-bound or CPU-starved: the figures above are from "
                         "marked runs and are not a headline.**")
        lines.append("")
    lossy = sorted({r["scenario"] for r in records if r["status"] == "ok" and run_figures(r)["lost_values"] > 0})
    if lossy:
        lines += ["## Accuracy", "", f"Runs zero-filled gradient values in {', '.join(lossy)}: replay each scenario's "
                  f"lossiest run into training with `gradfabric experiment accuracy --trace {out} --conditions none` "
                  "(experiments/README.md, the accuracy experiment).", ""]
    if failed:
        lines += ["## Failed runs", ""] + [f"* {r['run_id']}: {error_line(r['error'], 400)}" for r in failed] + [""]
    (out / "results.md").write_text("\n".join(lines))
    _plots(out, records, summary)
    return summary


def _plots(out: Path, records: list[dict[str, Any]], summary: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    for scenario, rows in summary.items():
        fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
        for cfg in rows:
            t = sorted(x * 1e3 for r in records if r["status"] == "ok" and r["scenario"] == scenario
                       and r["config"] == cfg for x in run_figures(r)["times"])
            if t:
                a.step(t, np.arange(1, len(t) + 1) / len(t), where="post", label=cfg)
        a.set_xlabel("iteration time (ms)")
        a.set_ylabel("CDF")
        if a.lines:  # no legend when every run of the scenario failed
            a.legend(fontsize=8)
        names = [c for c in rows if rows[c]["speedup_p50"]["median"] is not None]
        meds = [rows[c]["speedup_p50"]["median"] for c in names]
        errs = [[m - (rows[c]["speedup_p50"]["low"] or m) for c, m in zip(names, meds)],
                [(rows[c]["speedup_p50"]["high"] or m) - m for c, m in zip(names, meds)]]
        b.bar(names, meds, yerr=errs, capsize=4)
        b.axhline(1.0, color="gray", lw=0.8)
        b.set_ylabel("p50 speed-up vs ddp-tcp (paired)")
        b.tick_params(axis="x", rotation=30)
        fig.suptitle(scenario)
        fig.tight_layout()
        fig.savefig(out / f"trace_{scenario}.png", dpi=90)
        plt.close(fig)
