"""Event-driven iteration-time engine: drives a scheduler from :mod:`hosts.schedulers` in
simulated time.

One worker's view of data-parallel training (all workers are symmetric):

* Forward of layer ``l`` takes ``forward_s``; backward runs from the last layer down and
  layer ``l``'s gradient is ready ``backward_s`` after the previous one. Compute is one
  serial resource: an iteration's forward starts after the previous backward ends.
* Communication is one serial resource (the *link*): each :class:`Transfer` the scheduler
  hands out holds the link for ``link.seconds(t)`` (a whole ring all-reduce, or the push of
  a PS transfer). Transfers handed out while the link is busy queue; the queue is served by
  priority (higher first), then in hand-out order, never preempting the transfer in flight.
* A transfer *completes* ``link.round_trip_s(t)`` after it leaves the link (0 for a ring;
  server aggregation plus the pull for a PS). The link is free meanwhile. Only at completion
  is the layer updated; the scheduler hears ``on_transfer_done`` (a credit returns) then too,
  or ``link.credit_s(t)`` after the transfer left the link where the link has that method (a
  PS whose pushes are acknowledged before their pulls come back; never after completion).
* A layer's gradient is reduced when the last transfer carrying part of it completes; its
  parameters are updated then, by the optimizer (``optimizer_s`` for all layers, each layer
  its share by elements). The optimizer runs on the compute resource, after backward: when
  the next forward needs a layer whose update has not run, compute runs the reduced layers'
  updates, the most urgent (earliest in forward) first, or waits for the next reduction.
  With ``overlap_forward`` (P3/ByteScheduler/DLCP style) the next forward of layer ``l``
  waits only for layer ``l``'s update; without it (Caffe, the MG-WFBP testbed) the next
  forward waits for every update. ``forward_order`` is the order forward uses the layers
  (index order unless a measured trace says otherwise); ``backward_tail_s`` is backward
  compute after the last gradient.
* The iteration time is the steady-state distance between consecutive backward starts,
  averaged over the iterations after the first (which schedulers such as ``prophet`` use
  to profile).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from hosts.schedulers import Layer, Scheduler, Transfer, Wait, covered_numel
from simulator.errors import SimulatorError


#: Shortest transfer duration a scheduler is told about (a one-worker "collective" is free).
MIN_DURATION_S = 1e-9


class Link(Protocol):
    """How long one transfer (one collective) takes on the cluster."""

    def seconds(self, transfer: Transfer) -> float:
        """How long the transfer holds the link."""
        ...

    def round_trip_s(self, transfer: Transfer) -> float:
        """From leaving the link to completion (aggregation and pull), link free meanwhile."""
        ...


@dataclass(frozen=True)
class TransferRecord:
    """A transfer as it happened, times relative to the iteration's backward start: it held
    the link from ``start`` to ``end`` and completed (credit back, update) at ``done``."""

    transfer: Transfer
    handed_out: float
    start: float
    end: float
    done: float


@dataclass(frozen=True)
class IterationTrace:
    """One simulated iteration; times are relative to its backward start."""

    backward_start: float
    backward_s: float
    comm_end: float
    layer_update: tuple[float, ...]
    transfers: tuple[TransferRecord, ...]

    @property
    def link_busy_s(self) -> float:
        return sum(r.end - r.start for r in self.transfers)

    @property
    def link_idle_s(self) -> float:
        """Idle link time between the first transfer and the end of communication (the last
        completion, so a PS pull still under way counts as idle link)."""
        if not self.transfers:
            return 0.0
        first_start = min(r.start for r in self.transfers)
        return max(0.0, self.comm_end - first_start - self.link_busy_s)

    @property
    def first_layer_update(self) -> float:
        """When layer 0's update ends: the earliest the next forward can start."""
        return self.layer_update[0]


@dataclass(frozen=True)
class SimResult:
    """Steady-state figures of one scheduler on one cluster."""

    scheduler: str
    iteration_s: float
    iterations: tuple[IterationTrace, ...]

    @property
    def steady(self) -> IterationTrace:
        """The last iteration with a successor (the one whose time is measured)."""
        return self.iterations[-2] if len(self.iterations) > 1 else self.iterations[-1]


