"""The reproduction runs behind ``gradfabric sim reproduce``: MG-WFBP on the GoogLeNet
traces, Prophet against P3 on a stepwise pattern, DLCP's tail model, and ResNet-50 at
4 to 2048 workers. Each writes Markdown, CSV and PNG files; :func:`reproduce` returns the
combined Markdown report."""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hosts.schedulers import AlphaBeta, create
from simulator.cluster import Network
from simulator.dlcp_model import TailModel
from simulator.engine import IterationTrace, simulate
from simulator.errors import SimulatorError
from simulator.fit import compare_with_measured, fit_alpha_beta, load_osu
from simulator.report import markdown_table, write_rows
from simulator.sweep import ClusterSpec, Row, sweep
from simulator.traces import load_trace, stepwise_trace

ALL_SCHEDULERS = ("wfbp", "synceasgd", "fusion", "mgwfbp", "p3", "prophet", "dlcp")
#: Published MG-WFBP figures (GoogLeNet, K80, 10GbE, Caffe).
PUBLISHED_MGWFBP = {"speedup_wfbp_8": 1.20, "speedup_sync_8": 1.36, "images_8": 1210.9, "efficiency_8": 0.927}
#: The MG-WFBP authors' 56Gb InfiniBand fit at 16 workers (s, s/byte).
IB56_ALPHA, IB56_BETA = 2.36e-4, 4.06e-10
SCALING_WORKERS = tuple(2**k for k in range(2, 12))
#: Credit windows (one partition each) and server aggregation delays of the Prophet sensitivity table.
STEPWISE_PARTITIONS = (4_000_000, 1_000_000, 250_000)
STEPWISE_AGGREGATION_S = (0.0, 0.001, 0.005)


@dataclass(frozen=True)
class Section:
    title: str
    markdown: str


