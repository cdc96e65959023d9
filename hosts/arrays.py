"""Message arrays made again from memory their last user let go of.

A message rebuilt in new memory (:meth:`hosts.endpoint.Endpoint.receive` hands its array to
the caller) costs a page fault per 4 kB the first time its values are written, with the
kernel's zeroing of each page: 12-15 % of a receiving process's CPU on a 100 MB loopback
transfer in 4 MB messages (perf, hosts/README.md). :class:`ArrayPool` hands out float32 arrays
and keeps a reference to the last few; an array nothing else refers to any more (its message
delivered and dropped, or given up) is handed out again instead of new memory. Nothing is
reused while anything holds the array or a view of it (numpy views, memoryviews and tensors
made with ``torch.from_numpy`` keep a reference). Only a raw address kept without the array
(``ndarray.ctypes.data``) or a weak reference would see it change, as it would see freed memory.
"""

from __future__ import annotations

import sys

import numpy as np

#: Arrays the pool keeps a reference to, and the most bytes they may hold together.
KEEP = 8
KEEP_BYTES = 64 << 20
_F32 = np.dtype(np.float32)


class ArrayPool:
    """Float32 arrays for messages, reused once nothing else refers to them (one thread)."""

    def __init__(self, keep: int = KEEP, keep_bytes: int = KEEP_BYTES) -> None:
        self.keep = keep
        self.keep_bytes = keep_bytes
        self._arrays: list[np.ndarray] = []
        self._bytes = 0
        self.reused = 0  #: arrays handed out again

    def take(self, n: int) -> np.ndarray:
        """A float32 array of `n` elements whose contents are unspecified: one handed out
        before that nothing else refers to, or new memory (then remembered, the oldest
        forgotten beyond `keep` arrays or `keep_bytes`)."""
        arrays = self._arrays
        for i in range(len(arrays)):
            a = arrays[i]
            # references: the list, `a`, getrefcount's argument; one more is a user's
            if a.size == n and sys.getrefcount(a) == 3:
                del arrays[i]
                arrays.append(a)  # the most recently used last
                self.reused += 1
                return a
        a = np.empty(n, dtype=_F32)
        if a.nbytes <= self.keep_bytes and self.keep > 0:
            arrays.append(a)
            self._bytes += a.nbytes
            while len(arrays) > self.keep or self._bytes > self.keep_bytes:
                self._bytes -= arrays.pop(0).nbytes
        return a
