"""The gradient exchange over the DLCP host agents: workers push to a parameter server
and pull the updated parameters back (:mod:`hosts.ps`, driven by :class:`hosts.agent.WorkerAgent`).
How they travel is set by :class:`~experiments.training.options.TransportOptions`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from experiments.errors import ExperimentError
from experiments.training.loop import ExchangeStats
from experiments.training.options import TransportOptions
from hosts.agent import WorkerAgent
from hosts.endpoint import Endpoint
from hosts.model import model_from_sizes
from hosts.pacing import Aimd
from hosts.ps import PS_WORKER_ID, ParameterServer, PsClient
from hosts.receiver import Address
from hosts.schedulers import AlphaBeta, Decision, Layer, LossPolicy, Scheduler, Transfer, create
from hosts.wire import MsgType

#: MG-WFBP's fitted 10GbE cost model; only planning schedulers use it.
COST = AlphaBeta(alpha=9.08e-4, beta=7.40e-10)


def make_endpoint(options: TransportOptions, worker_id: int, host: str = "127.0.0.1", port: int = 0) -> Endpoint:
    return Endpoint(worker_id=worker_id, job_id=options.job_id, host=host, port=port,
                    bounds={MsgType.GRADIENT: options.grad_bound, MsgType.PARAMETER: options.param_bound},
                    aimd=Aimd(rate=options.rate_pps))


class BoundedLoss(Scheduler):
    """Any scheduler's order, with DLCP's bounded-loss tags added to its transfers.

    Lets a configuration turn on loss tolerance (drop-eligible packets, zero-filled
    gradients) without DLCP's front-first order: front layers (the first half) tolerate
    `front_bound`, the others `back_bound`."""

    def __init__(self, inner: Scheduler, front_bound: float, back_bound: float) -> None:
        super().__init__(cost=inner.cost)
        self.inner = inner
        self.name = f"{inner.name}+bounded-loss"
        self.front_bound = front_bound
        self.back_bound = back_bound
        self._originals: dict[int, Transfer] = {}

    def start_iteration(self, layers: Sequence[Layer], now: float) -> None:
        super().start_iteration(layers, now)
        self.inner.start_iteration(layers, now)
        self._originals.clear()

    def on_gradient_ready(self, layer_index: int, now: float) -> None:
        self.inner.on_gradient_ready(layer_index, now)

    def next_transfer(self, now: float, link_idle: bool) -> Decision:
        decision = self.inner.next_transfer(now, link_idle)
        if not isinstance(decision, Transfer):
            return decision
        front = min(decision.layer_indices) < len(self.layers) / 2
        bound = self.front_bound if front else self.back_bound
        tagged = replace(decision, loss=LossPolicy(loss_bound=bound, drop_eligible_share=bound))
        self._originals[tagged.id] = decision
        return tagged

    def on_transfer_done(self, transfer: Transfer, now: float, achieved_bytes_per_s: float) -> None:
        self.inner.on_transfer_done(self._originals.pop(transfer.id, transfer), now, achieved_bytes_per_s)


def make_scheduler(options: TransportOptions) -> Scheduler:
    """The options' scheduler; a non-DLCP one gets bounded-loss tags when gradients may be lost."""
    scheduler = create(options.scheduler, cost=COST, **options.scheduler_options())
    if options.scheduler != "dlcp" and options.grad_bound > 0:
        return BoundedLoss(scheduler, options.front_loss_bound, options.back_loss_bound)
    return scheduler


class PsExchange:
    """A worker's exchange through a parameter server (the :class:`Exchange` protocol)."""

    def __init__(self, endpoint: Endpoint, server: Address, sizes: Sequence[int], initial: Sequence[np.ndarray],
                 *, rank: int, options: TransportOptions) -> None:
        self.endpoint = endpoint
        self.client = PsClient(endpoint, server)
        # Parameter values lost in the very first pull keep the common initial values.
        self.client.previous = {i: np.array(a, np.float32) for i, a in enumerate(initial)}
        scheduler = make_scheduler(options)
        layers = model_from_sizes(sizes, backward_s=0.0)
        self.agent = WorkerAgent(layers, scheduler, self.client, rank=rank, timeout=options.timeout_s)

    def exchange(self, iteration: int, gradients: Sequence[np.ndarray]) -> tuple[list[np.ndarray], ExchangeStats]:
        params, report = self.agent.run_iteration(iteration, gradients)
        return params, ExchangeStats(packets=report.packets, retransmitted=report.retransmissions,
                                     loss_rate=report.loss_rate)

    def close(self) -> None:
        self.endpoint.close()


@dataclass
class ServerSummary:
    """What the parameter server saw over a whole job."""

    iterations: int = 0
    seconds: float = 0.0
    gradient_loss: float = 0.0  # mean share of pushed gradient values lost (zero-filled)
    pull_packets: int = 0
    pull_retransmitted: int = 0
    data_packets_received: int = 0
    duplicates: int = 0
    drops: dict[str, int] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def serve(endpoint: Endpoint, workers: int, initial: Sequence[np.ndarray], *, iterations: int, lr: float,
          options: TransportOptions) -> ServerSummary:
    """Run the parameter server of a job: SGD on the mean of the workers' gradients."""
    if endpoint.worker_id != PS_WORKER_ID:
        raise ExperimentError(f"the parameter server's endpoint must use worker id {PS_WORKER_ID}")
    server = ParameterServer(endpoint, workers, update="sgd", lr=lr,
                             initial={i: a for i, a in enumerate(initial)})
    tensor_ids = list(range(len(initial)))
    summary = ServerSummary()
    started = time.perf_counter()
    losses = []
    for it in range(iterations):
        served = server.serve_iteration(it, tensor_ids, num_layers=len(tensor_ids), timeout=options.timeout_s)
        losses.append(served.gradient_loss)
        summary.pull_packets += sum(p.packets for p in served.pulls)
        summary.pull_retransmitted += sum(p.retransmitted for p in served.pulls)
    summary.iterations = iterations
    summary.seconds = time.perf_counter() - started
    summary.gradient_loss = float(np.mean(losses)) if losses else 0.0
    stats = endpoint.reassembler.stats
    summary.data_packets_received = stats.data_packets
    summary.duplicates = stats.duplicates
    summary.drops = dict(stats.drops)
    return summary