def _write_csv(path: Path, header: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    path.write_text(out.getvalue())


def _pct(ours: float, published: float) -> str:
    return f"{(ours - published) / published:+.1%}"


def mgwfbp_googlenet(traces: Path, out: Path) -> Section:
    """MG-WFBP vs WFBP and SyncEASGD at 2, 4, 8 nodes, alpha-beta fitted from OSU."""
    fits_rows, rows_all = [], []
    figures: dict[tuple[int, str], Row] = {}
    sensitivity: dict[str, float] = {}
    for n in (2, 4, 8):
        trace = load_trace(traces / f"googlenet_k80_{n}nodes_caffe.csv")
        fit = fit_alpha_beta(load_osu(traces / f"osu_allreduce_{n}nodes_10gbe.csv"))
        numel = np.array([layer.numel for layer in trace.layers], dtype=float)
        measured = np.array(trace.measured_allreduce_s or (), dtype=float)
        cmp = compare_with_measured(fit.cost, numel, measured)
        trace_fit = np.polyfit(numel[measured > 0] * 4, measured[measured > 0], 1)
        fits_rows.append([n, f"{fit.cost.alpha * 1e6:.1f}", f"{fit.cost.beta * 1e9:.3f}", f"{fit.r_squared:.3f}",
                          f"{cmp['median_ratio']:.2f}", f"{cmp['measured_sum_s'] * 1e3:.1f}",
                          f"{cmp['predicted_sum_s'] * 1e3:.1f}", f"{trace_fit[1] * 1e6:.0f}", f"{trace_fit[0] * 1e9:.2f}"])
        cluster = ClusterSpec("ring", Network.from_ring_fit(fit.cost, n), overlap_forward=False, costs={n: fit.cost})
        rows = sweep(trace, cluster, [n], ALL_SCHEDULERS, baseline="wfbp")
        rows_all += rows
        figures.update({(n, r.scheduler): r for r in rows})
        if n == 8:
            alt = AlphaBeta(max(float(trace_fit[1]), 0.0), float(trace_fit[0]))
            alt_cluster = ClusterSpec("ring", Network.from_ring_fit(alt, n), overlap_forward=False, costs={n: alt})
            alt_rows = {r.scheduler: r for r in sweep(trace, alt_cluster, [n], ("wfbp", "synceasgd", "mgwfbp"), baseline="wfbp")}
            sensitivity = {
                "wfbp": alt_rows["mgwfbp"].speedup,
                "sync": alt_rows["synceasgd"].iteration_s / alt_rows["mgwfbp"].iteration_s,
                "eff": alt_rows["mgwfbp"].scaling_efficiency,
            }
    write_rows(rows_all, out, "mgwfbp_googlenet", "GoogLeNet, K80, 10GbE (OSU fit), no forward overlap", "wfbp")
    fit_header = ["nodes", "alpha (us)", "beta (ns/B)", "R^2", "median measured/predicted per blob",
                  "sum measured (ms)", "sum predicted (ms)", "alpha from trace (us)", "beta from trace (ns/B)"]
    _write_csv(out / "osu_fits.csv", fit_header, fits_rows)

    def sp(n: int) -> float:
        return figures[(n, "mgwfbp")].speedup

    m8 = figures[(8, "mgwfbp")]
    sync8 = figures[(8, "synceasgd")].iteration_s / m8.iteration_s
    table = [
        ["MG-WFBP / WFBP, 2 nodes", "about 1.0", f"{sp(2):.3f}", "", ""],
        ["MG-WFBP / WFBP, 4 nodes", "about 1.0", f"{sp(4):.3f}", "", ""],
        ["MG-WFBP / WFBP, 8 nodes", "1.20", f"{sp(8):.3f}", _pct(sp(8), 1.20), f"{sensitivity['wfbp']:.3f}"],
        ["MG-WFBP / SyncEASGD, 8 nodes", "1.36", f"{sync8:.3f}", _pct(sync8, 1.36), f"{sensitivity['sync']:.3f}"],
        ["MG-WFBP images/s, 8 nodes", "1210.9", f"{m8.throughput:.1f}", _pct(m8.throughput, 1210.9), ""],
        ["MG-WFBP scaling efficiency, 8 nodes", "92.7%", f"{m8.scaling_efficiency:.1%}",
         f"{(m8.scaling_efficiency - 0.927) * 100:+.1f} points", f"{sensitivity['eff']:.1%}"],
    ]
    _write_csv(out / "reproduction_mgwfbp.csv", ["figure", "published", "ours", "difference", "ours, trace fit"], table)
    md = (
        markdown_table(["figure", "published", "ours (OSU fit)", "difference", "ours, fit to the trace's allreduce_us"], table)
        + "\n**Alpha-beta fits** (least squares over every OSU message size, 4 B to 1 MiB):\n\n"
        + markdown_table(fit_header, [[str(c) for c in r] for r in fits_rows])
        + "\nAll schedulers: [mgwfbp_googlenet.md](mgwfbp_googlenet.md), "
        "[mgwfbp_googlenet.csv](mgwfbp_googlenet.csv), ![](mgwfbp_googlenet.png)\n"
    )
    return Section("MG-WFBP on GoogLeNet (K80, 10GbE)", md)


def _timeline_png(traces: dict[str, IterationTrace], arrivals: Sequence[float], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 1.2 + 0.7 * len(traces)))
    for y, (name, trace) in enumerate(traces.items()):
        spans = [(r.start * 1e3, (r.end - r.start) * 1e3) for r in trace.transfers]
        colors = [plt.cm.viridis(r.transfer.priority / 7) for r in trace.transfers]
        ax.broken_barh(spans, (y - 0.35, 0.7), facecolors=colors, edgecolors="white", linewidth=0.3)
        ax.plot([trace.first_layer_update * 1e3], [y], marker="v", color="red")
    for t in arrivals:
        ax.axvline(t * 1e3, color="grey", alpha=0.25, linewidth=0.6)
    ax.set_yticks(range(len(traces)), list(traces))
    ax.set_xlabel("ms after backward start (grey: gradient ready; red: layer 0 updated; colour: priority)")
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def prophet_stepwise(out: Path) -> Section:
    """Prophet against P3 (and WFBP) on a synthetic stepwise gradient pattern, PS, 3 Gbit/s."""
    trace = stepwise_trace(layer_numel=250_000)
    network = Network.from_gbps(3.0, 200.0)
    workers = 8
    cluster = ClusterSpec("ps", network)
    rows = sweep(trace, cluster, [workers], ("wfbp", "p3", "prophet"), baseline="p3")
    write_rows(rows, out, "prophet_stepwise", "Stepwise pattern, PS, 8 workers, 3 Gbit/s", "p3")
    cost = cluster.cost(workers)
    timelines = {}
    for name in ("p3", "prophet"):
        result = simulate(trace.layers, create(name, cost=cost), cluster.link(workers), overlap_forward=True)
        timelines[name] = result.steady
    arrivals = np.cumsum([layer.backward_s for layer in reversed(trace.layers)])
    _timeline_png(timelines, arrivals.tolist(), out / "prophet_timeline.png", "Link use in one iteration")
    by = {r.scheduler: r for r in rows}
    table = [
        [r.scheduler, f"{r.iteration_s * 1e3:.2f}", f"{r.speedup:.3f}x", f"{r.first_update_s * 1e3:.2f}",
         f"{r.link_idle_s * 1e3:.2f}", str(r.transfers)]
        for r in rows
    ]
    _write_csv(out / "reproduction_prophet.csv",
               ["scheduler", "iteration_ms", "speedup_vs_p3", "first_update_after_backward_ms", "link_idle_ms", "messages"],
               table)
    gain = by["prophet"].speedup
    sens_header = ["partition = credit window", "server aggregation (ms)", "p3 (ms)", "prophet (ms)",
                   "prophet speedup", "p3 link idle (ms)", "prophet link idle (ms)"]
    sens = []
    for aggregation_s in STEPWISE_AGGREGATION_S:
        agg_cluster = ClusterSpec("ps", network, aggregation_s=aggregation_s)
        for partition in STEPWISE_PARTITIONS:
            got = {r.scheduler: r for r in sweep(trace, agg_cluster, [workers], ("p3", "prophet"), baseline="p3",
                                                 options={s: {"partition_bytes": partition} for s in ("p3", "prophet")})}
            sens.append([f"{partition / 1e6:g} MB", f"{aggregation_s * 1e3:g}", f"{got['p3'].iteration_s * 1e3:.1f}",
                         f"{got['prophet'].iteration_s * 1e3:.1f}", f"{got['prophet'].speedup:.3f}x",
                         f"{got['p3'].link_idle_s * 1e3:.1f}", f"{got['prophet'].link_idle_s * 1e3:.1f}"])
    _write_csv(out / "prophet_sensitivity.csv", sens_header, sens)
    md = (
        f"Synthetic trace: 4 stages of 6 layers (250k float32 each, 24 MB in all); gradients of a stage "
        f"arrive 0.2 ms apart, stages 20 ms apart. PS with 8 servers co-located, 3 Gbit/s, 200 us per step; "
        f"each transfer is pushed, aggregated (no extra delay) and pulled, and a credit returns when the pull "
        f"completes. P3 and Prophet's fallback: 4 MB partitions, a one-partition credit.\n\n"
        + markdown_table(["scheduler", "iteration (ms)", "speedup vs p3", "layer 0 updated, ms after backward",
                          "link idle (ms)", "messages"], table)
        + f"\nPublished: Prophet up to 40% faster than P3/ByteScheduler. Ours: {gain - 1:+.1%}. "
        "Timeline (uplink; pulls not drawn): ![](prophet_timeline.png)\n\n"
        "**Sensitivity** to the partition size (the credit is one partition; a layer is 1 MB, so a 4 MB credit "
        "holds 4 layers in flight) and the servers' aggregation delay, same trace and network:\n\n"
        + markdown_table(sens_header, sens)
    )
    return Section("Prophet against P3 on a stepwise pattern", md)