def _run_backward(scheduler: Scheduler, layers: Sequence[Layer], link: Link) -> IterationTrace:
    """One backward pass with its communication, starting at time 0."""
    n = len(layers)
    ready_at = [0.0] * n
    t = 0.0
    for l in range(n - 1, -1, -1):
        t += layers[l].backward_s
        ready_at[l] = t
    backward_s = t
    order = list(range(n - 1, -1, -1))  # arrival order
    scheduler.start_iteration(layers, 0.0)

    now = 0.0
    next_grad = 0
    queue: list[tuple[int, int, Transfer, float]] = []  # (-priority, seq, transfer, handed_out)
    seq = 0
    current: tuple[Transfer, float, float, float] | None = None  # transfer, handed, start, end
    returning: list[tuple[float, int, TransferRecord]] = []  # (done, seq, record): left the link
    credits: list[tuple[float, int, TransferRecord]] = []  # (credit back, seq, record)
    credit_s = getattr(link, "credit_s", link.round_trip_s)
    wait_until: float | None = None
    handed_all = False
    records: list[TransferRecord] = []
    update = [0.0] * n

    def start_next(at: float) -> None:
        nonlocal current
        if queue and current is None:
            _, _, transfer, handed = heapq.heappop(queue)
            current = (transfer, handed, at, at + link.seconds(transfer))

    while True:
        # Completions at `now` first, then gradients, then ask the scheduler.
        if current is not None and current[3] <= now:
            transfer, handed, start, end = current
            current = None
            done = end + link.round_trip_s(transfer)
            record = TransferRecord(transfer, handed, start, end, done)
            heapq.heappush(returning, (done, transfer.id, record))
            heapq.heappush(credits, (min(done, end + credit_s(transfer)), transfer.id, record))
            start_next(end)
        while returning and returning[0][0] <= now:
            done, _, record = heapq.heappop(returning)
            records.append(record)
            for i in record.transfer.layer_indices:
                update[i] = max(update[i], done)
        while credits and credits[0][0] <= now:
            back, _, record = heapq.heappop(credits)
            duration = record.end - record.start
            # A free link (one worker) reports a finite rate: schedulers multiply it by gaps.
            rate = record.transfer.nbytes / max(duration, MIN_DURATION_S)
            scheduler.on_transfer_done(record.transfer, back, rate)
        while next_grad < n and ready_at[order[next_grad]] <= now:
            scheduler.on_gradient_ready(order[next_grad], ready_at[order[next_grad]])
            next_grad += 1
        if wait_until is not None and wait_until <= now:
            wait_until = None
        if not handed_all:
            while True:
                decision = scheduler.next_transfer(now, current is None and not queue)
                if isinstance(decision, Transfer):
                    heapq.heappush(queue, (-decision.priority, seq, decision, now))
                    seq += 1
                    start_next(now)
                    continue
                if decision is None:
                    handed_all = True
                elif isinstance(decision, Wait) and decision.until is not None and decision.until > now:
                    wait_until = decision.until if wait_until is None else min(wait_until, decision.until)
                break
        candidates = []
        if current is not None:
            candidates.append(current[3])
        if returning:
            candidates.append(returning[0][0])
        if credits:
            candidates.append(credits[0][0])
        if next_grad < n:
            candidates.append(ready_at[order[next_grad]])
        if wait_until is not None:
            candidates.append(wait_until)
        if not candidates:
            if handed_all and not queue and not returning:
                break
            raise SimulatorError(
                f"scheduler {scheduler.name!r} stalled at t={now:.6f}s: it waits, but no gradient, "
                "transfer or timer is pending"
            )
        now = max(now, min(candidates))

    covered = covered_numel(r.transfer for r in records)
    for layer in layers:
        if covered.get(layer.index, 0) != layer.numel:
            raise SimulatorError(
                f"scheduler {scheduler.name!r} sent {covered.get(layer.index, 0)} of "
                f"{layer.numel} elements of layer {layer.index} ({layer.name})"
            )
    comm_end = max((r.done for r in records), default=backward_s)
    return IterationTrace(0.0, backward_s, max(comm_end, backward_s), tuple(update), tuple(records))


