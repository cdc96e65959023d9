"""The worker agent: drives a scheduler in real time and moves its transfers over DLCP.

One iteration: the forward pass (the model's forward time), then the backward pass, during
which layer gradients become ready from the back layer to the front one at the model's
backward times. After every event the agent asks the scheduler what to send; each
:class:`~hosts.schedulers.Transfer` is one collective operation:

* parameter server: every segment is pushed as a part of its layer's tensor (tensor id =
  layer index, offsets inside the layer), and the layers are pulled once all are pushed;
* ring all-reduce: the segments are concatenated and all-reduced as one message, then put
  back into their layers (every rank must hand out the same transfers: the schedulers are
  deterministic for a given model).

Transfers are pipelined: a transfer starts when the scheduler hands it out, whether or not
earlier ones are done (``link_idle`` tells the scheduler whether any is in flight), and
their messages share the endpoint's congestion window; ``on_transfer_done`` follows each
one's completion.

Compute is emulated by waiting (``time_scale`` stretches or shrinks it); the gradients are
whatever the caller passes (numpy arrays or torch tensors, via ``.numpy()``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from hosts.endpoint import SendReport
from hosts.errors import TransportError
from hosts.packetize import as_float32
from hosts.ps import PsClient
from hosts.ring import RingAllReduce
from hosts.schedulers import Layer, Scheduler, Transfer, Wait
from hosts.wire import MsgType


@dataclass
class IterationReport:
    """Per-iteration figures, printed and written as one JSON line."""

    iteration: int
    rank: int
    scheduler: str
    collective: str
    iteration_s: float
    compute_s: float
    transfers: int
    bytes: int
    packets: int
    retransmissions: int
    loss_rate: float
    #: share of each tensor's sent values marked drop-eligible (tensor id -> share)
    marked_share: dict[int, float] = field(default_factory=dict)
    #: values this rank's messages lost (zero-filled at their receivers), by magnitude class
    lost_by_class: dict[int, int] = field(default_factory=dict)
    #: packets an answer showed missing that arrived later without a resend (late, not lost)
    reordered: int = 0
    #: values this rank's messages lost at their receivers, by tensor id (reduce stage / pushes)
    lost_by_tensor: dict[int, int] = field(default_factory=dict)
    #: ring: values this rank received in the all-gather stage, and how many of them were lost
    gather_received: int = 0
    gather_lost: int = 0

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


class WorkerAgent:
    """See the module doc."""

    def __init__(
        self,
        layers: Sequence[Layer],
        scheduler: Scheduler,
        collective: PsClient | RingAllReduce,
        *,
        rank: int,
        time_scale: float = 1.0,
        timeout: float = 30.0,
    ) -> None:
        if not layers:
            raise TransportError("the model has no layers")
        self.layers = tuple(layers)
        self.scheduler = scheduler
        self.collective = collective
        self.rank = rank
        self.time_scale = time_scale
        self.timeout = timeout
        self._origin = time.monotonic()

    def _now(self) -> float:
        return time.monotonic() - self._origin

    def run_iteration(self, iteration: int, gradients: Sequence[Any]) -> tuple[list[np.ndarray], IterationReport]:
        """Send this iteration's gradients; return the aggregated ones and the figures."""
        grads = [as_float32(g) for g in gradients]
        if len(grads) != len(self.layers):
            raise TransportError(f"{len(grads)} gradients for a model of {len(self.layers)} layers")
        for layer, g in zip(self.layers, grads):
            if g.size != layer.numel:
                raise TransportError(f"layer {layer.index} ({layer.name}): gradient of {g.size} "
                                     f"elements, the model says {layer.numel}")
        started = self._now()
        time.sleep(sum(l.forward_s for l in self.layers) * self.time_scale)
        backward_start = self._now()
        ready_at = np.cumsum([l.backward_s * self.time_scale for l in reversed(self.layers)])[::-1] + backward_start
        results = [np.zeros(l.numel, np.float32) for l in self.layers]
        sends: list[SendReport] = []
        lost = received = transfers = 0
        gather = [0, 0]  # ring all-gather stage: received, lost
        inflight: list[tuple[Transfer, list[Future[Any]], float]] = []

        def reap(block: float | None) -> None:
            nonlocal lost, received
            if not inflight:
                return
            futures = [f for _, fs, _ in inflight for f in fs]
            if block is not None and not any(f.done() for f in futures):
                wait(futures, timeout=block, return_when=FIRST_COMPLETED)
            for item in list(inflight):
                transfer, fs, began = item
                if not all(f.done() for f in fs):
                    continue
                inflight.remove(item)
                new_sends, l, r = self._finish(transfer, fs, results, gather)
                sends.extend(new_sends)
                lost, received = lost + l, received + r
                took = max(self._now() - began, 1e-9)
                self.scheduler.on_transfer_done(transfer, self._now(), transfer.nbytes / took)

        self.scheduler.start_iteration(self.layers, backward_start)
        next_ready = len(self.layers) - 1
        while True:
            reap(None)
            now = self._now()
            while next_ready >= 0 and ready_at[next_ready] <= now:
                self.scheduler.on_gradient_ready(next_ready, float(ready_at[next_ready]))
                next_ready -= 1
            decision = self.scheduler.next_transfer(now, not inflight)
            if isinstance(decision, Transfer):
                inflight.append((decision, self._start(iteration, transfers, decision, grads), self._now()))
                transfers += 1
                continue
            if decision is None:
                if next_ready >= 0:
                    raise TransportError(f"scheduler {self.scheduler.name!r} finished before layer "
                                         f"{next_ready} was ready")
                break
            assert isinstance(decision, Wait)
            wake = min(decision.until if decision.until is not None else float("inf"),
                       float(ready_at[next_ready]) if next_ready >= 0 else float("inf"))
            if wake == float("inf") and not inflight:
                raise TransportError(f"scheduler {self.scheduler.name!r} waits with nothing left to happen")
            pause = max(0.0, wake - self._now())
            if inflight:
                reap(min(pause, 1.0))
            else:
                time.sleep(pause)
        while inflight:
            reap(1.0)
        if isinstance(self.collective, PsClient):
            for layer in self.layers:
                if layer.numel:
                    got = self.collective.pull(iteration, layer.index, timeout=self.timeout)
                    results[layer.index] = got.values
                    lost += got.values.size - got.received
                    received += got.values.size
        finished = self._now()
        report = IterationReport(
            iteration=iteration, rank=self.rank, scheduler=self.scheduler.name,
            collective="ps" if isinstance(self.collective, PsClient) else "ring",
            iteration_s=finished - started, compute_s=float(ready_at[0]) - started,
            transfers=transfers, bytes=sum(s.payload_bytes for s in sends),
            packets=sum(s.packets for s in sends), retransmissions=sum(s.retransmitted for s in sends),
            loss_rate=lost / received if received else 0.0,
            marked_share=_marked_share(sends), lost_by_class=_lost_by_class(sends),
            reordered=sum(s.reordered for s in sends), lost_by_tensor=_lost_by_tensor(sends),
            gather_received=gather[0], gather_lost=gather[1],
        )
        return results, report

    def _start(self, iteration: int, ordinal: int, transfer: Transfer,
               grads: list[np.ndarray]) -> list[Future[Any]]:
        options: dict[str, Any] = {"prio_hint": transfer.priority, "num_layers": len(self.layers),
                                   "drop_eligible": transfer.loss is not None}
        if transfer.loss is not None:
            options["eligible_share"] = transfer.loss.drop_eligible_share
        segments = [s for s in transfer.segments if s.numel > 0]
        if not segments:
            return []
        if isinstance(self.collective, PsClient):
            return [self.collective.push_async(iteration, s.layer_index, grads[s.layer_index][s.start:s.stop],
                                               start=s.start, tensor_len=self.layers[s.layer_index].numel, **options)
                    for s in segments]
        values = np.concatenate([grads[s.layer_index][s.start:s.stop] for s in segments])
        return [self.collective.allreduce_async(
            values, iteration=iteration, tensor_id=min(s.layer_index for s in segments), part=ordinal,
            timeout=self.timeout, **options)]

    def _finish(self, transfer: Transfer, futures: list[Future[Any]], results: list[np.ndarray],
                gather: list[int]) -> tuple[list[SendReport], int, int]:
        """A transfer's outcome (raises what its messages raised); a ring's all-gather figures
        are added to `gather` (received, lost)."""
        if isinstance(self.collective, PsClient):
            return [f.result() for f in futures], 0, 0
        if not futures:
            return [], 0, 0
        out, ring = futures[0].result()
        at = 0
        for s in transfer.segments:
            if s.numel > 0:
                results[s.layer_index][s.start:s.stop] = out[at:at + s.numel]
                at += s.numel
        gather[0] += ring.gather_received
        gather[1] += ring.gather_lost
        return ring.sends, ring.lost_elements, ring.received_elements


def _marked_share(sends: Sequence[SendReport]) -> dict[int, float]:
    marked: dict[int, int] = {}
    total: dict[int, int] = {}
    for s in sends:
        t = s.key.tensor_id
        marked[t] = marked.get(t, 0) + s.eligible_elements
        total[t] = total.get(t, 0) + s.payload_bytes // 4
    return {t: round(marked[t] / total[t], 6) for t in sorted(total) if total[t]}


def _lost_by_class(sends: Sequence[SendReport]) -> dict[int, int]:
    out: dict[int, int] = {}
    for s in sends:
        for c, n in s.lost_by_class.items():
            out[c] = out.get(c, 0) + n
    return dict(sorted(out.items()))


def _lost_by_tensor(sends: Sequence[SendReport]) -> dict[int, int]:
    out: dict[int, int] = {}
    for s in sends:
        if s.key.kind == MsgType.GRADIENT and s.missing:
            out[s.key.tensor_id] = out.get(s.key.tensor_id, 0) + s.missing
    return dict(sorted(out.items()))
