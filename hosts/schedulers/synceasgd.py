"""SyncEASGD: one message with every gradient, after the whole backward pass."""

from __future__ import annotations

from collections.abc import Sequence

from hosts.schedulers.base import Layer
from hosts.schedulers.grouped import GroupedScheduler
from hosts.schedulers.registry import register


@register("synceasgd")
class SyncEasgdScheduler(GroupedScheduler):
    """All layers merged into a single message, sent when layer 0's gradient is ready."""

    def plan(self, layers: Sequence[Layer]) -> list[tuple[int, ...]]:
        return [tuple(reversed(range(len(layers))))]
