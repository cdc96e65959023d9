"""What a simulated rank computes and sends: gradient buckets with their ready times.

Two sources:

* :func:`cnn_workload`: the training experiment's job (``experiments/training/cnn.py``): ten
  tensors of 8,162 values in all, DDP buckets capped at 100 bytes (one per tensor, the last
  10-value bias sharing its weight's: nine buckets). Its compute time is a parameter (the
  fabric's README gives about 25 ms per iteration on one CPU thread).
* :func:`trace_workload`: a measured model (the H100 traces, through the project's one trace
  reader :mod:`gradfabric.traces`), tensors merged into DDP buckets in ready order, scaled
  by the experiment's rule (``experiments/scaling.py``): bytes divided by ``b``, times
  multiplied by ``k``, with ``b * k`` = real link capacity / emulated port capacity.

Priorities follow the experiment's layer rule, stated by position so that any model has
it: the front 20% of tensors 7 (the CNN's tensors 0-1), the next 40% 6 (2-5), the rest 5.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gradfabric.traces import ModelTrace
from simulator.packet.runtime import PacketSimulationError

#: The experiment CNN's parameter tensors in forward order (values each).
CNN_TENSORS = (72, 8, 1152, 16, 3456, 24, 3072, 32, 320, 10)
#: Share of the CNN's compute in its forward pass (one CPU thread: backward about twice forward).
FORWARD_SHARE = 1 / 3
#: Bytes of a full frame on the emulated fabric, and of its gradient payload (361 values).
FRAME_BYTES = 1500
PAYLOAD_BYTES = 361 * 4


def layer_priority(index: int, count: int) -> int:
    """7, 6 or 5 for tensor ``index`` of ``count`` (module doc)."""
    position = index / count
    return 7 if position < 0.2 else 6 if position < 0.6 else 5


@dataclass(frozen=True)
class Bucket:
    """One all-reduce: ``numel`` float32 values, ready ``ready_s`` after backward starts."""

    front: int  # front-most tensor index (the tensor id on the wire)
    numel: int
    ready_s: float
    priority: int  # layer priority (7 most urgent)


@dataclass(frozen=True)
class Workload:
    name: str
    buckets: tuple[Bucket, ...]  # in ready order (backward order)
    forward_s: float
    backward_s: float  # backward end, after the last bucket is ready
    optimizer_s: float = 0.0
    note: str = ""
    #: Measured per-iteration host times (a loopback run's iteration times): when given, each
    #: iteration draws one and its compute timeline is stretched to it.
    host_samples: tuple[float, ...] = ()

    @property
    def numel(self) -> int:
        return sum(b.numel for b in self.buckets)

    @property
    def compute_s(self) -> float:
        return self.forward_s + self.backward_s + self.optimizer_s


def cnn_workload(compute_s: float = 0.025) -> Workload:
    """The experiment's CNN job (module doc); backward time spread in proportion to values."""
    if compute_s <= 0:
        raise PacketSimulationError(f"compute time must be positive (got {compute_s} s)")
    groups = [[i] for i in range(len(CNN_TENSORS) - 2)] + [[len(CNN_TENSORS) - 2, len(CNN_TENSORS) - 1]]
    backward = compute_s * (1 - FORWARD_SHARE)
    total = sum(CNN_TENSORS)
    buckets, elapsed = [], 0.0
    for group in reversed(groups):
        numel = sum(CNN_TENSORS[i] for i in group)
        elapsed += backward * numel / total
        buckets.append(Bucket(group[0], numel, elapsed, layer_priority(group[0], len(CNN_TENSORS))))
    return Workload("cnn", tuple(buckets), compute_s * FORWARD_SHARE, backward,
                    note=f"experiment CNN, {total} values, {compute_s * 1e3:g} ms compute")


@dataclass(frozen=True)
class Scale:
    """The experiment's scaling rule: real link ``real_gbps``, emulated port ``port_bps``, ``k``."""

    real_gbps: float
    port_bps: float
    k: float

    @property
    def b(self) -> float:
        return self.real_gbps * 1e9 / self.port_bps / self.k

    def __post_init__(self) -> None:
        if self.real_gbps <= 0 or self.port_bps <= 0 or self.k <= 0 or self.b < 1:
            raise PacketSimulationError(f"scaling needs positive rates and 0 < k <= capacity ratio "
                                        f"(real {self.real_gbps} Gbit/s, port {self.port_bps / 1e6:g} Mbit/s, k {self.k})")


def trace_workload(trace: ModelTrace, scale: Scale, bucket_mb: float = 25.0) -> Workload:
    """DDP buckets of ``bucket_mb`` (real MiB) over ``trace``'s tensors in ready order, scaled."""
    layers = trace.layers
    if not layers:
        raise PacketSimulationError(f"trace {trace.name} has no layers")
    cap = bucket_mb * 1024 * 1024 / 4
    buckets: list[Bucket] = []
    elapsed, numel, front = 0.0, 0, len(layers)
    for layer in reversed(layers):  # gradients become ready from the last layer down
        elapsed += layer.backward_s
        numel += layer.numel
        front = layer.index
        if numel >= cap or layer.index == 0:
            buckets.append(Bucket(front, max(1, math.ceil(numel / scale.b)), elapsed * scale.k,
                                  layer_priority(front, len(layers))))
            numel = 0
    backward = (elapsed + trace.backward_tail_s) * scale.k
    return Workload(trace.name, tuple(buckets), trace.forward_s * scale.k, backward, trace.optimizer_s * scale.k,
                    note=f"{trace.name} {trace.precision}, {len(buckets)} buckets of <= {bucket_mb:g} MiB, "
                         f"b = {scale.b:.1f}, k = {scale.k:g}")
