"""Sweeps: every scheduler at every worker count on one cluster, with figures per row."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hosts.schedulers import AlphaBeta, create
from simulator.cluster import AlphaBetaLink, Network, PushPullLink, collective_cost, half_cost
from simulator.dlcp_model import TailLink, TailModel
from simulator.engine import Link, SimResult, simulate
from simulator.errors import SimulatorError
from simulator.traces import ModelTrace


@dataclass(frozen=True)
class ClusterSpec:
    """Architecture, network, optional tail model, and whether forward overlaps communication.

    ``costs`` pins the alpha-beta of given worker counts (e.g. a fit measured there);
    other counts are derived from ``network``. ``aggregation_s``: PS only, the servers'
    delay between the last push of a transfer and the start of its pull.
    """

    arch: str
    network: Network
    servers: int | None = None
    tail: TailModel | None = None
    overlap_forward: bool = True
    costs: Mapping[int, AlphaBeta] = field(default_factory=dict)
    aggregation_s: float = 0.0

    def __post_init__(self) -> None:
        if self.aggregation_s < 0:
            raise SimulatorError(f"aggregation delay must not be negative, not {self.aggregation_s:g} s")

    def cost(self, workers: int) -> AlphaBeta:
        if workers in self.costs:
            return self.costs[workers]
        return collective_cost(self.arch, workers, self.network, servers=self.servers)

    def link(self, workers: int) -> Link:
        cost = self.cost(workers)
        if self.arch != "ps":
            return self._leg(cost)
        leg = half_cost(cost)
        return PushPullLink(self._leg(leg), self._leg(leg), self.aggregation_s)

    def _leg(self, cost: AlphaBeta) -> AlphaBetaLink | TailLink:
        return TailLink(cost, self.tail) if self.tail is not None else AlphaBetaLink(cost)


@dataclass(frozen=True)
class Row:
    """One scheduler at one worker count."""

    model: str
    arch: str
    workers: int
    scheduler: str
    iteration_s: float
    throughput: float  # samples per second, all workers
    speedup: float  # over the baseline scheduler at the same worker count
    scaling_efficiency: float  # throughput / (workers * single-worker compute-only throughput)
    first_update_s: float  # layer 0's update, after the end of backward (next forward waits on it)
    link_idle_s: float
    transfers: int


def run_one(trace: ModelTrace, cluster: ClusterSpec, workers: int, scheduler: str,
            options: Mapping[str, Any] | None = None, iterations: int = 4) -> SimResult:
    """Simulate one scheduler on ``workers`` workers."""
    cost = cluster.cost(workers)
    sched = create(scheduler, cost=cost, **dict(options or {}))
    return simulate(trace.layers, sched, cluster.link(workers), iterations=iterations,
                    overlap_forward=cluster.overlap_forward, forward_order=trace.forward_order,
                    backward_tail_s=trace.backward_tail_s, optimizer_s=trace.optimizer_s)


def sweep(
    trace: ModelTrace,
    cluster: ClusterSpec,
    workers: Sequence[int],
    schedulers: Sequence[str],
    *,
    baseline: str,
    options: Mapping[str, Mapping[str, Any]] | None = None,
    iterations: int = 4,
) -> list[Row]:
    """All ``schedulers`` at all ``workers``; speedups are over ``baseline``."""
    if baseline not in schedulers:
        raise SimulatorError(f"baseline {baseline!r} must be one of the schedulers simulated")
    options = options or {}
    compute_s = trace.compute_s
    if compute_s <= 0:
        raise SimulatorError(f"{trace.name}: the trace has no compute time")
    single = trace.batch_size / compute_s
    rows: list[Row] = []
    for n in workers:
        results = {s: run_one(trace, cluster, n, s, options.get(s), iterations) for s in schedulers}
        base = results[baseline].iteration_s
        for s in schedulers:
            r = results[s]
            steady = r.steady
            throughput = n * trace.batch_size / r.iteration_s
            rows.append(
                Row(
                    model=trace.name,
                    arch=cluster.arch,
                    workers=n,
                    scheduler=s,
                    iteration_s=r.iteration_s,
                    throughput=throughput,
                    speedup=base / r.iteration_s,
                    scaling_efficiency=throughput / (n * single),
                    first_update_s=steady.first_layer_update - steady.backward_s,
                    link_idle_s=steady.link_idle_s,
                    transfers=len(steady.transfers),
                )
            )
    return rows
