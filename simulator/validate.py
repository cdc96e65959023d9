"""`gradfabric sim validate RESULTS_DIR`: the simulator against the training experiment's raw
runs (``runs/*.json`` of ``gradfabric experiment training``).

For every scenario x configuration x port rate found, the measured iteration times of all
ranks (iteration 0 left out: it sets up) are pooled into p50 and p99; the simulator
predicts them from the scenario alone:

* **The job**: a trace-driven run names its model, precision and scaling (``b``, ``k``); the
  H100 trace is read and scaled (sizes / b, times x k). A run of the CNN job takes the
  job trace given (``--job-trace``, made by ``sim profile``). Iterations that record their
  compute (``compute_s``) replace the trace's compute by the measured one (a replay).
* **The fabric** (:mod:`simulator.fabric_model`): the port rate and queue depth of the run
  (its record, else its sweep's; the sweeps of 2026-11-23 ran at 1,000 packets/s, later
  ones at 20,000, as experiments/README.md records), the background and collective of the
  scenario, and whether the configuration puts the job above the background.
* **Sending**: gloo sends DDP's buckets one at a time; the DLCP hook keeps ``in_flight``
  buckets on the wire (4); a trace-driven run uses its scheduler.
* **Tails**: packets are lost with the port model's probability; a reliable message that
  loses one waits a retransmission timeout (TCP: Linux's 200 ms minimum, times ``k``; the
  DLCP transport: its 10 ms minimum or twice the round trip); a bounded-loss stage does not
  wait. p50 and p99 come from 20,000 seeded draws.

What the model leaves out is named in the table's notes: host software per packet and per
iteration (the emulated hosts share 2 cores with the switches), and scenarios it cannot
express (two jobs sharing the spines).
"""

from __future__ import annotations

import json
import math
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from hosts.schedulers import AlphaBeta, create
from simulator.engine import simulate
from simulator.errors import SimulatorError
from simulator.fabric_model import (
    DLCP_PAYLOAD_BYTES,
    TCP_PAYLOAD_BYTES,
    CollectiveLink,
    PortModel,
    WindowScheduler,
    port_model,
)
from simulator.report import markdown_table
from simulator.traces import Layer, ModelTrace, load_trace

#: The experiment's configurations (experiments/configs.py): communication, whether the
#: job's queue is above the background's, the gradient loss bound of the reduce stage.
CONFIGS: dict[str, tuple[str, bool, float]] = {
    "gloo": ("gloo", False, 0.0), "reliable": ("dlcp", False, 0.0), "qos": ("dlcp", True, 0.0),
    "priority": ("dlcp", True, 0.0), "dropping": ("dlcp", False, 0.10), "spraying": ("dlcp", False, 0.0),
    "dlcp": ("dlcp", True, 0.10),
}
#: The experiment's scenarios (experiments/scenarios.py): background, ranks, collective.
SCENARIOS: dict[str, tuple[str, int, str]] = {
    "tcp": ("tcp", 2, "ring"), "udp": ("udp", 2, "ring"), "incast": ("tcp", 4, "star"),
}
OUT_OF_REACH = {"multitenant": "two jobs share the leaf uplinks and spines: not modelled"}
QUEUE_PACKETS = 32
#: Port rate of sweeps without one in their records (experiments/README.md, "port rate").
SLOW_SWEEPS_BEFORE, SLOW_PPS, FAST_PPS = "2026-11-24", 1_000.0, 20_000.0
LINUX_RTO_MIN_S, DLCP_MIN_RTO_S = 0.200, 0.010
DLCP_IN_FLIGHT = 4
DRAWS = 20_000
FRAME_BYTES = 1500


@dataclass
class Group:
    """The pooled runs of one scenario x configuration x port rate."""

    scenario: str
    config: str
    port_pps: float
    sweeps: set[str]
    runs: int = 0
    iterations: list[float] | None = None
    compute: list[float] | None = None
    exposed: list[float] | None = None
    job: dict[str, Any] | None = None


@dataclass(frozen=True)
class Prediction:
    p50_s: float
    p99_s: float
    exposed_s: float
    note: str


def _port_pps(run: dict[str, Any], meta: dict[str, Any]) -> float:
    for source in (run, run.get("rates") or {}, run.get("scale") or {}, meta):
        if isinstance(source, dict) and source.get("port_pps"):
            return float(source["port_pps"])
    started = str(meta.get("started", ""))
    return SLOW_PPS if started and started < SLOW_SWEEPS_BEFORE else FAST_PPS


