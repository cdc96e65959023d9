"""The two roles of a training job as processes, and the JSON lines they print.

``ps``: the parameter server. ``worker``: one data-parallel worker. Both print JSON lines on
stdout: first ``{"event": "listening", "address": "IP:PORT"}`` once the DLCP socket is
bound (a worker started with ``--wait-go`` then waits for a line on stdin), then (worker) one ``{"event": "iteration", ...}`` per iteration (a
:class:`~experiments.training.loop.Record`), and last ``{"event": "done", ...}`` with the
socket's receive statistics (and, for the server, its :class:`ServerSummary`).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any, TextIO

from experiments.training.data import load_digits
from experiments.training.loop import Record, TrainConfig, Worker
from experiments.training.model import build_mlp, parameter_arrays, tensor_sizes
from experiments.training.options import TransportOptions
from experiments.training.transport import PsExchange, make_endpoint, serve
from hosts.endpoint import Endpoint
from hosts.ps import PS_WORKER_ID
from hosts.receiver import Address

Emit = Callable[[dict[str, Any]], None]


def json_lines(stream: TextIO = sys.stdout) -> Emit:
    def emit(record: dict[str, Any]) -> None:
        stream.write(json.dumps(record, sort_keys=True) + "\n")
        stream.flush()

    return emit


def receive_stats(endpoint: Endpoint) -> dict[str, Any]:
    stats = endpoint.reassembler.stats
    return {"data_packets": stats.data_packets, "duplicates": stats.duplicates, "probes": stats.probes,
            "drops": dict(stats.drops)}


def _listening(emit: Emit, endpoint: Endpoint) -> None:
    host, port = endpoint.address
    emit({"event": "listening", "address": f"{host}:{port}"})


def run_server(bind: Address, workers: int, config: TrainConfig, options: TransportOptions, emit: Emit) -> None:
    """Serve one job's `config.iterations` iterations for `workers` workers."""
    data = load_digits(config.seed)
    initial = parameter_arrays(build_mlp(data.features, config.hidden, config.seed))
    with make_endpoint(options, PS_WORKER_ID, *bind) as endpoint:
        _listening(emit, endpoint)
        summary = serve(endpoint, workers, initial, iterations=config.iterations, lr=config.lr, options=options)
        emit({"event": "done", "role": "ps", "server": summary.to_dict(), "receive": receive_stats(endpoint)})


def run_worker(bind: Address, server: Address, rank: int, workers: int, config: TrainConfig,
               options: TransportOptions, emit: Emit, *, linger_s: float = 1.0,
               wait_go: TextIO | None = None) -> list[Record]:
    """Train as worker `rank`; keep answering late probes for `linger_s` seconds at the end.

    With `wait_go`, the first iteration waits for a line on that stream (a start signal
    from whoever launched the job, e.g. once background traffic runs)."""
    data = load_digits(config.seed)
    trainer = Worker(rank, workers, config, data)
    with make_endpoint(options, rank, *bind) as endpoint:
        _listening(emit, endpoint)
        if wait_go is not None:
            wait_go.readline()
        exchange = PsExchange(endpoint, server, tensor_sizes(trainer.model), trainer.initial_parameters(),
                              rank=rank, options=options)
        records = trainer.train(exchange, lambda r: emit({"event": "iteration", **asdict(r)}))
        time.sleep(linger_s)
        emit({"event": "done", "role": "worker", "rank": rank, "receive": receive_stats(endpoint)})
    return records
