"""Data-parallel training of the byte model over W simulated workers, with loss masks applied
as DLCP's receiver fills what did not arrive (``masks`` module doc).

One iteration: every worker computes the gradient of its own batch on its replica; the mask
source names each worker's lost packets; at the reduce stage lost values are zero in the sum,
and the sum is divided by W (all-reduce's mean, ``hosts.ps`` ``update="mean"``); the server's
optimizer steps; at the gather stage each worker's replica takes the new parameters except
where its packets were lost (those keep the replica's previous values). Without gather
losses every replica is the server's parameters.

The seed fixes the model's initial weights and every worker's batches, so runs of one seed
under different masks see the same data in the same order (paired); masks draw from their
own generators.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch
from torch.nn.utils import parameters_to_vector

from experiments.accuracy.data import Corpus, fixed_starts, random_starts, windows
from experiments.accuracy.masks import MaskSource, PacketLayout
from experiments.accuracy.model import ByteLM, ModelConfig

LN2 = math.log(2.0)


@dataclass(frozen=True)
class TrainSettings:
    """A run's fixed parameters (the sweep's are in experiments/README.md)."""

    model: ModelConfig = field(default_factory=ModelConfig)
    workers: int = 4
    batch: int = 8  # windows per worker and iteration
    steps: int = 300
    lr: float = 3e-3
    warmup: int = 20
    eval_every: int = 10
    eval_windows: int = 128
    threads: int = 1

    def describe(self) -> dict[str, Any]:
        d = asdict(self)
        d["model"] = self.model.describe()
        return d


def make_model(settings: TrainSettings, seed: int) -> ByteLM:
    torch.manual_seed(seed)
    return ByteLM(settings.model)


def layout_of(model: torch.nn.Module) -> PacketLayout:
    """One DLCP message per parameter tensor, in the model's parameter order."""
    return PacketLayout(tuple(p.numel() for p in model.parameters()))


@torch.no_grad()
def evaluate(model: ByteLM, batch: torch.Tensor) -> float:
    """Bits per byte of the model's next-byte predictions over a fixed batch."""
    model.eval()
    loss = float(model.loss(batch))
    model.train()
    return loss / LN2


def reduce_gradients(grads: list[torch.Tensor], lost: list[np.ndarray],
                     owner: torch.Tensor) -> tuple[torch.Tensor, int]:
    """The mean of the workers' flat gradients with each worker's lost packets zero in the sum
    (divided by the number of workers, not by what arrived); also the number of values lost.
    `owner` maps each value to its packet (``PacketLayout.element_packet``)."""
    total = torch.zeros_like(grads[0])
    lost_values = 0
    for g, packets in zip(grads, lost):
        keep = ~torch.from_numpy(packets)[owner]
        lost_values += int(keep.numel() - keep.sum())
        total += torch.where(keep, g, torch.zeros((), dtype=g.dtype))
    return total / len(grads), lost_values


def train(corpus: Corpus, settings: TrainSettings, seed: int, masks: MaskSource,
          on_step: Callable[[dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
    """Train one run; returns one record per iteration (validation bits/byte every
    ``eval_every`` iterations and at the last)."""
    torch.set_num_threads(settings.threads)
    model = make_model(settings, seed)
    params = list(model.parameters())
    layout = layout_of(model)
    owner = torch.from_numpy(layout.element_packet)
    optimizer = torch.optim.AdamW(params, lr=settings.lr, betas=(0.9, 0.99), weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1.0, (s + 1) / settings.warmup) if settings.warmup else 1.0)
    length = settings.model.context + 1
    data_rng = np.random.default_rng([seed, 0xDA7A])
    val = torch.from_numpy(windows(corpus.val, fixed_starts(corpus.val, settings.eval_windows, length), length))
    server = parameters_to_vector(params).detach().clone()
    replicas: list[torch.Tensor] | None = None
    records: list[dict[str, Any]] = []
    for step in range(settings.steps):
        started = time.perf_counter()
        grads, losses = [], []
        for w in range(settings.workers):
            batch = torch.from_numpy(windows(corpus.train, random_starts(data_rng, corpus.train, settings.batch,
                                                                       length), length))
            _load(replicas[w] if replicas is not None else server, params)
            loss = model.loss(batch)
            grads.append(parameters_to_vector(torch.autograd.grad(loss, params)))
            losses.append(float(loss.detach()))
        reduce_lost, gather_lost = masks.lost(step, [g.numpy() for g in grads])
        total, lost_values = reduce_gradients(grads, reduce_lost, owner)
        _load(server, params)
        for p, chunk in zip(params, _chunks(total, params)):
            p.grad = chunk.view_as(p).clone()
        optimizer.step()
        schedule.step()
        previous = replicas if replicas is not None else [server] * settings.workers
        server = parameters_to_vector(params).detach().clone()
        gathered = 0
        if gather_lost is not None:
            replicas = []
            for w, lost in enumerate(gather_lost):
                stale = torch.from_numpy(lost)[owner]
                gathered += int(stale.sum())
                replicas.append(torch.where(stale, previous[w], server))
        elif replicas is not None:
            replicas = None
        record: dict[str, Any] = {
            "step": step + 1, "train_bpb": sum(losses) / len(losses) / LN2,
            "reduce_lost": lost_values / (server.numel() * settings.workers),
            "gather_lost": gathered / (server.numel() * settings.workers),
            "seconds": round(time.perf_counter() - started, 4)}
        if (step + 1) % settings.eval_every == 0 or step + 1 == settings.steps:
            record["val_bpb"] = evaluate(model, val)
        records.append(record)
        if on_step is not None:
            on_step(record)
    return records


def _chunks(vector: torch.Tensor, params: list[torch.nn.Parameter]) -> list[torch.Tensor]:
    return list(vector.split([p.numel() for p in params]))


@torch.no_grad()
def _load(vector: torch.Tensor, params: list[torch.nn.Parameter]) -> None:
    """Copy a flat vector into the parameters (no aliasing: the vector stays as it is)."""
    for p, chunk in zip(params, _chunks(vector, params)):
        p.copy_(chunk.view_as(p))


def steps_to_target(records: list[dict[str, Any]], target: float) -> float | None:
    """Iterations until validation bits/byte first reached `target`, interpolated linearly
    between the two evaluations around the crossing; None if never reached."""
    evals = [(0, math.inf)] + [(r["step"], r["val_bpb"]) for r in records if "val_bpb" in r]
    for (s0, v0), (s1, v1) in zip(evals, evals[1:]):
        if v1 <= target:
            if not math.isfinite(v0):
                return float(s1)
            return s0 + (s1 - s0) * (v0 - target) / (v0 - v1)
    return None
