"""Prophet (Zhang, Qi, Shang, Chen, Xu; ICPP 2021): block sending in the gaps of the
stepwise gradient pattern.

* Profile: the first iteration records when each gradient arrives (it sends like ``p3``
  meanwhile). A gap between consecutive arrivals larger than ``gap_factor`` (2) times the
  mean gap ends a stage; each such gap's length is remembered.
* Bandwidth ``B`` starts at ``initial_bandwidth`` (bytes/s) and rises to the best throughput
  a finished transfer achieved.
* When the last gradient of stage ``k`` arrives, one block of queued gradients is sent in
  priority order (front layer first), at most ``gap_k * B`` bytes, then the scheduler waits
  for the next stage. A block is sent outside the credit (it does not hold credit back
  while its pull is under way). Once layer 0's gradient has arrived it falls back to
  credit-based sending of partitions, as ``p3`` does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hosts.schedulers.base import Decision, Layer, SchedulerError, Transfer, Wait
from hosts.schedulers.priority import PriorityScheduler
from hosts.schedulers.registry import register

#: 10 Gbit/s in bytes per second.
TEN_GBIT_BYTES_PER_S = 1.25e9


@dataclass(frozen=True)
class StageProfile:
    """Stages of the gradient arrival pattern: layer indices per stage in arrival order,
    and the gap (seconds) after each stage but the last."""

    stages: tuple[tuple[int, ...], ...]
    gaps: tuple[float, ...]


def profile_stages(arrivals: Sequence[tuple[int, float]], gap_factor: float = 2.0) -> StageProfile:
    """Cut ``(layer_index, time)`` arrivals (in arrival order) into stages."""
    if not arrivals:
        raise SchedulerError("prophet: no gradient arrivals to profile")
    times = [t for _, t in arrivals]
    gaps = [b - a for a, b in zip(times, times[1:])]
    mean_gap = sum(gaps) / len(gaps) if gaps else 0.0
    stages: list[tuple[int, ...]] = []
    stage_gaps: list[float] = []
    current: list[int] = [arrivals[0][0]]
    for (layer_index, _), gap in zip(arrivals[1:], gaps):
        if gap > gap_factor * mean_gap:
            stages.append(tuple(current))
            stage_gaps.append(gap)
            current = []
        current.append(layer_index)
    stages.append(tuple(current))
    return StageProfile(tuple(stages), tuple(stage_gaps))


@register("prophet")
class ProphetScheduler(PriorityScheduler):
    """Options: ``initial_bandwidth`` (bytes/s; default ``1 / cost.beta``, the nominal rate
    of the collective, or 10 Gbit/s without a cost model), ``gap_factor`` (2.0),
    ``profile`` (a :class:`StageProfile` to skip the profiling iteration), and the
    ``partition_bytes``/``credit_bytes`` of the credit-based fallback."""

    def __init__(
        self,
        *,
        initial_bandwidth: float | None = None,
        gap_factor: float = 2.0,
        profile: StageProfile | None = None,
        **kwargs: object,
    ) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        if initial_bandwidth is None:
            cost = self.cost
            initial_bandwidth = 1.0 / cost.beta if cost is not None and cost.beta > 0 else TEN_GBIT_BYTES_PER_S
        if initial_bandwidth <= 0:
            raise SchedulerError("prophet: initial_bandwidth must be positive")
        self.bandwidth = initial_bandwidth
        self.gap_factor = gap_factor
        self.profile = profile
        self._arrivals: list[tuple[int, float]] = []
        self._t0 = 0.0
        self._stage_of: dict[int, int] = {}
        self._stage_left: list[int] = []
        self._block_budget_bytes = 0.0
        self._fallback = False

    def start_iteration(self, layers: Sequence[Layer], now: float) -> None:
        if self.profile is None and self._arrivals:
            self.profile = profile_stages(self._arrivals, self.gap_factor)
        super().start_iteration(layers, now)
        self._arrivals = []
        self._t0 = now
        self._block_budget_bytes = 0.0
        self._fallback = self.profile is None
        if self.profile is not None:
            self._stage_of = {i: k for k, stage in enumerate(self.profile.stages) for i in stage}
            self._stage_left = [len(stage) for stage in self.profile.stages]

    def on_gradient_ready(self, layer_index: int, now: float) -> None:
        super().on_gradient_ready(layer_index, now)
        self._arrivals.append((layer_index, now - self._t0))
        if layer_index == 0:
            self._fallback = True
        if self._fallback or self.profile is None:
            return
        stage = self._stage_of.get(layer_index)
        if stage is None:
            self._fallback = True  # the model changed since profiling
            return
        self._stage_left[stage] -= 1
        if self._stage_left[stage] == 0 and stage < len(self.profile.gaps):
            self._block_budget_bytes = self.profile.gaps[stage] * self.bandwidth

    def next_transfer(self, now: float, link_idle: bool) -> Decision:
        if self._fallback:
            return self.credit_transfer()
        if self.all_handed_out():
            return None
        if self._block_budget_bytes >= self.nbytes and self.queue:
            segments = self.queue.take(int(self._block_budget_bytes // self.nbytes))
            self._block_budget_bytes = 0.0
            return self.make_transfer(segments, credited=False)
        return Wait()

    def on_transfer_done(self, transfer: Transfer, now: float, achieved_bytes_per_s: float) -> None:
        super().on_transfer_done(transfer, now, achieved_bytes_per_s)
        self.bandwidth = max(self.bandwidth, achieved_bytes_per_s)
