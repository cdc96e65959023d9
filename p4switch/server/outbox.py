"""The queue of one StreamChannel's responses: control messages always, packets bounded.

Arbitration updates and stream errors are few and must arrive, so they are always queued.
PacketIn and digest lists come from the data path at line rate; a client that does not read
them would otherwise make the queue grow without bound, so past ``limit`` queued messages
they are dropped and counted.
"""

from __future__ import annotations

import collections
import threading
from typing import Any

from p4.v1 import p4runtime_pb2

#: PacketIn and digest lists queued per stream before new ones are dropped.
DATA_LIMIT = 1024
_DATA_KINDS = frozenset({"packet", "digest"})


class Outbox:
    """A stream's pending responses; ``None`` ends the stream."""

    def __init__(self, limit: int = DATA_LIMIT) -> None:
        self.limit = limit
        self.dropped = 0
        self._items: collections.deque[Any] = collections.deque()
        self._data = 0
        self._ready = threading.Condition()

    def put(self, item: Any) -> bool:
        """Queue a response; returns False when a PacketIn or digest was dropped instead."""
        data = isinstance(item, p4runtime_pb2.StreamMessageResponse) and item.WhichOneof("update") in _DATA_KINDS
        with self._ready:
            if data:
                if self._data >= self.limit:
                    self.dropped += 1
                    return False
                self._data += 1
            self._items.append((data, item))
            self._ready.notify()
        return True

    def get(self, timeout: float | None = None) -> Any:
        """The next response (blocks); raises TimeoutError after ``timeout`` seconds."""
        with self._ready:
            if not self._ready.wait_for(lambda: bool(self._items), timeout):
                raise TimeoutError
            data, item = self._items.popleft()
            if data:
                self._data -= 1
            return item

    def __len__(self) -> int:
        with self._ready:
            return len(self._items)
