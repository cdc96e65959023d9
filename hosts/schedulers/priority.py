"""Priority sending with partitions and credit (P3 / ByteScheduler style).

Each ready layer is cut into partitions of at most ``partition_bytes``; pending partitions
wait in a priority queue, front (input-side) layers first. A partition is handed out when
the bytes in flight plus its own stay within ``credit_bytes`` (or nothing is in flight), so a
newly ready front layer overtakes everything not yet handed out. A transfer is in flight
until the driver reports it done: for a parameter server, when its pull has come back.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from hosts.schedulers.base import (
    Decision,
    Layer,
    Scheduler,
    SchedulerError,
    Segment,
    Transfer,
    Wait,
    layer_priority,
)

#: ByteScheduler's default partition size (4 MB); the default credit is one partition.
DEFAULT_PARTITION_BYTES = 4_000_000


class PartitionQueue:
    """Pending gradient elements in priority order: lowest layer index, then lowest offset."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, int]] = []

    def __len__(self) -> int:
        return len(self._heap)

    def push_layer(self, layer_index: int, numel: int, partition_numel: int) -> None:
        for start in range(0, numel, partition_numel):
            heapq.heappush(self._heap, (layer_index, start, min(numel, start + partition_numel)))
        if numel == 0:
            heapq.heappush(self._heap, (layer_index, 0, 0))

    def peek(self) -> Segment:
        layer_index, start, stop = self._heap[0]
        return Segment(layer_index, start, stop)

    def pop(self) -> Segment:
        layer_index, start, stop = heapq.heappop(self._heap)
        return Segment(layer_index, start, stop)

    def take(self, max_numel: int) -> list[Segment]:
        """Pop segments in priority order until ``max_numel`` elements; split the last one."""
        taken: list[Segment] = []
        budget = max_numel
        while self._heap and budget > 0:
            layer_index, start, stop = heapq.heappop(self._heap)
            if stop - start > budget:
                heapq.heappush(self._heap, (layer_index, start + budget, stop))
                stop = start + budget
            taken.append(Segment(layer_index, start, stop))
            budget -= stop - start
        return taken


class PriorityScheduler(Scheduler):
    """Shared machinery of ``p3``, ``prophet`` and ``dlcp``: partitions, priorities, credit."""

    def __init__(
        self,
        *,
        partition_bytes: int = DEFAULT_PARTITION_BYTES,
        credit_bytes: int | None = None,
        **kwargs: object,
    ) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        if partition_bytes <= 0:
            raise SchedulerError(f"{self.name or 'scheduler'}: partition_bytes must be positive")
        self.partition_bytes = partition_bytes
        self.credit_bytes = partition_bytes if credit_bytes is None else credit_bytes
        self.queue = PartitionQueue()
        self.in_flight_bytes = 0
        self._credited: set[int] = set()
        self._pending_layers = 0

    @property
    def partition_numel(self) -> int:
        return max(1, self.partition_bytes // self.nbytes)

    def start_iteration(self, layers: Sequence[Layer], now: float) -> None:
        super().start_iteration(layers, now)
        self.queue = PartitionQueue()
        self.in_flight_bytes = 0
        self._credited = set()
        self._pending_layers = len(self.layers)

    def on_gradient_ready(self, layer_index: int, now: float) -> None:
        if not 0 <= layer_index < len(self.layers):
            raise SchedulerError(f"{self.name}: gradient of unknown layer {layer_index}")
        self.queue.push_layer(layer_index, self.layers[layer_index].numel, self.partition_numel)
        self._pending_layers -= 1

    def all_handed_out(self) -> bool:
        return self._pending_layers == 0 and not self.queue

    def make_transfer(self, segments: Sequence[Segment], *, credited: bool = True) -> Transfer:
        """A transfer of ``segments``; ``credited`` ones count against the credit until done."""
        segments = tuple(segments)
        top = min(s.layer_index for s in segments)
        nbytes = self.segment_bytes(segments)
        transfer = Transfer(segments=segments, nbytes=nbytes, priority=layer_priority(top, len(self.layers)))
        if credited:
            self.in_flight_bytes += nbytes
            self._credited.add(transfer.id)
        return transfer

    def credit_transfer(self) -> Decision:
        """The next partition if the credit allows it, else a wait (None when all sent)."""
        if self.all_handed_out():
            return None
        if not self.queue:
            return Wait()
        head = self.queue.peek()
        head_bytes = head.numel * self.nbytes
        if self.in_flight_bytes > 0 and self.in_flight_bytes + head_bytes > self.credit_bytes:
            return Wait()
        return self.make_transfer([self.queue.pop()])

    def next_transfer(self, now: float, link_idle: bool) -> Decision:
        return self.credit_transfer()

    def on_transfer_done(self, transfer: Transfer, now: float, achieved_bytes_per_s: float) -> None:
        if transfer.id in self._credited:
            self._credited.discard(transfer.id)
            self.in_flight_bytes = max(0, self.in_flight_bytes - transfer.nbytes)
