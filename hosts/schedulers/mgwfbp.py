"""MG-WFBP: merged-gradient wait-free backpropagation (Shi, Chu, Li; INFOCOM 2019).

The merge rule, with layers ``l = 0..L-1`` in forward order and the cost model
``tc[l] = alpha + beta * p[l] * nbytes``:

* ``tb_start[L-1] = 0``, ``tb_start[l] = tb_start[l+1] + tb[l+1]``
* ``tc_start[L-1] = tb_start[L-1] + tb[L-1]``,
  ``tc_start[l] = max(tc_start[l+1] + tc[l+1], tb_start[l] + tb[l])``
* for ``l = L-1`` down to 1, with ``r = tb_start[l-1] + tb[l-1]`` (layer ``l-1`` ready):
  if ``r < tc_start[l] + tc[l]`` and (``tc_start[l] > r`` or ``r - tc_start[l] < alpha``),
  merge ``l`` into ``l-1``: ``p[l-1] += p[l]``, ``p[l] = 0``, ``tc[l] = 0``; then recompute
  the communication starts.
* predicted time from backward start to the end of communication: ``tc_start[0] + tc[0]``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hosts.schedulers.base import AlphaBeta, Layer, SchedulerError
from hosts.schedulers.grouped import GroupedScheduler
from hosts.schedulers.registry import register


@dataclass(frozen=True)
class MergePlan:
    """Result of the merge: groups in backward order and the predicted timeline.

    ``tc_start`` and ``tc`` are per layer (0 for merged-away layers), relative to the start
    of the backward pass; ``comm_end`` is ``tc_start[0] + tc[0]``.
    """

    groups: tuple[tuple[int, ...], ...]
    tc_start: tuple[float, ...]
    tc: tuple[float, ...]
    comm_end: float


def _comm_starts(tb_end: list[float], tc: list[float]) -> list[float]:
    n = len(tc)
    tc_start = [0.0] * n
    tc_start[n - 1] = tb_end[n - 1]
    for l in range(n - 2, -1, -1):
        tc_start[l] = max(tc_start[l + 1] + tc[l + 1], tb_end[l])
    return tc_start


def plan_merge(layers: Sequence[Layer], cost: AlphaBeta) -> MergePlan:
    """Apply the MG-WFBP merge rule to ``layers`` under ``cost``."""
    n = len(layers)
    if n == 0:
        raise SchedulerError("mgwfbp: no layers to plan")
    tb = [layer.backward_s for layer in layers]
    p = [float(layer.numel) for layer in layers]
    tb_start = [0.0] * n
    for l in range(n - 2, -1, -1):
        tb_start[l] = tb_start[l + 1] + tb[l + 1]
    tb_end = [tb_start[l] + tb[l] for l in range(n)]
    tc = [cost.seconds_for_numel(x) for x in p]
    tc_start = _comm_starts(tb_end, tc)
    merged_into_next = [False] * n  # True: layer l travels with layer l-1
    for l in range(n - 1, 0, -1):
        r = tb_end[l - 1]
        if r < tc_start[l] + tc[l] and (tc_start[l] > r or r - tc_start[l] < cost.alpha):
            p[l - 1] += p[l]
            p[l] = 0.0
            tc[l] = 0.0
            tc[l - 1] = cost.seconds_for_numel(p[l - 1])
            merged_into_next[l] = True
            tc_start = _comm_starts(tb_end, tc)
    groups: list[tuple[int, ...]] = []
    current: list[int] = []
    for l in range(n - 1, -1, -1):
        current.append(l)
        if not merged_into_next[l]:
            groups.append(tuple(current))
            current = []
    return MergePlan(tuple(groups), tuple(tc_start), tuple(tc), tc_start[0] + tc[0])


@register("mgwfbp")
class MgWfbpScheduler(GroupedScheduler):
    """Sends the groups :func:`plan_merge` chooses from the layers' profiled backward times.

    Needs ``cost`` (the all-reduce alpha-beta model of the cluster it runs on).
    """

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)
        if self.cost is None:
            raise SchedulerError("mgwfbp needs a cost model: create('mgwfbp', cost=AlphaBeta(alpha, beta))")
        self.merge_plan: MergePlan | None = None

    def plan(self, layers: Sequence[Layer]) -> list[tuple[int, ...]]:
        assert self.cost is not None
        self.merge_plan = plan_merge(layers, self.cost)
        return list(self.merge_plan.groups)
