"""A whole job in one process on loopback: a parameter server thread and one thread per
worker, each with its own DLCP socket. Optionally every worker's gradients cross a relay
that loses a share of the data packets at random (bounded loss, zero-filled gradients).

Used by the tests and by ``gradfabric train --threads``; ``gradfabric train`` runs the same
roles as separate processes (:mod:`experiments.training.processes`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

from experiments.errors import ExperimentError
from experiments.training.data import Digits, load_digits
from experiments.training.loop import Record, TrainConfig, Worker
from experiments.training.model import build_mlp, parameter_arrays, tensor_sizes
from experiments.training.options import TransportOptions
from experiments.training.processes import JobOutcome
from experiments.training.roles import receive_stats
from experiments.training.transport import PsExchange, ServerSummary, make_endpoint, serve
from hosts.ps import PS_WORKER_ID
from hosts.relay import Relay, RelayStats, random_impairment


@dataclass
class JobResult:
    records: dict[int, list[Record]] = field(default_factory=dict)
    server: ServerSummary | None = None
    relays: list[RelayStats] = field(default_factory=list)
    #: What each socket received (as the roles print it): the server's, then by rank.
    server_receive: dict[str, Any] = field(default_factory=dict)
    worker_receive: dict[int, dict[str, Any]] = field(default_factory=dict)

    def outcome(self) -> JobOutcome:
        """The same figures as a job of processes reports them."""
        return JobOutcome(
            records={rank: [r.to_dict() for r in recs] for rank, recs in self.records.items()},
            server={"server": self.server.to_dict() if self.server else {}, "receive": self.server_receive},
            worker_receive=dict(self.worker_receive))


def run_loopback(config: TrainConfig, options: TransportOptions, workers: int, *, loss: float = 0.0,
                 data: Digits | None = None, loss_seed: int = 1) -> JobResult:
    """Train with `workers` worker threads and a server thread; see the module doc."""
    data = data or load_digits(config.seed)
    model = build_mlp(data.features, config.hidden, config.seed)
    initial, sizes = parameter_arrays(model), tensor_sizes(model)
    result = JobResult()
    errors: list[BaseException] = []

    def guarded(body: Callable[..., None], *args: object) -> None:
        try:
            body(*args)
        except BaseException as exc:  # reported below, in the caller's thread
            errors.append(exc)

    with ExitStack() as stack:
        ps_endpoint = stack.enter_context(make_endpoint(options, PS_WORKER_ID))
        targets = []
        relays = []
        for rank in range(workers):
            if loss > 0:
                relay = stack.enter_context(Relay(ps_endpoint.address, random_impairment(
                    loss=loss, duplicate=0.0, seed=loss_seed + rank), record=False))
                relays.append(relay)
                targets.append(relay.address)
            else:
                targets.append(ps_endpoint.address)
        endpoints = [stack.enter_context(make_endpoint(options, rank)) for rank in range(workers)]

        def server() -> None:
            result.server = serve(ps_endpoint, workers, initial, iterations=config.iterations,
                                  lr=config.lr, options=options)

        def worker(rank: int) -> None:
            trainer = Worker(rank, workers, config, data)
            exchange = PsExchange(endpoints[rank], targets[rank], sizes, initial, rank=rank, options=options)
            result.records[rank] = trainer.train(exchange)

        threads = [threading.Thread(target=guarded, args=(server,), name="ps")]
        threads += [threading.Thread(target=guarded, args=(worker, r), name=f"worker{r}") for r in range(workers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        result.relays = [r.stats for r in relays]
        result.server_receive = receive_stats(ps_endpoint)
        result.worker_receive = {rank: receive_stats(e) for rank, e in enumerate(endpoints)}
    if errors:
        raise ExperimentError(f"the loopback job failed: {errors[0]}") from errors[0]
    return result