def dlcp_tail(traces: Path, out: Path) -> Section:
    """DLCP (bounded loss + spraying) against P3 on a reliable, flow-hashed fabric."""
    trace = load_trace(traces / "resnet50_astrasim.csv")
    network = Network.from_gbps(25.0, 10.0)
    fabrics = [(f"{loss:.2%} loss, 4 paths", TailModel(loss_rate=loss, rto_s=0.005, packet_bytes=1024, paths=4, flows=4))
               for loss in (0.001, 0.0001, 0.0)]
    table, all_rows = [], []
    for arch in ("ps", "ring"):
        for label, tail in fabrics:
            cluster = ClusterSpec(arch, network, tail=tail)
            rows = sweep(trace, cluster, [8], ("p3", "dlcp"), baseline="p3")
            all_rows += rows
            spray_only = sweep(trace, cluster, [8], ("p3", "dlcp"), baseline="p3",
                               options={"dlcp": {"front_loss_bound": 0.0, "back_loss_bound": 0.0}})
            by = {r.scheduler: r for r in rows}
            table.append([arch, label, f"{by['p3'].iteration_s * 1e3:.1f}", f"{by['dlcp'].iteration_s * 1e3:.1f}",
                          f"{by['dlcp'].speedup:.3f}x", f"{spray_only[1].speedup:.3f}x"])
    write_rows(all_rows, out, "dlcp_tail", "ResNet-50, 8 workers, 25 Gbit/s, tail model", "p3")
    header = ["arch", "fabric", "p3 iteration (ms)", "dlcp iteration (ms)", "dlcp speedup", "spraying only (no loss bound)"]
    _write_csv(out / "reproduction_dlcp.csv", header, table)
    md = (
        "ResNet-50 (ASTRA-sim trace, 0.1 s compute per iteration), 8 workers, 25 Gbit/s, 10 us per step; "
        "4 equal-cost paths, one flow per path hashed at random; 1 KiB packets; a reliable transport waits a "
        "5 ms retransmission timeout after any loss.\n\n"
        + markdown_table(header, table)
        + "\nPublished (DLCP testbed, 10 V100): up to 84.3% over the best prior (P3/ByteScheduler on TCP) with PS, "
        "about 11% with ring all-reduce.\n"
    )
    return Section("DLCP: bounded loss and spraying", md)


