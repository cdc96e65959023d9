"""The worker's training loop with a pluggable gradient exchange.

Each iteration: compute the gradient of a minibatch of the worker's shard, hand it to an
:class:`Exchange` (which returns the new parameters: a parameter server's result, or a local
SGD step), load them, and now and then measure test accuracy. Each iteration yields one
:class:`Record`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import numpy as np

from experiments.training.data import Batches, Digits
from experiments.training.model import (
    accuracy,
    build_mlp,
    gradient_arrays,
    load_parameters,
    parameter_arrays,
    torch_module,
)


@dataclass
class ExchangeStats:
    """What one exchange cost on the wire (zeros for an in-process exchange)."""

    packets: int = 0
    retransmitted: int = 0
    loss_rate: float = 0.0  # share of values lost (zero-filled or kept from before)


class Exchange(Protocol):
    """Turns this worker's gradients of an iteration into the new parameters."""

    def exchange(self, iteration: int, gradients: Sequence[np.ndarray]) -> tuple[list[np.ndarray], ExchangeStats]: ...

    def close(self) -> None: ...


class LocalSgd:
    """Plain SGD in process (one worker, no network): the reference exchange."""

    def __init__(self, initial: Sequence[np.ndarray], lr: float) -> None:
        self.params = [np.array(p, np.float32) for p in initial]
        self.lr = lr

    def exchange(self, iteration: int, gradients: Sequence[np.ndarray]) -> tuple[list[np.ndarray], ExchangeStats]:
        for p, g in zip(self.params, gradients):
            p -= self.lr * g
        return [p.copy() for p in self.params], ExchangeStats()

    def close(self) -> None:
        pass


@dataclass(frozen=True)
class TrainConfig:
    """Hyper-parameters every worker and the server must agree on."""

    iterations: int = 100
    batch_size: int = 32
    lr: float = 0.5
    seed: int = 0
    hidden: tuple[int, ...] = (64,)
    eval_every: int = 10


@dataclass
class Record:
    """One iteration of one worker."""

    iteration: int
    rank: int
    wall_s: float  # since the worker's first iteration began
    iteration_s: float
    loss: float
    accuracy: float | None  # test accuracy after this iteration (when evaluated)
    packets: int = 0
    retransmitted: int = 0
    loss_rate: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Worker:
    """One data-parallel worker (see the module doc)."""

    rank: int
    world: int
    config: TrainConfig
    data: Digits
    model: Any = field(init=False)

    def __post_init__(self) -> None:
        self.model = build_mlp(self.data.features, self.config.hidden, self.config.seed)
        self.batches = Batches(self.data, self.rank, self.world, self.config.batch_size, self.config.seed)

    def initial_parameters(self) -> list[np.ndarray]:
        return parameter_arrays(self.model)

    def train(self, exchange: Exchange, on_record: Callable[[Record], None] | None = None) -> list[Record]:
        torch = torch_module()
        loss_fn = torch.nn.CrossEntropyLoss()
        records: list[Record] = []
        origin = time.perf_counter()
        last = self.config.iterations - 1
        for it in range(self.config.iterations):
            began = time.perf_counter()
            x, y = self.batches.batch(it)
            self.model.zero_grad(set_to_none=True)
            loss = loss_fn(self.model(torch.from_numpy(x)), torch.from_numpy(y))
            loss.backward()
            params, stats = exchange.exchange(it, gradient_arrays(self.model))
            load_parameters(self.model, params)
            ended = time.perf_counter()
            evaluate = it % self.config.eval_every == self.config.eval_every - 1 or it == last
            acc = accuracy(self.model, self.data.test_x, self.data.test_y) if evaluate else None
            record = Record(iteration=it, rank=self.rank, wall_s=ended - origin, iteration_s=ended - began,
                            loss=float(loss.item()), accuracy=acc, packets=stats.packets,
                            retransmitted=stats.retransmitted, loss_rate=stats.loss_rate)
            records.append(record)
            if on_record is not None:
                on_record(record)
        return records


def final_accuracy(records: Sequence[Record]) -> float:
    scored = [r.accuracy for r in records if r.accuracy is not None]
    return scored[-1] if scored else float("nan")


def time_to_accuracy(records: Sequence[Record], target: float) -> float | None:
    """Wall time of the first evaluation that reached `target`, None if none did."""
    for r in records:
        if r.accuracy is not None and r.accuracy >= target:
            return r.wall_s
    return None
