"""Schedulers that send whole layers in fixed groups, each group once all of it is ready.

A plan is a list of groups in backward order (the group holding the last layer first);
a group is a tuple of layer indices. Because backward runs from the last layer down,
a group is ready when its lowest-index layer is ready. Groups are handed out as soon as
they are ready; the driver serialises them on the link in that order (FIFO).
"""

from __future__ import annotations

import abc
from collections.abc import Sequence

from hosts.schedulers.base import Decision, Layer, Scheduler, SchedulerError, Segment, Transfer, Wait


class GroupedScheduler(Scheduler):
    """Sends pre-planned groups of whole layers when every layer of a group is ready."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.groups: list[tuple[int, ...]] = []
        self._ready: set[int] = set()
        self._next_group = 0

    @abc.abstractmethod
    def plan(self, layers: Sequence[Layer]) -> list[tuple[int, ...]]:
        """Groups of layer indices in backward order, covering every layer once."""

    def start_iteration(self, layers: Sequence[Layer], now: float) -> None:
        super().start_iteration(layers, now)
        self.groups = self.plan(self.layers)
        flat = sorted(i for g in self.groups for i in g)
        if flat != list(range(len(self.layers))):
            raise SchedulerError(f"{self.name}: plan does not cover each layer exactly once")
        self._ready = set()
        self._next_group = 0

    def on_gradient_ready(self, layer_index: int, now: float) -> None:
        if not 0 <= layer_index < len(self.layers):
            raise SchedulerError(f"{self.name}: gradient of unknown layer {layer_index}")
        self._ready.add(layer_index)

    def next_transfer(self, now: float, link_idle: bool) -> Decision:
        if self._next_group >= len(self.groups):
            return None
        group = self.groups[self._next_group]
        if not self._ready.issuperset(group):
            return Wait()
        self._next_group += 1
        segments = tuple(Segment(i, 0, self.layers[i].numel) for i in sorted(group))
        return Transfer(segments=segments, nbytes=self.segment_bytes(segments))