def load_groups(results: Path) -> list[Group]:
    """Every ok run under ``results`` (a sweep folder or a folder of them), grouped."""
    files = sorted(results.rglob("runs/*.json"))
    if not files:
        raise SimulatorError(f"{results}: no raw runs (runs/*.json) under it")
    groups: dict[tuple[str, str, float], Group] = {}
    metas: dict[Path, dict[str, Any]] = {}
    for f in files:
        sweep = f.parent.parent
        if sweep not in metas:
            try:
                metas[sweep] = json.loads((sweep / "results.json").read_text()).get("meta", {})
            except (OSError, ValueError):
                metas[sweep] = {}
        try:
            run = json.loads(f.read_text())
        except (OSError, ValueError) as exc:
            raise SimulatorError(f"{f}: not a run record: {exc}") from None
        if run.get("status") != "ok":
            continue
        key = (str(run.get("scenario")), str(run.get("config")), _port_pps(run, metas[sweep]))
        g = groups.setdefault(key, Group(key[0], key[1], key[2], set(), 0, [], [], []))
        g.sweeps.add(sweep.name)
        g.runs += 1
        job_spec = run.get("trace_job") or run.get("job")
        g.job = g.job or (job_spec if isinstance(job_spec, dict) and job_spec.get("model") else None)
        for job in (run.get("jobs") or {}).values():
            for rank in (job.get("ranks") or {}).values():
                for rec in (rank.get("records") or [])[1:]:
                    assert g.iterations is not None and g.compute is not None and g.exposed is not None
                    g.iterations.append(float(rec["iteration_s"]))
                    if rec.get("compute_s") is not None:
                        g.compute.append(float(rec["compute_s"]))
                    if rec.get("forward_wait_s") is not None:
                        g.exposed.append(float(rec["forward_wait_s"]))
    return sorted(groups.values(), key=lambda g: (g.scenario, g.port_pps, list(CONFIGS).index(g.config)
                                                     if g.config in CONFIGS else 99))


def scaled_trace(job: dict[str, Any], traces: Path) -> ModelTrace:
    """A trace-driven run's job: the H100 trace with sizes / b and times x k."""
    try:
        k = float(job["k"])
        scale = job.get("scale") or {}
        if job.get("b") or scale.get("b"):
            b = float(job.get("b") or scale["b"])
        else:  # experiments/scaling.py: b * k = real capacity / the port's (full 1,500-byte frames)
            b = float(job["real_gbps"]) * 1e9 / (float(job["port_pps"]) * FRAME_BYTES * 8) / k
        trace = load_trace(traces / "h100_pytorch_layer_traces.csv", model=job["model"], precision=job["precision"])
    except KeyError as exc:
        raise SimulatorError(f"a trace-driven run's record lacks {exc}") from None
    layers = tuple(replace(l, numel=max(1, math.ceil(l.numel / b)), forward_s=l.forward_s * k,
                           backward_s=l.backward_s * k) for l in trace.layers)
    return replace(trace, layers=layers, backward_tail_s=trace.backward_tail_s * k, optimizer_s=trace.optimizer_s * k)


def _penalties(messages: Sequence[int], p: float, rto_s: float, rng: np.random.Generator) -> np.ndarray:
    """Extra seconds per iteration: each message with ``n`` reliable packets waits ``rto_s``
    with probability ``1 - (1 - p)^n``."""
    extra = np.zeros(DRAWS)
    for n in messages:
        q = 1.0 - (1.0 - p) ** n
        extra += rto_s * (rng.random(DRAWS) < q)
    return extra