def _forward_with_updates(start: float, reduced: Sequence[float], forward: Sequence[float], order: Sequence[int],
                          optimizer: Sequence[float]) -> float:
    """When the next backward starts: compute is free at ``start``; layer ``l`` is reduced
    at ``reduced[l]``, its update takes ``optimizer[l]`` and its forward ``forward[l]``;
    forward runs through ``order`` and each layer needs its own update first."""
    position = [0] * len(order)
    for j, l in enumerate(order):
        position[l] = j
    pending = sorted(range(len(order)), key=lambda l: (reduced[l], position[l]))  # not yet reduced, by time
    available: list[tuple[int, int]] = []  # (forward position, layer): reduced, update not run
    updated = [False] * len(order)
    t, p = start, 0
    for l in order:
        while not updated[l]:
            while p < len(pending) and reduced[pending[p]] <= t:
                heapq.heappush(available, (position[pending[p]], pending[p]))
                p += 1
            if not available:
                t = reduced[pending[p]]
                continue
            _, u = heapq.heappop(available)
            t += optimizer[u]
            updated[u] = True
        t += forward[l]
    return t


def simulate(
    layers: Sequence[Layer],
    scheduler: Scheduler,
    link: Link,
    *,
    iterations: int = 4,
    overlap_forward: bool = True,
    forward_order: Sequence[int] | None = None,
    backward_tail_s: float = 0.0,
    optimizer_s: float = 0.0,
) -> SimResult:
    """Run ``iterations`` training iterations and return the steady-state iteration time."""
    if not layers:
        raise SimulatorError("the model has no layers")
    if iterations < 2:
        raise SimulatorError("simulate at least 2 iterations (the first one profiles)")
    layers = list(layers)
    for i, layer in enumerate(layers):
        if layer.index != i:
            raise SimulatorError(f"layer {layer.name!r} has index {layer.index}, expected {i}")
    order = list(range(len(layers))) if forward_order is None else list(forward_order)
    if sorted(order) != list(range(len(layers))):
        raise SimulatorError(f"forward_order must list each of the {len(layers)} layers once")
    if backward_tail_s < 0 or optimizer_s < 0:
        raise SimulatorError(f"negative backward tail ({backward_tail_s} s) or optimizer time ({optimizer_s} s)")
    forward = [layer.forward_s for layer in layers]
    total_numel = sum(layer.numel for layer in layers) or 1
    optimizer = [optimizer_s * layer.numel / total_numel for layer in layers]
    compute_free = 0.0
    update_abs = [0.0] * len(layers)
    backward_starts: list[float] = []
    traces: list[IterationTrace] = []
    for _ in range(iterations):
        if optimizer_s > 0 and overlap_forward:
            t = _forward_with_updates(compute_free, update_abs, forward, order, optimizer)
        elif optimizer_s > 0:
            t = compute_free
            for u in sorted(range(len(layers)), key=lambda l: update_abs[l]):
                t = max(t, update_abs[u]) + optimizer[u]
            t += sum(forward)
        elif overlap_forward:
            t = compute_free
            for l in order:
                t = max(t, update_abs[l]) + forward[l]
        else:
            t = max(compute_free, max(update_abs)) + sum(forward)
        bstart = t
        trace = _run_backward(scheduler, layers, link)
        trace = IterationTrace(bstart, trace.backward_s + backward_tail_s, max(trace.comm_end, trace.backward_s +
                               backward_tail_s), trace.layer_update, trace.transfers)
        update_abs = [bstart + u for u in trace.layer_update]
        compute_free = bstart + trace.backward_s
        backward_starts.append(bstart)
        traces.append(trace)
    steps = [b - a for a, b in zip(backward_starts[1:], backward_starts[2:])] or [
        backward_starts[1] - backward_starts[0]
    ]
    return SimResult(scheduler.name, sum(steps) / len(steps), tuple(traces))
