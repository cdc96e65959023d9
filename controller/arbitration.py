"""Election ids: unique per controller instance, so two controllers never share one.

P4Runtime makes the client with the highest election id the primary; ids must be non-zero
and distinct. An id is (high, low) of a uint128: high is the creation time in microseconds
(a later controller wins), low mixes the process id and a per-process counter.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from dataclasses import dataclass

_counter = itertools.count(1)
_lock = threading.Lock()
_last_high = 0


@dataclass(frozen=True, order=True)
class ElectionId:
    high: int
    low: int

    @classmethod
    def new(cls) -> ElectionId:
        """A fresh id, greater than every id made before it in this process."""
        global _last_high
        with _lock:
            high = max(time.time_ns() // 1000, _last_high + 1)
            _last_high = high
        return cls(high=high, low=((os.getpid() & 0xFFFFFFFF) << 32) | (next(_counter) & 0xFFFFFFFF))

    def __str__(self) -> str:
        return f"{self.high}:{self.low}"