def predict(group: Group, job: ModelTrace, *, queue_packets: int = QUEUE_PACKETS, seed: int = 0,
            host_iterations: Sequence[float] | None = None) -> Prediction:
    """The model's p50, p99 and exposed communication for ``group`` (module doc).

    ``host_iterations``: iteration times of the same job and configuration measured without
    the fabric (loopback); each draw takes one of them in place of the trace's compute, so
    the hosts' own time and its spread are replayed and the model adds the fabric's."""
    if group.scenario in OUT_OF_REACH:
        raise SimulatorError(OUT_OF_REACH[group.scenario])
    if group.scenario not in SCENARIOS or group.config not in CONFIGS:
        raise SimulatorError(f"unknown scenario {group.scenario!r} or configuration {group.config!r}")
    background, ranks, collective = SCENARIOS[group.scenario]
    comm, above, bound = CONFIGS[group.config]
    tj = group.job or {}
    k = float(tj.get("k", 1.0))
    port: PortModel = port_model(port_pps=group.port_pps, queue_packets=queue_packets, background=background,
                                 job_above_background=above,
                                 payload_bytes=TCP_PAYLOAD_BYTES if comm == "gloo" else DLCP_PAYLOAD_BYTES)
    link = CollectiveLink(port, ranks, collective)
    if group.compute:
        measured = statistics.median(group.compute)
        factor = measured / job.compute_s if job.compute_s > 0 else 1.0
        job = replace(job, layers=tuple(replace(l, forward_s=l.forward_s * factor, backward_s=l.backward_s * factor)
                                        for l in job.layers),
                      backward_tail_s=job.backward_tail_s * factor, optimizer_s=job.optimizer_s * factor)
    if tj.get("scheduler"):
        cost = AlphaBeta(link.round_trip_s(_probe()), 1.0 / port.bytes_per_s)
        scheduler = create(str(tj["scheduler"]), cost=cost)
        overlap = tj.get("overlap") == "layerwise"
    else:
        scheduler = WindowScheduler(1 if comm == "gloo" else DLCP_IN_FLIGHT)
        overlap = False  # DDP steps the optimizer after every bucket is reduced
    result = simulate(job.layers, scheduler, link, overlap_forward=overlap, forward_order=job.forward_order,
                      backward_tail_s=job.backward_tail_s, optimizer_s=job.optimizer_s)
    base = result.iteration_s
    exposed = max(0.0, base - job.compute_s)
    rto = LINUX_RTO_MIN_S * k if comm == "gloo" else max(DLCP_MIN_RTO_S * k, 2 * link.round_trip_s(_probe()))
    # Bounded loss: the reduce stage (half the packets) does not wait for a retransmission.
    share_reliable = 1.0 if bound == 0 else 0.5
    messages = [max(1, round(link.packets(l.numel * 4) * share_reliable)) for l in job.layers if l.numel]
    rng = np.random.default_rng(seed)
    if host_iterations:
        host = rng.choice(np.asarray(host_iterations, dtype=float), DRAWS) + exposed
    else:
        host = np.full(DRAWS, base)
    draws = host + _penalties(messages, port.loss_rate, rto, rng)
    note = []
    if port.loss_rate > 0:
        note.append(f"loss {port.loss_rate:.2%}/packet, timeout {rto * 1e3:.0f} ms")
    return Prediction(float(np.percentile(draws, 50)), float(np.percentile(draws, 99)), exposed, "; ".join(note))


def _probe() -> Any:
    """A zero-byte transfer, to ask a link for its latency."""
    from hosts.schedulers import Transfer

    return Transfer(segments=(), nbytes=0)


def _error(predicted: float, measured: float) -> float:
    return (predicted - measured) / measured


def _ranking(values: dict[str, float]) -> list[str]:
    return sorted(values, key=lambda c: values[c])


def host_baseline(folder: Path) -> dict[str, list[float]]:
    """Iteration times per configuration of runs without the fabric (``--loopback``), and
    per communication (``gloo``, ``dlcp``) for configurations the folder lacks."""
    found: dict[str, list[float]] = {}
    for g in load_groups(folder):
        assert g.iterations is not None
        found.setdefault(g.config, []).extend(g.iterations)
        if g.config in CONFIGS:
            found.setdefault("comm:" + CONFIGS[g.config][0], []).extend(g.iterations)
    return found


