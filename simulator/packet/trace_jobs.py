"""Trace-driven jobs in simulated time: the trace worker's ranks over ns-3 transports.

The same loop as ``experiments/training/trace_worker.py`` (``TraceRank.run_iteration``), on
the simulation's clock instead of the host's:

* **forward** walks the layers in the order forward first uses them, each taking its
  scaled ``forward_s``; with layer-wise overlap a layer waits, before its forward starts,
  for the previous iteration's result of that layer (the waits are the record's
  ``forward_wait_s``); with DDP overlap every result is in before the iteration ended;
* **backward** starts when forward ends: layer ``i``'s gradient is ready after the backward
  times of the layers behind it; each readiness goes to the rank's own scheduler of
  :mod:`hosts.schedulers` (``fusion``: DDP's buckets, ``p3``, ``dlcp``: partitions, layer
  priority and loss bounds) with the trace worker's options, and every transfer it hands
  out starts at once (no limit on transfers in flight, as the worker's 1,024 threads);
* after backward (and its tail), with DDP overlap or in the last iteration, the rank waits
  for every result, then runs the optimizer step; the next iteration starts at once.

With ``collective="star"`` rank 0 is a parameter server that computes nothing: each transfer
is every worker's push of its values to the server (drop-eligible as a ring's reduce steps)
and, once the server holds all pushes, the server's pull of the sum back to each worker (none
eligible), as ``experiments/training``'s incast runs it. Otherwise a transfer is one ring all-reduce (``2 (N - 1)`` steps, as :class:`JobRun`'s ring), named on
every rank by (iteration, its front layer, its ordinal among that layer's transfers), as
the worker names it on the wire, so ranks that hand transfers out in different orders
still meet. The reduce steps carry the transfer's loss bound and drop-eligible share (the
DLCP scheduler's policies; else the job's bound), the gather steps none. Switch classes
are the experiment's policy rules: the front, middle and back third of ResNet-50's 54
layers 7, 6 and 5 (``layer``), 5 for the whole job (``job``), else 0.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gradfabric.traces import Layer, ModelTrace
from simulator.packet.jobs import Transport, check_ranks
from simulator.packet.runtime import PacketSimulationError

#: ResNet-50's layers as the experiment's policy rules cut them in thirds (trace_configs.NUM_LAYERS).
POLICY_LAYERS = 54
OVERLAPS = ("ddp", "layerwise")
#: ns-3's time step: a wake-up closer than this is now (ns-3 would round it to no delay, and
#: the rank would wait for itself at the same instant forever).
TICK_S = 1e-9


def switch_priority(queues: str, tensor_id: int) -> int:
    """The switch class of a transfer whose front layer is ``tensor_id`` (module doc)."""
    if queues == "layer":
        third = POLICY_LAYERS // 3
        return 7 if tensor_id < third else 6 if tensor_id < 2 * third else 5
    return 5 if queues == "job" else 0


@dataclass
class TraceJobSpec:
    job_id: int
    hosts: tuple[str, ...]
    trace: ModelTrace  # scaled: sizes / b, times x k
    make_scheduler: Callable[[], Any]  # a fresh hosts.schedulers.Scheduler per rank and iteration
    overlap: str
    iterations: int
    grad_bound: float = 0.0
    queues: str = "fifo"  # the switch classes (module doc)
    start_s: float = 0.0
    collective: str = "ring"
    bulk: bool = False  # only makes traffic: done from the start, so the run ends with the measured jobs

    def __post_init__(self) -> None:
        if self.overlap not in OVERLAPS:
            raise PacketSimulationError(f"job {self.job_id}: overlap {self.overlap!r} is not one of {OVERLAPS}")
        if self.collective not in ("ring", "star"):
            raise PacketSimulationError(f"job {self.job_id}: collective {self.collective!r} is not ring or star")
        check_ranks(self.job_id, self.hosts, self.iterations)
        if self.collective == "star" and len(self.hosts) < 2:
            raise PacketSimulationError(f"job {self.job_id}: a parameter server needs a worker besides it")


@dataclass
class _Reduce:
    transfer: Any = None
    sent: int = 0
    received: set[int] = field(default_factory=set)
    done: bool = False


@dataclass
class _Rank:
    index: int
    iteration: int = 0
    started_s: float = 0.0
    clock: float = 0.0
    position: int = 0  # next layer of the forward pass (in forward order)
    waiting_since: float | None = None
    waited_s: float = 0.0
    scheduler: Any = None
    handed_out: bool = False  # the iteration's scheduler has handed out every gradient
    backward_done: bool = False
    flights: int = 0
    poll_at: float = -1.0
    ordinal: dict[int, int] = field(default_factory=dict)
    pending: dict[int, dict[int, int]] = field(default_factory=dict)  # iteration -> layer -> values left
    arrived: dict[int, set[int]] = field(default_factory=dict)  # iteration -> layers with their result
    packets: int = 0
    lost_values: int = 0
    reduced_values: int = 0
    mark: tuple[int, int, int] = (0, 0, 0)  # packets, lost, reduced at the iteration's start
    records: list[dict[str, Any]] = field(default_factory=list)


class TraceJobRun:
    """One trace-driven job's ranks (module doc); the interface of :class:`~simulator.packet.jobs.JobRun`."""

    _ids = itertools.count(1 << 24)

    def __init__(self, spec: TraceJobSpec, transport: Transport, schedule: Callable[[float, Callable[[], None]], None],
                 now: Callable[[], float], messages: dict[int, tuple[Any, int, Any, int, int, int]]) -> None:
        self.spec = spec
        self.transport = transport
        self.schedule = schedule
        self.now = now
        self.messages = messages
        self.n = len(spec.hosts)
        self.layers: tuple[Layer, ...] = spec.trace.layers
        self.order = list(spec.trace.forward_order) if spec.trace.forward_order else list(range(len(self.layers)))
        self.ranks = [_Rank(r) for r in range(self.n)]
        self.state: dict[tuple[int, int, int, int], _Reduce] = {}  # (rank, iteration, tid, part)
        self.star = spec.collective == "star"
        self.workers = self.ranks[1:] if self.star else self.ranks  # a star's rank 0 serves
        self.pushes: dict[tuple[int, int, int], dict[int, int]] = {}  # star: (iteration, tid, part) -> worker -> values
        self.finished_ranks = 0
        t = spec.trace
        self.backward_s = sum(l.backward_s for l in self.layers) + t.backward_tail_s
        self.compute_s = sum(l.forward_s + l.backward_s for l in self.layers) + t.backward_tail_s + (
            t.optimizer_s if spec.overlap == "ddp" else 0.0)

    @property
    def done(self) -> bool:
        return self.spec.bulk or self.finished_ranks == len(self.workers)

    def start(self) -> None:
        for rank in self.workers:
            self.schedule(self.spec.start_s, lambda r=rank: self._iteration(r))

    # -- the compute loop ------------------------------------------------------------
    def _iteration(self, rank: _Rank) -> None:
        now = self.now()
        rank.started_s = rank.clock = now
        rank.position, rank.waited_s, rank.waiting_since = 0, 0.0, None
        rank.mark = (rank.packets, rank.lost_values, rank.reduced_values)
        rank.pending[rank.iteration] = {l.index: l.numel for l in self.layers}
        rank.arrived.setdefault(rank.iteration, set()).update(l.index for l in self.layers if l.numel == 0)
        self._forward(rank)

    def _forward(self, rank: _Rank) -> None:
        now = self.now()
        if rank.waiting_since is not None:
            rank.waited_s += now - rank.waiting_since
            rank.waiting_since = None
            rank.clock = max(rank.clock, now)
        previous = rank.arrived.get(rank.iteration - 1, set())
        while rank.position < len(self.order):
            idx = self.order[rank.position]
            if rank.iteration > 0 and idx not in previous:
                if rank.clock > now + TICK_S:  # check when this layer's forward would start
                    self.schedule(rank.clock - now, lambda: self._forward(rank))
                else:
                    rank.waiting_since = now
                return
            rank.clock += self.layers[idx].forward_s
            rank.position += 1
        rank.position += 1  # past the end: forward is over
        self.schedule(max(0.0, rank.clock - now), lambda: self._backward(rank))

    def _backward(self, rank: _Rank) -> None:
        b0 = self.now()
        rank.arrived.pop(rank.iteration - 2, None)
        rank.scheduler = self.spec.make_scheduler()
        rank.scheduler.start_iteration(self.layers, b0)
        rank.handed_out = rank.backward_done = False
        rank.ordinal = {}
        elapsed = 0.0
        iteration = rank.iteration
        for layer in reversed(self.layers):
            elapsed += layer.backward_s
            self.schedule(elapsed, lambda i=layer.index: self._ready(rank, iteration, i))
        self.schedule(self.backward_s, lambda: self._backward_end(rank))

    def _ready(self, rank: _Rank, iteration: int, layer: int) -> None:
        rank.scheduler.on_gradient_ready(layer, self.now())
        self._drive(rank)

    def _drive(self, rank: _Rank) -> None:
        """Hand out what the scheduler says to send now (the worker's loop)."""
        from hosts.schedulers import Transfer

        if rank.handed_out or rank.scheduler is None:
            return
        now = self.now()
        while True:
            decision = rank.scheduler.next_transfer(now, rank.flights == 0)
            if isinstance(decision, Transfer):
                self._launch(rank, decision)
                continue
            if decision is None:
                rank.handed_out = True
                self._maybe_end(rank)
                return
            until = decision.until
            if until is not None and until > now + TICK_S and not (now < rank.poll_at <= until):
                rank.poll_at = until
                self.schedule(until - now, lambda: self._drive(rank))
            return

    def _backward_end(self, rank: _Rank) -> None:
        rank.backward_done = True
        self._maybe_end(rank)

    def _maybe_end(self, rank: _Rank) -> None:
        if not (rank.backward_done and rank.handed_out):
            return
        last = rank.iteration == self.spec.iterations - 1
        if self.spec.overlap == "ddp" or last:
            if len(rank.arrived.get(rank.iteration, ())) < len(self.layers):
                return  # _arrive calls again
            rank.backward_done = False
            self.schedule(self.spec.trace.optimizer_s, lambda: self._end(rank))
        else:
            rank.backward_done = False
            self._end(rank)

    def _end(self, rank: _Rank) -> None:
        now = self.now()
        packets, lost, reduced = rank.mark
        rank.records.append({
            "iteration": rank.iteration, "rank": rank.index, "iteration_s": now - rank.started_s,
            "started_s": rank.started_s - self.spec.start_s, "ended_s": now - self.spec.start_s,
            "compute_s": self.compute_s, "forward_wait_s": rank.waited_s, "packets": rank.packets - packets,
            "lost": rank.lost_values - lost, "reduced": rank.reduced_values - reduced,
            "loss_rate": (rank.lost_values - lost) / max(1, rank.reduced_values - reduced), "retransmitted": 0})
        rank.iteration += 1
        if rank.iteration < self.spec.iterations:
            self._iteration(rank)
        else:
            self.finished_ranks += 1

    # -- collectives -----------------------------------------------------------------
    def _launch(self, rank: _Rank, transfer: Any) -> None:
        segments = [s for s in transfer.segments if s.numel > 0]
        if not segments:
            return
        tid = min(s.layer_index for s in segments)
        part = rank.ordinal.get(tid, 0)
        rank.ordinal[tid] = part + 1
        st = self.state.setdefault((rank.index, rank.iteration, tid, part), _Reduce())
        st.transfer = transfer
        rank.flights += 1
        self._advance(rank.index, rank.iteration, tid, part)

    def _advance(self, r: int, iteration: int, tid: int, part: int) -> None:
        st = self.state.get((r, iteration, tid, part))
        if st is None or st.transfer is None or st.done:
            return
        if self.star:
            self._star_advance(r, iteration, tid, part, st)
            return
        steps = 2 * (self.n - 1)
        transfer = st.transfer
        numel = sum(s.numel for s in transfer.segments)
        bounds = [numel * i // self.n for i in range(self.n + 1)]
        loss = transfer.loss
        share = loss.drop_eligible_share if loss is not None else self.spec.grad_bound
        bound = loss.loss_bound if loss is not None else self.spec.grad_bound
        while st.sent < steps and (st.sent == 0 or st.sent - 1 in st.received):
            s = st.sent
            st.sent += 1
            gather = s >= self.n - 1
            chunk = (r + 1 - (s - self.n + 1)) % self.n if gather else (r - s) % self.n
            values = max(1, bounds[chunk + 1] - bounds[chunk])
            msg = next(self._ids)
            self.messages[msg] = (self, iteration, (tid, part), s, r, (r + 1) % self.n)
            self.transport.send(self.spec.hosts[r], self.spec.hosts[(r + 1) % self.n], msg, values,
                                switch_priority(self.spec.queues, tid), int(transfer.priority),
                                0.0 if gather else bound, eligible=0.0 if gather else share)
        if len(st.received) == steps:
            st.done = True
            self._transfer_done(self.ranks[r], iteration, st.transfer)
            del self.state[(r, iteration, tid, part)]

    def _star_advance(self, r: int, iteration: int, tid: int, part: int, st: _Reduce) -> None:
        """A worker's push (step 0) once handed out; done when the server's pull (step 1) is in."""
        transfer = st.transfer
        if st.sent == 0:
            st.sent = 1
            loss = transfer.loss
            share = loss.drop_eligible_share if loss is not None else self.spec.grad_bound
            bound = loss.loss_bound if loss is not None else self.spec.grad_bound
            values = max(1, sum(s.numel for s in transfer.segments))
            msg = next(self._ids)
            self.messages[msg] = (self, iteration, (tid, part), 0, r, 0)
            self.transport.send(self.spec.hosts[r], self.spec.hosts[0], msg, values,
                                switch_priority(self.spec.queues, tid), int(transfer.priority), bound, eligible=share)
        if 1 in st.received:
            st.done = True
            self._transfer_done(self.ranks[r], iteration, transfer)
            del self.state[(r, iteration, tid, part)]

    def _serve(self, iteration: int, key: tuple[int, int], src: int, values: int) -> None:
        """The server holds ``src``'s push; with every worker's, it sends the sum back to each."""
        tid, part = key
        held = self.pushes.setdefault((iteration, tid, part), {})
        held[src] = values
        if len(held) < len(self.workers):
            return
        del self.pushes[(iteration, tid, part)]
        for w, size in sorted(held.items()):
            msg = next(self._ids)
            self.messages[msg] = (self, iteration, key, 1, 0, w)
            self.transport.send(self.spec.hosts[0], self.spec.hosts[w], msg, size,
                                switch_priority(self.spec.queues, tid), 0, 0.0, eligible=0.0)

    def _transfer_done(self, rank: _Rank, iteration: int, transfer: Any) -> None:
        rank.flights -= 1
        pending = rank.pending[iteration]
        arrived = rank.arrived.setdefault(iteration, set())
        for seg in transfer.segments:
            pending[seg.layer_index] -= seg.numel
            if pending[seg.layer_index] == 0:
                arrived.add(seg.layer_index)
        if rank.waiting_since is not None and rank.iteration == iteration + 1:
            self._forward(rank)
        if iteration == rank.iteration:
            if rank.scheduler is not None:
                rank.scheduler.on_transfer_done(transfer, self.now(), 0.0)
            self._maybe_end(rank)
        self._drive(rank)

    def delivered(self, iteration: int, key: tuple[int, int], step: int, src: int, dst: int, values: int, lost: int,
                  packets: int) -> None:
        """A ring step's (a star's push or pull) message arrived at ``dst`` (``lost`` values
        zero-filled) from ``src``."""
        self.ranks[src].packets += packets
        if self.star:
            if step == 0:  # a push: the server reduces it
                self.ranks[src].reduced_values += values
                self.ranks[src].lost_values += lost
                self._serve(iteration, key, src, values)
                return
            tid, part = key
            self.state.setdefault((dst, iteration, tid, part), _Reduce()).received.add(step)
            self._advance(dst, iteration, tid, part)
            return
        if step < self.n - 1:
            self.ranks[dst].reduced_values += values
            self.ranks[dst].lost_values += lost
        tid, part = key
        self.state.setdefault((dst, iteration, tid, part), _Reduce()).received.add(step)
        self._advance(dst, iteration, tid, part)
