"""Fusion: fixed-size buckets in backward order (PyTorch DDP / Horovod tensor fusion)."""

from __future__ import annotations

from collections.abc import Sequence

from hosts.schedulers.base import Layer, SchedulerError
from hosts.schedulers.grouped import GroupedScheduler
from hosts.schedulers.registry import register

#: PyTorch DDP's defaults: ``bucket_cap_mb=25`` and a first bucket of 1 MiB.
DDP_BUCKET_BYTES = 25 * 1024 * 1024
DDP_FIRST_BUCKET_BYTES = 1024 * 1024


@register("fusion")
class FusionScheduler(GroupedScheduler):
    """Layers are added to a bucket in backward order; a bucket closes once it holds at least
    its cap (the first bucket's cap is ``first_bucket_bytes``, later ones ``bucket_bytes``),
    as DDP assigns buckets. A bucket is sent when all its layers are ready."""

    def __init__(
        self,
        *,
        bucket_bytes: int = DDP_BUCKET_BYTES,
        first_bucket_bytes: int | None = DDP_FIRST_BUCKET_BYTES,
        **kwargs: object,
    ) -> None:
        super().__init__(**kwargs)
        if bucket_bytes <= 0:
            raise SchedulerError(f"fusion: bucket_bytes must be positive, not {bucket_bytes}")
        self.bucket_bytes = bucket_bytes
        self.first_bucket_bytes = bucket_bytes if first_bucket_bytes is None else first_bucket_bytes

    def plan(self, layers: Sequence[Layer]) -> list[tuple[int, ...]]:
        groups: list[tuple[int, ...]] = []
        bucket: list[int] = []
        size = 0
        for i in reversed(range(len(layers))):
            bucket.append(i)
            size += layers[i].numel * self.nbytes
            cap = self.first_bucket_bytes if not groups else self.bucket_bytes
            if size >= cap:
                groups.append(tuple(bucket))
                bucket, size = [], 0
        if bucket:
            groups.append(tuple(bucket))
        return groups
