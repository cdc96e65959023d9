"""WFBP: wait-free backpropagation, each layer's gradient sent alone as soon as it is ready."""

from __future__ import annotations

from collections.abc import Sequence

from hosts.schedulers.base import Layer
from hosts.schedulers.grouped import GroupedScheduler
from hosts.schedulers.registry import register


@register("wfbp")
class WfbpScheduler(GroupedScheduler):
    """One message per layer, FIFO in the order gradients become ready."""

    def plan(self, layers: Sequence[Layer]) -> list[tuple[int, ...]]:
        return [(i,) for i in reversed(range(len(layers)))]
