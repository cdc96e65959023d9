"""Data-parallel jobs in simulated time: compute, bucket ordering and collectives.

Each rank loops over iterations as DDP does: forward (``forward_s``), then backward, during
which each bucket becomes ready at its ``ready_s``; a ready bucket starts its all-reduce as
soon as fewer than ``in_flight`` of the rank's buckets are being reduced (the DLCP hook's
sender threads); the optimizer step runs once backward has ended and every bucket is
reduced, and the next iteration starts after it. An iteration's time runs from its forward's
start to its optimizer step's end, as the fabric's ranks record it.

Collectives, over messages of the transports (:class:`Transport`):

* ring: ``2 (N - 1)`` steps; at step ``s`` rank ``r`` sends chunk ``(r - s) mod N`` of the
  bucket to rank ``r + 1``, once its own bucket is ready and it has received step ``s - 1``.
  The first ``N - 1`` steps reduce (loss bound ``grad_bound``, that share of packets
  drop-eligible), the rest gather (reliable).
* star: every worker sends its bucket to rank 0 (bounded); rank 0, with its own bucket
  ready and every worker's received, sends the mean back to each (reliable); rank 0's
  bucket is done when every worker has it.

Host order (``ordering``): ``wfbp`` sends messages in the order they are handed out (what
the fabric's DDP hook does); ``p3`` and ``dlcp`` send front layers first (higher layer
priority first), packet chunk by packet chunk, so an urgent bucket overtakes a long one.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from simulator.packet.runtime import PacketSimulationError
from simulator.packet.workload import Workload

ORDERINGS = ("wfbp", "p3", "dlcp")


class Transport(Protocol):
    """Sends one message between hosts; the simulation calls back on delivery."""

    def send(self, src: str, dst: str, msg: int, values: int, priority: int, urgency: int, bound: float) -> None: ...


def check_ranks(job_id: int, hosts: tuple[str, ...], iterations: int) -> None:
    """A job's ranks and length as every job kind needs them (PacketSimulationError otherwise)."""
    if len(hosts) < 2 or len(set(hosts)) != len(hosts):
        raise PacketSimulationError(f"job {job_id}: needs two or more distinct hosts (got {hosts})")
    if iterations < 1:
        raise PacketSimulationError(f"job {job_id}: iterations must be positive (got {iterations})")


@dataclass
class JobSpec:
    job_id: int
    hosts: tuple[str, ...]
    collective: str
    workload: Workload
    iterations: int
    grad_bound: float = 0.0
    priorities: str = "fifo"  # "fifo" (0), "job" (5) or "layer"
    ordering: str = "wfbp"
    in_flight: int = 4
    start_s: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.collective not in ("ring", "star"):
            raise PacketSimulationError(f"job {self.job_id}: collective {self.collective!r} is not ring or star")
        if self.ordering not in ORDERINGS:
            raise PacketSimulationError(f"job {self.job_id}: ordering {self.ordering!r} is not one of {ORDERINGS}")
        check_ranks(self.job_id, self.hosts, self.iterations)
        if self.in_flight < 1:
            raise PacketSimulationError(f"job {self.job_id}: in_flight must be positive (got {self.in_flight})")


@dataclass
class _Reduce:
    """One bucket's collective at one rank in one iteration."""

    launched: bool = False
    sent: int = 0
    received: set[int] = field(default_factory=set)
    delivered: int = 0  # star server: results the workers have
    done: bool = False


@dataclass
class _Rank:
    index: int
    iteration: int = 0
    started_s: float = 0.0
    backward_done: bool = False
    pending: list[int] = field(default_factory=list)
    active: int = 0
    finished: int = 0
    packets: int = 0
    lost_values: int = 0
    reduced_values: int = 0
    records: list[dict[str, Any]] = field(default_factory=list)


