"""A message being rebuilt (:class:`Assembly`), why the receiver drops a packet and what it counts.

The state :class:`hosts.receiver.Reassembler` keeps per message: its values (the caller's array,
a copy of the prior, or memory from an :class:`hosts.arrays.ArrayPool`), its element and packet
maps (reused across messages of one length, each message marking with its own byte), and the
elements arrived.
"""

from __future__ import annotations

import mmap
from collections import Counter
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import numpy as np

from hosts.arrays import ArrayPool
from hosts.messages import MessageKey

Address = tuple[str, int]
_F32 = np.dtype("<f4")
#: A message's element or packet map: one byte per element (or packet), `mark` where it arrived.
Map = bytearray | mmap.mmap
#: Packet maps of at least this many bytes are fresh anonymous memory (:func:`packet_map`).
LAZY_MAP_BYTES = 1 << 16
#: The byte `mark` as bytes, for the maps' ``find`` and ``rfind`` (an mmap takes no int).
MARK_BYTES = tuple(bytes([m]) for m in range(256))


def packet_map(n: int) -> Map:
    """A zeroed packet map of `n` bytes (one per element, as a packet holds at least one). From
    :data:`LAZY_MAP_BYTES` on, anonymous memory the kernel zeroes page by page as it is first
    touched, instead of a ``bytearray`` whose every page is faulted in and zeroed at once: a
    message of 1M elements in 64 kB packets touches one page of its 256. (The element map is a
    ``bytearray``: every page of it is written, and the C reads it before writing it, which on
    untouched anonymous memory costs two faults a page instead of one.)"""
    return mmap.mmap(-1, n) if n >= LAZY_MAP_BYTES else bytearray(n)


class DropReason(str, Enum):
    TRUNCATED = "truncated"
    BAD_VERSION = "bad_version"
    BAD_TYPE = "bad_type"
    BAD_FLAGS = "bad_flags"
    WRONG_JOB = "wrong_job"
    TOO_LARGE = "too_large"
    OUT_OF_BOUNDS = "out_of_bounds"
    BAD_PAYLOAD = "bad_payload"
    INCONSISTENT = "inconsistent"
    LATE = "late"
    UNEXPECTED = "unexpected"
    UNKNOWN_PEER = "unknown_peer"  # not a member of the job (worker id and address)
    PROBE_TOO_WIDE = "probe_too_wide"  # asks about more packets than its size class allows


@dataclass
class ReceiverStats:
    data_packets: int = 0
    duplicates: int = 0
    probes: int = 0
    bitmaps_sent: int = 0
    answered_in_c: int = 0  # of the probes and bitmaps: answered by the C receive path (hosts/answers.c)
    echoes_in_c: int = 0  # of the ECN echoes: sent by the C receive path
    completed_in_c: int = 0  # of the completed messages: by a probe flagged last that the C answered
    placed_in_c: int = 0  # of the data packets: in runs the C placed as it received them (Reassembler.absorbed)
    ce_marked: int = 0  # data packets that arrived with ECN = CE
    ecn_echoes: int = 0  # bitmap answers carrying the ECN-echo flag
    completed: int = 0
    evicted: int = 0  # incomplete messages given up to make room for new ones
    drops: Counter[str] = field(default_factory=Counter)

    @property
    def dropped(self) -> int:
        return sum(self.drops.values())


class Assembly:
    """A message being rebuilt."""

    __slots__ = ("key", "values", "raw", "have", "seqs", "mark", "received", "source", "cptrs", "add", "fill",
                 "answers")

    def __init__(self, key: MessageKey, tensor_len: int, initial: np.ndarray | None, source: Address,
                 out: np.ndarray | None = None, maps: tuple[Map, Map, int] | None = None,
                 add: bool = False, pool: ArrayPool | None = None) -> None:
        """`out`: the array to rebuild the message in (its caller's memory), when it fits;
        `add`: add the values that arrive to what `out` holds instead (`initial` unused).
        `maps`: the element and packet maps (:func:`packet_map`) of `tensor_len` bytes to reuse
        for `have` and `seqs`, and the mark their last message used. An element or packet arrived
        where its byte holds this message's `mark`; a reused map takes the next mark, so it is not
        zeroed (but once in 255 messages)."""
        self.key = key
        fits = initial is not None and initial.size == tensor_len
        self.add = False
        #: What the elements that never arrived get at completion (None: they hold it already).
        self.fill: np.ndarray | float | None = None
        if out is not None and out.size == tensor_len and out.dtype == _F32 and out.flags.c_contiguous:
            self.values = out.reshape(-1)
            self.add = add
            if not add:  # lost values are set at completion, so nothing is written twice
                self.fill = np.asarray(initial, dtype=_F32).reshape(-1) if fits else 0.0
        elif fits:
            assert initial is not None
            self.values = np.array(initial, dtype=_F32, copy=True).reshape(-1)
        else:  # not zeroed: the values that never arrive are set to 0 at completion
            self.values = np.empty(tensor_len, dtype=_F32) if pool is None else pool.take(tensor_len)
            self.fill = 0.0
        self.raw = memoryview(self.values).cast("B")  # the values' bytes, for plain copies
        if maps is not None and len(maps[0]) == len(maps[1]) == tensor_len:
            self.have, self.seqs, last = maps
            self.mark = last + 1
            if self.mark > 255:
                for m in (self.have, self.seqs):
                    np.frombuffer(m, np.uint8).fill(0)
                self.mark = 1
        else:
            self.have = bytearray(tensor_len)  # `mark` where an element arrived
            self.seqs = packet_map(tensor_len)  # `mark` where a data packet arrived (a packet holds >= 1 element)
            self.mark = 1
        self.received = 0
        self.source = source
        self.cptrs: tuple[Any, Any, Any] | None = None  # C pointers of the fast path, made on first use
        #: The batch receiver whose C answers this message's probes, and its slot there (None: Python does).
        self.answers: tuple[Any, int] | None = None
