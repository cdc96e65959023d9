"""P3 / ByteScheduler: priority by layer, partitions, credit-based sending."""

from __future__ import annotations

from hosts.schedulers.priority import PriorityScheduler
from hosts.schedulers.registry import register


@register("p3")
class P3Scheduler(PriorityScheduler):
    """Partitions of ``partition_bytes`` (default 4 MB), front layers first, at most
    ``credit_bytes`` in flight (default one partition)."""