class JobRun:
    """One job's ranks driven by ``schedule(delay_s, fn)`` and ``now()`` (module doc)."""

    _ids = itertools.count(1)

    def __init__(self, spec: JobSpec, transport: Transport, schedule: Callable[[float, Callable[[], None]], None],
                 now: Callable[[], float], messages: dict[int, tuple[JobRun, int, int, int, int, int]]) -> None:
        self.spec = spec
        self.transport = transport
        self.schedule = schedule
        self.now = now
        self.messages = messages  # message id -> (job, iteration, bucket, step, src rank, dst rank)
        self.n = len(spec.hosts)
        self.ranks = [_Rank(r) for r in range(self.n)]
        self.state: dict[tuple[int, int, int], _Reduce] = {}
        self.finished_ranks = 0
        self.rng = random.Random(spec.job_id * 7919 + spec.seed)
        self.stretch = [1.0] * self.n

    # -- the compute loop ------------------------------------------------------------
    def start(self) -> None:
        for rank in self.ranks:
            self.schedule(self.spec.start_s, lambda r=rank: self._iteration(r))

    def _iteration(self, rank: _Rank) -> None:
        rank.started_s = self.now()
        rank.backward_done = False
        rank.finished = 0
        wl = self.spec.workload
        k = self.rng.choice(wl.host_samples) / wl.compute_s if wl.host_samples else 1.0
        self.stretch[rank.index] = k
        for b, bucket in enumerate(wl.buckets):
            self.schedule(k * (wl.forward_s + bucket.ready_s), lambda r=rank, b=b: self._ready(r, b))
        self.schedule(k * (wl.forward_s + wl.backward_s), lambda r=rank: self._backward_end(r))

    def _ready(self, rank: _Rank, b: int) -> None:
        rank.pending.append(b)
        self._launch(rank)

    def _launch(self, rank: _Rank) -> None:
        while rank.pending and rank.active < self.spec.in_flight:
            b = rank.pending.pop(0)
            rank.active += 1
            st = self._st(rank.index, rank.iteration, b)
            st.launched = True
            self._advance(rank.index, rank.iteration, b)

    def _backward_end(self, rank: _Rank) -> None:
        rank.backward_done = True
        self._maybe_step(rank)

    def _maybe_step(self, rank: _Rank) -> None:
        if rank.backward_done and rank.finished == len(self.spec.workload.buckets):
            rank.backward_done = False
            self.schedule(self.stretch[rank.index] * self.spec.workload.optimizer_s, lambda: self._end(rank))

    def _end(self, rank: _Rank) -> None:
        now = self.now()
        rank.records.append({"iteration": rank.iteration, "iteration_s": now - rank.started_s,
                             "wall_s": now - self.spec.start_s, "rank": rank.index, "packets": rank.packets,
                             "loss_rate": rank.lost_values / rank.reduced_values if rank.reduced_values else 0.0,
                             "retransmitted": 0, "accuracy": None, "loss": None})
        rank.packets = 0
        for b in range(len(self.spec.workload.buckets)):
            self.state.pop((rank.index, rank.iteration, b), None)
        rank.iteration += 1
        if rank.iteration < self.spec.iterations:
            self._iteration(rank)
        else:
            self.finished_ranks += 1

    @property
    def done(self) -> bool:
        return self.finished_ranks == self.n

    # -- collectives -----------------------------------------------------------------
    def _st(self, rank: int, iteration: int, b: int) -> _Reduce:
        return self.state.setdefault((rank, iteration, b), _Reduce())

    def _priority(self, b: int) -> int:
        if self.spec.priorities == "fifo":
            return 0
        if self.spec.priorities == "job":
            return 5
        return self.spec.workload.buckets[b].priority

    def _urgency(self, b: int) -> int:
        return 0 if self.spec.ordering == "wfbp" else self.spec.workload.buckets[b].priority

    def _send(self, src: int, dst: int, iteration: int, b: int, step: int, values: int, bound: float) -> None:
        msg = next(self._ids)
        self.messages[msg] = (self, iteration, b, step, src, dst)
        self.transport.send(self.spec.hosts[src], self.spec.hosts[dst], msg, values, self._priority(b),
                            self._urgency(b), bound)

    def _chunk(self, b: int, index: int) -> int:
        numel = self.spec.workload.buckets[b].numel
        base, extra = divmod(numel, self.n)
        return max(1, base + (1 if index < extra else 0))

    def _advance(self, rank: int, iteration: int, b: int) -> None:
        st = self._st(rank, iteration, b)
        if not st.launched or st.done:
            return
        if self.spec.collective == "ring":
            steps = 2 * (self.n - 1)
            while st.sent < steps and (st.sent == 0 or st.sent - 1 in st.received):
                s = st.sent
                st.sent += 1
                bound = self.spec.grad_bound if s < self.n - 1 else 0.0
                self._send(rank, (rank + 1) % self.n, iteration, b, s, self._chunk(b, (rank - s) % self.n), bound)
            if len(st.received) == steps:
                self._bucket_done(rank, iteration, b)
        elif rank != 0:
            if st.sent == 0:
                st.sent = 1
                self._send(rank, 0, iteration, b, 0, self.spec.workload.buckets[b].numel, self.spec.grad_bound)
            if 1 in st.received:
                self._bucket_done(rank, iteration, b)
        else:
            if st.sent == 0 and len(st.received) == self.n - 1:
                st.sent = 1
                for worker in range(1, self.n):
                    self._send(0, worker, iteration, b, 1, self.spec.workload.buckets[b].numel, 0.0)
            if st.delivered == self.n - 1:
                self._bucket_done(rank, iteration, b)

    def _bucket_done(self, rank: int, iteration: int, b: int) -> None:
        st = self._st(rank, iteration, b)
        st.done = True
        r = self.ranks[rank]
        r.active -= 1
        r.finished += 1
        self._launch(r)
        self._maybe_step(r)

    def delivered(self, iteration: int, b: int, step: int, src: int, dst: int, values: int, lost: int,
                  packets: int) -> None:
        """A message arrived at ``dst`` (``lost`` values zero-filled) from ``src``."""
        self.ranks[src].packets += packets
        stage_reduce = (step < self.n - 1) if self.spec.collective == "ring" else step == 0
        if stage_reduce:
            self.ranks[dst].reduced_values += values
            self.ranks[dst].lost_values += lost
        if self.spec.collective == "star":
            if dst == 0:
                self._st(0, iteration, b).received.add(src)
                self._advance(0, iteration, b)
            else:
                self._st(dst, iteration, b).received.add(1)
                self._st(0, iteration, b).delivered += 1
                self._advance(dst, iteration, b)
                self._advance(0, iteration, b)
            return
        self._st(dst, iteration, b).received.add(step)
        self._advance(dst, iteration, b)
