"""DLCP: priority by layer, partitions handed out at once, bounded-loss tags.

Every ready layer is cut into partitions and handed out immediately, front layers first;
the fabric's strict-priority queues (the switch's ``layer_priority`` table, fed by each
packet's ``prio_hint``) keep front layers ahead in the network. Each transfer carries a
:class:`LossPolicy`: front layers (the first ``front_share`` of the layers) tolerate
``front_loss_bound`` of lost values, the others ``back_loss_bound``; the sender marks at most
that share of packets drop-eligible, smallest magnitude first.
"""

from __future__ import annotations

from collections.abc import Sequence

from hosts.schedulers.base import LossPolicy, SchedulerError, Segment, Transfer
from hosts.schedulers.priority import PriorityScheduler
from hosts.schedulers.registry import register

#: Loss tolerance profiled by DLCP: ~1.1% for front layers, ~0.4% for back layers.
FRONT_LOSS_BOUND = 0.011
BACK_LOSS_BOUND = 0.004


@register("dlcp")
class DlcpScheduler(PriorityScheduler):
    """Options: ``front_loss_bound``, ``back_loss_bound``, ``front_share`` (0.5), and
    ``partition_bytes``/``credit_bytes`` (default credit: unlimited)."""

    def __init__(
        self,
        *,
        front_loss_bound: float = FRONT_LOSS_BOUND,
        back_loss_bound: float = BACK_LOSS_BOUND,
        front_share: float = 0.5,
        credit_bytes: int | None = 1 << 62,
        **kwargs: object,
    ) -> None:
        super().__init__(credit_bytes=credit_bytes, **kwargs)  # type: ignore[arg-type]
        for label, bound in (("front_loss_bound", front_loss_bound), ("back_loss_bound", back_loss_bound)):
            if not 0.0 <= bound < 1.0:
                raise SchedulerError(f"dlcp: {label} must be in [0, 1), not {bound}")
        if not 0.0 <= front_share <= 1.0:
            raise SchedulerError(f"dlcp: front_share must be in [0, 1], not {front_share}")
        self.front_loss_bound = front_loss_bound
        self.back_loss_bound = back_loss_bound
        self.front_share = front_share

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