def validate(results: Path, out: Path, job_trace: Path | None, traces: Path, command: str,
             baseline: Path | None = None) -> str:
    """Compare, write ``validation.md``, ``validation.csv`` and ``validation.png`` under ``out``,
    and return the Markdown."""
    groups = load_groups(results)
    cnn = load_trace(job_trace) if job_trace is not None else None
    hosts = host_baseline(baseline) if baseline is not None else {}
    header = ["scenario", "port (pkt/s)", "configuration", "sweeps", "runs", "p50 measured (ms)", "p50 predicted (ms)",
              "p50 error", "p99 measured (ms)", "p99 predicted (ms)", "p99 error", "exposed comm. measured (ms)",
              "exposed comm. predicted (ms)", "notes"]
    rows: list[list[str]] = []
    points: list[tuple[str, float, float, float, float]] = []
    p50_errors: list[float] = []
    by_scenario: dict[tuple[str, float], dict[str, tuple[float, float]]] = defaultdict(dict)
    for g in groups:
        assert g.iterations is not None
        m50 = float(np.percentile(g.iterations, 50))
        m99 = float(np.percentile(g.iterations, 99))
        mexp = f"{statistics.median(g.exposed) * 1e3:.1f}" if g.exposed else "-"
        base = [g.scenario, f"{g.port_pps:,.0f}", g.config, str(len(g.sweeps)), str(g.runs), f"{m50 * 1e3:.1f}"]
        try:
            job = scaled_trace(g.job, traces) if g.job else cnn
            if job is None:
                raise SimulatorError("the CNN job's runs need --job-trace (a `sim profile` of the job)")
            host = hosts.get(g.config) or hosts.get("comm:" + CONFIGS.get(g.config, ("?",))[0])
            if hosts and not host:
                raise SimulatorError(f"the baseline has no run of {g.config} or its communication")
            pred = predict(g, job, host_iterations=host)
        except SimulatorError as exc:
            rows.append(base + ["-", "out of reach", f"{m99 * 1e3:.1f}", "-", "-", mexp, "-", str(exc)])
            continue
        e50, e99 = _error(pred.p50_s, m50), _error(pred.p99_s, m99)
        p50_errors.append(abs(e50))
        by_scenario[(g.scenario, g.port_pps)][g.config] = (m50, pred.p50_s)
        points.append((f"{g.scenario} {g.config} {g.port_pps:,.0f}", m50, pred.p50_s, m99, pred.p99_s))
        rows.append(base + [f"{pred.p50_s * 1e3:.1f}", f"{e50:+.0%}", f"{m99 * 1e3:.1f}", f"{pred.p99_s * 1e3:.1f}",
                            f"{e99:+.0%}", mexp, f"{pred.exposed_s * 1e3:.1f}", pred.note or "-"])
    rank_rows = []
    for (scenario, pps), values in sorted(by_scenario.items()):
        measured = _ranking({c: v[0] for c, v in values.items()})
        predicted = _ranking({c: v[1] for c, v in values.items()})
        rank_rows.append([scenario, f"{pps:,.0f}", " < ".join(measured), " < ".join(predicted),
                          "yes" if measured == predicted else "no"])
    out.mkdir(parents=True, exist_ok=True)
    _write_csv(out / "validation.csv", header, rows)
    _plot(points, out / "validation.png")
    median = statistics.median(p50_errors) if p50_errors else float("nan")
    md = (
        "# The simulator against the training experiment's runs\n\n"
        f"Made by `{command}`. Model: simulator/validate.py and simulator/fabric_model.py (module docs).\n\n"
        f"Median absolute error of the predicted iteration p50: **{median:.0%}** over {len(p50_errors)} "
        "scenario x configuration x port-rate groups (target 10%, goal 5%).\n\n"
        + markdown_table(header, rows)
        + "\n**Ranking** of configurations by iteration p50 (fastest first):\n\n"
        + markdown_table(["scenario", "port (pkt/s)", "measured", "predicted", "same"], rank_rows)
        + "\n![](validation.png)\n"
    )
    (out / "validation.md").write_text(md)
    return md


def _write_csv(path: Path, header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    import csv
    import io

    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    path.write_text(buf.getvalue())


def _plot(points: Sequence[tuple[str, float, float, float, float]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 6))
    for label, m50, p50, m99, p99 in points:
        ax.scatter([m50 * 1e3], [p50 * 1e3], marker="o")
        ax.scatter([m99 * 1e3], [p99 * 1e3], marker="^", alpha=0.5)
        ax.annotate(label, (m50 * 1e3, p50 * 1e3), fontsize=7)
    values = [v * 1e3 for p in points for v in p[1:]] or [1.0, 10.0]
    lo, hi = min(values) / 1.5, max(values) * 1.5
    ax.plot([lo, hi], [lo, hi], color="grey", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("measured iteration time (ms)")
    ax.set_ylabel("predicted (ms); o p50, ^ p99")
    ax.set_title("Simulator vs fabric runs")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


__all__ = ["Group", "Layer", "Prediction", "load_groups", "predict", "scaled_trace", "validate"]
