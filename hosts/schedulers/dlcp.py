"""DLCP: priority by layer, partitions handed out at once, bounded-loss tags.

Every ready layer is cut into partitions and handed out immediately, front layers first;
the fabric's strict-priority queues (the switch's ``layer_priority`` table, fed by each
packet's ``prio_hint``) keep front layers ahead in the network. Each transfer carries a
:class:`LossPolicy`: front layers (the first ``front_share`` of the layers) tolerate
``front_loss_bound`` of lost values, the others ``back_loss_bound``; the sender marks at most
that share of packets drop-eligible, smallest magnitude first.

``merge_numel`` (0: off) merges small layers as MG-WFBP does, by a rule fixed from the layer
sizes alone (every rank of a ring forms the same transfers): walking backward order,
consecutive layers each smaller than ``merge_numel`` values form one group until it holds at
least that many; a larger layer goes alone, in partitions. A group is one transfer, handed
out once all its layers are ready, with the priority and loss policy of its front-most layer.
On the fabric each message costs the hosts' transport a share of a round trip and of its
threads (experiments/README.md, "Where DLCP's iteration goes on the fabric").
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from hosts.schedulers.base import Decision, Layer, LossPolicy, SchedulerError, Segment, Transfer
from hosts.schedulers.priority import PriorityScheduler
from hosts.schedulers.registry import register

#: Loss tolerance profiled by DLCP: ~1.1% for front layers, ~0.4% for back layers.
FRONT_LOSS_BOUND = 0.011
BACK_LOSS_BOUND = 0.004


def merge_groups(layers: Sequence[Layer], min_numel: int) -> dict[int, tuple[int, ...]]:
    """Groups of small layers (module doc), keyed by their first layer in backward order;
    each group lists its layers in backward order. Layers not in a group go alone."""
    groups: dict[int, tuple[int, ...]] = {}
    current: list[int] = []
    size = 0
    for i in reversed(range(len(layers))):
        numel = layers[i].numel
        if min_numel <= 0 or numel >= min_numel:
            if current:
                groups[current[0]] = tuple(current)
            current, size = [], 0
            continue
        current.append(i)
        size += numel
        if size >= min_numel:
            groups[current[0]] = tuple(current)
            current, size = [], 0
    if current:
        groups[current[0]] = tuple(current)
    return groups


@register("dlcp")
class DlcpScheduler(PriorityScheduler):
    """Options: ``front_loss_bound``, ``back_loss_bound``, ``front_share`` (0.5),
    ``partition_bytes``/``credit_bytes`` (default credit: unlimited) and ``merge_numel``
    (0: every layer alone; at most a partition's values)."""

    def __init__(
        self,
        *,
        front_loss_bound: float = FRONT_LOSS_BOUND,
        back_loss_bound: float = BACK_LOSS_BOUND,
        front_share: float = 0.5,
        credit_bytes: int | None = 1 << 62,
        merge_numel: int = 0,
        **kwargs: object,
    ) -> None:
        super().__init__(credit_bytes=credit_bytes, **kwargs)  # type: ignore[arg-type]
        if not 0 <= merge_numel <= self.partition_numel:
            raise SchedulerError(f"dlcp: merge_numel must be in [0, {self.partition_numel}] (a partition), "
                                 f"not {merge_numel}")
        self.merge_numel = merge_numel
        self._group_of: dict[int, int] = {}  # layer -> its group's key
        self._groups: dict[int, tuple[int, ...]] = {}
        self._ready_in: dict[int, int] = {}
        self._ready_groups: list[tuple[int, int]] = []  # (front-most layer, group key), a heap
        for label, bound in (("front_loss_bound", front_loss_bound), ("back_loss_bound", back_loss_bound)):
            if not 0.0 <= bound < 1.0:
                raise SchedulerError(f"dlcp: {label} must be in [0, 1), not {bound}")
        if not 0.0 <= front_share <= 1.0:
            raise SchedulerError(f"dlcp: front_share must be in [0, 1], not {front_share}")
        self.front_loss_bound = front_loss_bound
        self.back_loss_bound = back_loss_bound
        self.front_share = front_share

    def start_iteration(self, layers: Sequence[Layer], now: float) -> None:
        super().start_iteration(layers, now)
        self._groups = merge_groups(self.layers, self.merge_numel)
        self._group_of = {layer: key for key, members in self._groups.items() for layer in members}
        self._ready_in, self._ready_groups = {}, []

    def on_gradient_ready(self, layer_index: int, now: float) -> None:
        key = self._group_of.get(layer_index)
        if key is None:
            super().on_gradient_ready(layer_index, now)
            return
        self._pending_layers -= 1
        self._ready_in[key] = self._ready_in.get(key, 0) + 1
        if self._ready_in[key] == len(self._groups[key]):
            heapq.heappush(self._ready_groups, (min(self._groups[key]), key))

    def all_handed_out(self) -> bool:
        return super().all_handed_out() and not self._ready_groups

    def next_transfer(self, now: float, link_idle: bool) -> Decision:
        """A ready group goes before partitions of layers behind its front-most one."""
        if self._ready_groups and (not self.queue or self._ready_groups[0][0] < self.queue.peek().layer_index):
            _, key = heapq.heappop(self._ready_groups)
            return self.make_transfer([Segment(l, 0, self.layers[l].numel) for l in self._groups[key]])
        return super().next_transfer(now, link_idle)

    def loss_policy(self, layer_index: int) -> LossPolicy:
        """The loss tag of a layer's gradient messages."""
        front = layer_index < self.front_share * len(self.layers)
        bound = self.front_loss_bound if front else self.back_loss_bound
        return LossPolicy(loss_bound=bound, drop_eligible_share=bound)

    def make_transfer(self, segments: Sequence[Segment]) -> Transfer:
        transfer = super().make_transfer(segments)
        top = min(s.layer_index for s in transfer.segments)
        return Transfer(
            segments=transfer.segments,
            nbytes=transfer.nbytes,
            priority=transfer.priority,
            loss=self.loss_policy(top),
            id=transfer.id,
        )
