"""What every rank of a trace-driven job agrees on (:class:`TraceJob`), and what follows from it
alone: the model trace scaled by the job's rule (sizes /b, times xk), the scheduler with the
real job's caps (DDP buckets, P3 partitions, DLCP merging) and the hosts' marking.
:mod:`experiments.training.trace_worker` runs one rank of such a job."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from experiments.errors import ExperimentError
from experiments.scaling import REFERENCE_K, REFERENCE_PORT_PPS, ScaleRule
from gradfabric.traces import Layer, ModelTrace, load_trace, merge_layers

SHARED_TRACES = Path(__file__).resolve().parents[3] / "shared" / "traces" / "h100_pytorch_layer_traces.csv"
#: DDP's bucket caps (bytes) and ByteScheduler/P3's partition (4 MB), divided by b at run time.
DDP_BUCKET_BYTES = 25 * 2**20
DDP_FIRST_BUCKET_BYTES = 1 * 2**20
PARTITION_BYTES = 4 * 2**20
#: DLCP with merged layers: small layers grouped into transfers of at least half a partition (/b).
MERGE_BYTES = 2 * 2**20
#: DSCP per priority class in the ``commodity`` marking: the three layer classes of the
#: experiment's policies (7, 6, 5) as EF, AF41, AF31; other classes best effort.
COMMODITY_DSCP: dict[int, int] = {0: 0, 1: 0, 2: 0, 3: 0, 4: 0, 5: 26, 6: 34, 7: 46}


@dataclass(frozen=True)
class TraceJob:
    """What every rank of a trace-driven job agrees on."""

    model: str = "resnet50"
    precision: str = "fp32"
    trace: str = str(SHARED_TRACES)
    iterations: int = 20
    real_gbps: float = 25.0
    port_pps: float = REFERENCE_PORT_PPS
    k: float = REFERENCE_K  # experiments/README.md: why 8
    scheduler: str = "fusion"  # fusion (DDP buckets), wfbp, p3, dlcp
    overlap: str = "ddp"  # ddp or layerwise
    comm: str = "dlcp"  # dlcp (UDP, host transport) or tcp
    collective: str = "ring"  # ring, or ps (rank 0 serves)
    grad_bound: float = 0.0
    job_id: int = 1
    seed: int = 1
    dscp: int = 0  # TCP: IP_TOS DSCP of the job's sockets
    congestion: str = ""  # TCP: congestion control set per socket (TCP_CONGESTION); "": the host's default
    marking: str = "p4"  # DLCP: p4 (the switches read the DLCP header) or commodity (hosts.marking)
    rate_pps: float = REFERENCE_PORT_PPS
    max_rate_pps: float = 80_000.0  # recorded only: the sender's pacing is capped by port_pps
    timeout_s: float = 60.0
    compute_scale: float = 1.0  # 0: no compute, a bulk sender in the job's class (hotspot scenario)
    layers: str = "layer"  # layer: a conv and its norm are one layer (merge_layers); tensor: every tensor
    merge_bytes: int = 0  # dlcp: small layers merged into transfers of this many bytes (real, /b); 0: off

    def argv(self) -> list[str]:
        out: list[str] = []
        for name, value in asdict(self).items():
            out += [f"--{name.replace('_', '-')}", str(value)]
        return out

    @property
    def rule(self) -> ScaleRule:
        return ScaleRule(self.real_gbps, self.port_pps, self.k)


def _marking(job: TraceJob) -> Any:
    """The hosts' IP marking of the job's DLCP packets (hosts.marking)."""
    from hosts.marking import Marking

    return Marking(job.marking, dscp=COMMODITY_DSCP) if job.marking == "commodity" else Marking(job.marking)


def scaled_model(job: TraceJob) -> ModelTrace:
    """The trace with sizes divided by b and times multiplied by k."""
    from dataclasses import replace

    trace = load_trace(job.trace, model=job.model, precision=job.precision)
    if job.layers == "layer":
        trace = merge_layers(trace)
    elif job.layers != "tensor":
        raise ExperimentError(f"--layers {job.layers!r}: layer or tensor")
    rule = job.rule
    c = job.compute_scale

    def t(seconds: float) -> float:
        return rule.seconds(seconds) * c

    layers = tuple(Layer(l.index, l.name, rule.numel(l.numel), t(l.forward_s), t(l.backward_s)) for l in trace.layers)
    return replace(trace, layers=layers, backward_tail_s=t(trace.backward_tail_s), optimizer_s=t(trace.optimizer_s))


def make_scheduler(job: TraceJob) -> Any:
    from hosts.schedulers import create

    b = job.rule.b
    if job.scheduler == "fusion":
        return create("fusion", bucket_bytes=max(4, int(DDP_BUCKET_BYTES / b)),
                      first_bucket_bytes=max(4, int(DDP_FIRST_BUCKET_BYTES / b)))
    if job.scheduler in ("p3", "dlcp"):
        options: dict[str, Any] = {"partition_bytes": max(4, int(PARTITION_BYTES / b))}
        if job.scheduler == "dlcp":
            options.update(front_loss_bound=job.grad_bound, back_loss_bound=job.grad_bound / 2,
                           merge_numel=max(0, int(job.merge_bytes / b) // 4))
        elif job.collective == "ring":
            # P3's credit (one partition in flight) needs the order every rank agrees on; ranks
            # order by their own timing, and a ring step waits for the neighbour to start the
            # same transfer: with credit they deadlock. Ring: priority order, no credit.
            options["credit_bytes"] = 1 << 40
        return create(job.scheduler, **options)
    return create(job.scheduler)


def forward_order(trace: ModelTrace) -> list[int]:
    return list(trace.forward_order) if trace.forward_order else list(range(len(trace.layers)))
