"""The trace-driven experiment's scenarios, configurations and job, as ns-3 runs them.

The same tables as ``experiments/trace_configs.py`` (the simulator does not import
``experiments``; ``tests/test_sim_packet_trace.py`` checks the two agree) on its fabric
``leafspine8_training.yaml`` (h1-h4 on l1, h5-h8 on l2, two spines, 51-packet queues):
where the rings run, the background, the lossy spine link; per configuration the job's
transport (kernel TCP or the DLCP transport), its scheduler and overlap, the switch classes
and mechanisms. ``hotspot``'s second job is bulk (``bulk_jobs``): the same configuration with no
compute, in the job's class, sending until the measured job is done, not recorded (as
``experiments/trace_sweep.py`` runs it). ``incast``'s job is a parameter server on h1
(:mod:`simulator.packet.trace_jobs`, ``collective="star"``).

:func:`scaled_job` builds the job a fabric sweep records (``plan.json``'s ``job``, read by
:mod:`simulator.fabric_runs`): the H100 trace merged per layer as the trace worker does
(:func:`gradfabric.traces.merge_layers`), sizes divided by ``b`` (rounded up, at least one
value) and times multiplied by ``k`` (``experiments/scaling.py``); :func:`make_scheduler`
the worker's scheduler options (DDP's 25 MiB buckets with a 1 MiB first one, 4 MiB
partitions, dlcp-merged's 2 MiB groups of small layers, all divided by ``b``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from gradfabric import paths
from gradfabric.traces import ModelTrace, load_trace, merge_layers
from simulator.packet.runtime import PacketSimulationError
from simulator.packet.scenarios import RR_INTERVAL, RR_RESPONSE, Flow, Job, Scenario

TOPOLOGY8 = paths.ROOT / "experiments" / "topologies" / "leafspine8_training.yaml"
SHARED_TRACES = paths.ROOT.parent / "shared" / "traces" / "h100_pytorch_layer_traces.csv"
GRAD_BOUND = 0.10
FRAME_BYTES = 1500
DDP_BUCKET_BYTES, DDP_FIRST_BUCKET_BYTES, PARTITION_BYTES = 25 * 2**20, 1 * 2**20, 4 * 2**20
#: dlcp-merged: consecutive small layers grouped into transfers of at least this many bytes (/b; the
#: trace worker's MERGE_BYTES, hosts/schedulers/dlcp.py ``merge_numel``).
MERGE_BYTES = 2 * 2**20
#: ddp-tcp-rto: the job's rto_min, real seconds (scaled by k).
TUNED_RTO_REAL_S = 0.001
LINUX_RTO_MIN_S = 0.2


@dataclass(frozen=True)
class TraceScenario:
    scenario: Scenario
    lossy_links: tuple[tuple[str, str], ...] = ()
    link_loss: float = 0.0
    bulk_jobs: tuple[int, ...] = ()  # job ids that only make traffic (module doc)

    @property
    def name(self) -> str:
        return self.scenario.name


def _rr(client: str, server: str) -> Flow:
    return Flow(client, server, "rr", packet_bytes=RR_RESPONSE, interval_s=RR_INTERVAL)


TRACE_SCENARIOS: dict[str, TraceScenario] = {s.name: s for s in (
    TraceScenario(Scenario("tcp", "ring h1-h5; long TCP h2->h5 and h6->h1; request/response h3 asks h7",
                           (Job(1, ("h1", "h5")),),
                           (Flow("h2", "h5", "tcp"), Flow("h6", "h1", "tcp"), _rr("h3", "h7")))),
    TraceScenario(Scenario("incast", "parameter server h1, workers h5-h8; long TCP h2->h1; request/response h3 "
                           "asks h1", (Job(1, ("h1", "h5", "h6", "h7", "h8"), collective="star"),),
                           (Flow("h2", "h1", "tcp"), _rr("h3", "h1")))),
    TraceScenario(Scenario("multitenant", "two rings of the same configuration, h1-h5 and h2-h6; "
                           "request/response h3 asks h7", (Job(1, ("h1", "h5")), Job(2, ("h2", "h6"))),
                           (_rr("h3", "h7"),))),
    TraceScenario(Scenario("hotspot", "ring h1-h5; a second job of the same class h2-h6 on the same leaves (bulk: "
                           "no compute); request/response h3 asks h7", (Job(1, ("h1", "h5")), Job(2, ("h2", "h6"))),
                           (_rr("h3", "h7"),)), bulk_jobs=(2,)),
    *(TraceScenario(Scenario(f"lossy-{pct:g}", f"ring h1-h5; the spine link s1-l2 loses {pct:g}% each way; "
                             "request/response h3 asks h7", (Job(1, ("h1", "h5")),), (_rr("h3", "h7"),)),
                    (("s1", "l2"),), pct / 100) for pct in (0.0, 0.1, 1.0)),
)}


@dataclass(frozen=True)
class TraceConfiguration:
    """What :func:`simulator.packet.run.run` and the job need of a trace configuration."""

    name: str
    comm: str  # tcp or dlcp
    scheduler: str  # fusion, p3, dlcp
    overlap: str  # ddp or layerwise
    queues: str = "fifo"  # fifo, tcp-class (the job's TCP at 5), job (5), layer (7/6/5)
    dropping: bool = False
    spraying: bool = False
    ecn: bool = False
    rto_min_real_s: float | None = None
    merge: bool = False  # dlcp scheduler: small layers merged (MERGE_BYTES)

    @property
    def grad_bound(self) -> float:
        return GRAD_BOUND if self.dropping else 0.0

    def rto_min_s(self, k: float) -> float:
        return LINUX_RTO_MIN_S if self.rto_min_real_s is None else self.rto_min_real_s * k


TRACE_CONFIGURATIONS: dict[str, TraceConfiguration] = {c.name: c for c in (
    TraceConfiguration("ddp-tcp", "tcp", "fusion", "ddp"),
    TraceConfiguration("ddp-tcp-qos", "tcp", "fusion", "ddp", queues="tcp-class"),
    TraceConfiguration("ddp-tcp-rto", "tcp", "fusion", "ddp", rto_min_real_s=TUNED_RTO_REAL_S),
    TraceConfiguration("p3-tcp", "tcp", "p3", "layerwise"),
    TraceConfiguration("transport", "dlcp", "fusion", "ddp"),
    TraceConfiguration("transport-qos", "dlcp", "fusion", "ddp", queues="job"),
    TraceConfiguration("priority", "dlcp", "dlcp", "layerwise", queues="layer"),
    TraceConfiguration("dropping", "dlcp", "fusion", "ddp", dropping=True),
    TraceConfiguration("spraying", "dlcp", "fusion", "ddp", spraying=True),
    TraceConfiguration("dlcp", "dlcp", "dlcp", "layerwise", queues="layer", dropping=True, spraying=True, ecn=True),
    TraceConfiguration("dlcp-merged", "dlcp", "dlcp", "layerwise", queues="layer", dropping=True, spraying=True,
                       ecn=True, merge=True),
)}


def trace_scenario(name: str) -> TraceScenario:
    if name not in TRACE_SCENARIOS:
        raise PacketSimulationError(f"unknown trace scenario {name!r}; choose from {', '.join(TRACE_SCENARIOS)}")
    return TRACE_SCENARIOS[name]


def trace_configuration(name: str) -> TraceConfiguration:
    if name not in TRACE_CONFIGURATIONS:
        raise PacketSimulationError(f"unknown trace configuration {name!r}; choose from "
                                    f"{', '.join(TRACE_CONFIGURATIONS)}")
    return TRACE_CONFIGURATIONS[name]


def scale_b(job: dict[str, Any]) -> float:
    """The bytes divisor ``b`` of a recorded job (its own, or from real/port capacity and k)."""
    try:
        if job.get("b"):
            return float(job["b"])
        return float(job["real_gbps"]) * 1e9 / (float(job["port_pps"]) * FRAME_BYTES * 8) / float(job["k"])
    except (KeyError, TypeError, ValueError) as exc:
        raise PacketSimulationError(f"a trace job's record lacks its scaling ({exc}): {job}") from None


def scaled_job(job: dict[str, Any]) -> ModelTrace:
    """The recorded job's model on the emulated fabric (module doc)."""
    try:
        path = Path(job.get("trace") or SHARED_TRACES)
        if not path.exists():
            path = SHARED_TRACES
        trace = load_trace(path, model=job["model"], precision=job["precision"])
        k = float(job["k"])
    except KeyError as exc:
        raise PacketSimulationError(f"a trace job's record lacks {exc}: {job}") from None
    if job.get("layers", "layer") == "layer":
        trace = merge_layers(trace)
    b, c = scale_b(job), float(job.get("compute_scale", 1.0))
    layers = tuple(replace(l, numel=max(1, math.ceil(l.numel / b)), forward_s=l.forward_s * k * c,
                           backward_s=l.backward_s * k * c) for l in trace.layers)
    return replace(trace, layers=layers, backward_tail_s=trace.backward_tail_s * k * c,
                   optimizer_s=trace.optimizer_s * k * c)


def make_scheduler(config: TraceConfiguration, b: float) -> Callable[[], Any]:
    """A factory of the trace worker's scheduler for ``config`` (module doc)."""
    from hosts.schedulers import create

    if config.scheduler == "fusion":
        options: dict[str, Any] = {"bucket_bytes": max(4, int(DDP_BUCKET_BYTES / b)),
                                   "first_bucket_bytes": max(4, int(DDP_FIRST_BUCKET_BYTES / b))}
    else:
        options = {"partition_bytes": max(4, int(PARTITION_BYTES / b))}
        if config.scheduler == "dlcp":
            options.update(front_loss_bound=config.grad_bound, back_loss_bound=config.grad_bound / 2,
                           merge_numel=max(0, int(MERGE_BYTES / b) // 4) if config.merge else 0)
        else:
            options["credit_bytes"] = 1 << 40  # the worker's ring P3: priority order, no credit
    name = config.scheduler
    return lambda: create(name, **options)