def resnet_scaling(traces: Path, out: Path) -> tuple[Section, list[Row]]:
    """Every scheduler on ResNet-50 at 4..2048 workers, ring, 56Gb IB alpha-beta."""
    trace = load_trace(traces / "resnet50_astrasim.csv")
    network = Network.from_ring_fit(AlphaBeta(IB56_ALPHA, IB56_BETA), 16)
    rows = sweep(trace, ClusterSpec("ring", network), SCALING_WORKERS, ALL_SCHEDULERS, baseline="wfbp")
    write_rows(rows, out, "resnet50_scaling", "ResNet-50, ring all-reduce, 56Gb IB alpha-beta", "wfbp")
    picked = [r for r in rows if r.workers in (4, 16, 64, 256, 2048)]
    table = [[str(r.workers), r.scheduler, f"{r.iteration_s * 1e3:.1f}", f"{r.speedup:.3f}x", f"{r.scaling_efficiency:.1%}"]
             for r in picked]
    md = (
        "Ring all-reduce with the MG-WFBP authors' 56Gb InfiniBand fit at 16 workers (alpha 236 us, "
        "beta 0.406 ns/B) turned into 8.4 us per ring step and 4.9 GB/s per link; forward overlaps "
        "communication.\n\n"
        + markdown_table(["workers", "scheduler", "iteration (ms)", "speedup vs wfbp", "scaling eff."], table)
        + "\nEvery worker count: [resnet50_scaling.csv](resnet50_scaling.csv), ![](resnet50_scaling.png)\n"
    )
    return Section("ResNet-50 from 4 to 2048 workers", md), rows


def reproduce(traces: Path, out: Path, command: str) -> str:
    """Run every reproduction, write its files under ``out`` and return the report."""
    if not traces.is_dir():
        raise SimulatorError(f"trace folder {traces} does not exist")
    out.mkdir(parents=True, exist_ok=True)
    sections = [mgwfbp_googlenet(traces, out), prophet_stepwise(out), dlcp_tail(traces, out)]
    scaling, _ = resnet_scaling(traces, out)
    sections.append(scaling)
    body = "\n".join(f"## {s.title}\n\n{s.markdown}" for s in sections)
    report = (
        "# Simulation results\n\n"
        f"Made by `{command}`; the model and its assumptions are in simulator/README.md.\n\n" + body
    )
    (out / "README.md").write_text(report)
    return report
