"""Per-iteration loss masks of a trace run: which gradient values the ring zero-filled.

A rank of a DLCP ring (:class:`hosts.ring.RingAllReduce`) takes each reduce-stage message
from its left neighbour through ``Endpoint.take``; values of packets that did not arrive are
zero there. :class:`MaskRecorder` wraps ``take`` and notes, for every message delivered with
fewer values than it holds, its packets (``Endpoint.count`` values each, from the message's
start, as ``hosts.packetize`` cuts it, plus the one packet it may cut in two:
:func:`lost_elements`) whose values are all zero, mapped back through the transfer's
segments to (layer, element). Single gradient values may be exactly zero (a smoke
run's gradients had about 6% zeros), a whole packet of them practically never; a message whose
all-zero packets hold another number of values than the transport counts zero-filled is
counted as ``inexact`` (and its all-zero packets recorded).

Masks are element-precise and compact: per iteration, ``{layer: "a-b,c,..."}`` of lost element
indices, written into each iteration record (``lost_values``) and, by the sweep, into
``masks/<run>.txt.gz`` in the format of :mod:`experiments.accuracy.masks` with
``values_per_packet`` 1 (a lost packet is one range). Stage ``R`` only: the all-gather's lost
values keep the previous result (not zeros), and a parameter server's pushes are zero-filled
in the server's process; those runs have per-layer counts only (``lost_by_tensor``).

In a ring's reduce-scatter the message received at step ``s`` carries the partial sums of
``s + 1`` workers (the left neighbour and the ones before it): one mask line per worker.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from experiments.accuracy.masks import REDUCE, LossMasks, format_ranges, parse_ranges
from hosts.wire import MAX_COUNT_MTU_1500

#: Part numbers per (iteration, tensor id) of a ring message's iteration field (hosts.ring).
MAX_PARTS = 1024


def _chunks(n: int, size: int) -> list[int]:
    return [round(i * n / size) for i in range(size + 1)]


def lost_elements(values: np.ndarray, count: int, lost: int) -> np.ndarray:
    """Indices of the values of lost packets: packets of ``count`` values whose values are all
    zero; when they hold fewer than ``lost`` values, the one packet the sender may have cut in
    two (``hosts.packetize``: a drop-eligible budget filled exactly) is found as the single
    zero prefix or suffix of a packet that makes up the difference."""
    size = values.size
    starts = np.arange(0, size, count)
    ends = np.minimum(starts + count, size)
    nonzero = np.add.reduceat(values != 0, starts) > 0
    parts = [np.arange(starts[k], ends[k]) for k in np.flatnonzero(~nonzero)]
    deficit = lost - sum(p.size for p in parts)
    if deficit > 0:
        found = []
        for k in np.flatnonzero(nonzero & ((values[starts] == 0) | (values[ends - 1] == 0))):
            window = values[starts[k]:ends[k]] != 0
            head, tail = int(np.argmax(window)), int(np.argmax(window[::-1]))
            if head == deficit:
                found.append(np.arange(starts[k], starts[k] + head))
            elif tail == deficit:
                found.append(np.arange(ends[k] - tail, ends[k]))
        if len(found) == 1:
            parts += found
    return np.sort(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.int64)


class MaskRecorder:
    """Zero-filled reduce-stage values of one ring rank, by iteration, worker and layer."""

    def __init__(self, rank: int, size: int, count: int = MAX_COUNT_MTU_1500) -> None:
        self.rank, self.size, self.count = rank, size, count
        self.steps = 2 * (size - 1)
        self.lock = threading.Lock()
        #: (iteration, tensor id, part) -> the transfer's segments (layer, start, stop), in order
        self.plans: dict[tuple[int, int, int], list[tuple[int, int, int]]] = {}
        #: iteration -> (worker, layer) -> lost element indices
        self.lost: dict[int, dict[tuple[int, int], list[np.ndarray]]] = {}
        self.inexact = 0

    def plan(self, iteration: int, tensor_id: int, part: int, segments: Sequence[tuple[int, int, int]]) -> None:
        with self.lock:
            self.plans[(iteration, tensor_id, part)] = list(segments)

    def attach(self, endpoint: Any) -> None:
        """Wrap ``endpoint.take`` so that every delivered message passes :meth:`note`."""
        take = endpoint.take
        self.count = int(getattr(endpoint, "count", self.count))

        def recording_take(key: Any, *args: Any, **kwargs: Any) -> Any:
            got = take(key, *args, **kwargs)
            self.note(key, got)
            return got

        endpoint.take = recording_take

    def note(self, key: Any, got: Any) -> None:
        from hosts.wire import MsgType

        size = int(got.values.size)
        if key.kind != MsgType.GRADIENT or got.received >= size:
            return
        base, step = divmod(int(key.iteration), self.steps)
        iteration, part = divmod(base, MAX_PARTS)
        with self.lock:
            segments = self.plans.get((iteration, int(key.tensor_id), part))
        if segments is None or step >= self.size - 1:
            return
        known = getattr(got, "lost", None)  # the receiver's own record; values added in place are not zero
        zeros = (np.asarray(known, dtype=np.int64) if known is not None
                 else lost_elements(np.asarray(got.values).reshape(-1), self.count, size - int(got.received)))
        if zeros.size != size - got.received:
            self.inexact += 1
        total = sum(stop - start for _, start, stop in segments)
        chunk = (self.rank - step - 1) % self.size
        positions = zeros + _chunks(total, self.size)[chunk]
        workers = [(self.rank - 1 - j) % self.size for j in range(step + 1)]
        offset = 0
        with self.lock:
            per = self.lost.setdefault(iteration, {})
            for layer, start, stop in segments:
                n = stop - start
                mine = positions[(positions >= offset) & (positions < offset + n)] - offset + start
                if mine.size:
                    for w in workers:
                        per.setdefault((w, layer), []).append(mine)
                offset += n

    def pop(self, iteration: int) -> dict[str, dict[str, str]]:
        """Iteration's lost elements as ``{worker: {layer: ranges}}`` (JSON-ready), forgotten here."""
        with self.lock:
            per = self.lost.pop(iteration, {})
            for key in [k for k in self.plans if k[0] == iteration]:
                del self.plans[key]
        out: dict[str, dict[str, str]] = {}
        for (w, layer), parts in sorted(per.items()):
            out.setdefault(str(w), {})[str(layer)] = format_ranges(np.concatenate(parts).tolist())
        return out


def run_masks(record: dict[str, Any], tensor_values: Sequence[int]) -> LossMasks | None:
    """A trace run's recorded masks (the ranks' ``lost_values`` of its measured job with the
    lowest id: a multitenant run's second job numbers its ranks from 0 too) as one mask file's
    content; None when no rank recorded masks (TCP, a parameter server, or an older run)."""
    jobs = record.get("jobs", {})
    first = jobs[min(jobs, key=int)] if jobs else {"ranks": {}}
    ranks = [r for r in first["ranks"].values() if r.get("role") != "server"]
    if not any("lost_values" in rec for r in ranks for rec in r["records"]):
        return None
    iterations = max((len(r["records"]) for r in ranks), default=0)
    masks = LossMasks(tensors=list(tensor_values), workers=max(1, len(ranks)), iterations=iterations,
                      values_per_packet=1, source=f"trace run {record.get('run_id', '?')}")
    for r in ranks:
        for rec in r["records"]:
            for worker, layers in rec.get("lost_values", {}).items():
                for layer, ranges in layers.items():
                    masks.add(int(rec["iteration"]), REDUCE, int(worker), int(layer), parse_ranges(ranges).tolist())
    return masks


def write_run_masks(out: Path, record: dict[str, Any], tensor_values: Sequence[int]) -> Path | None:
    """``out/masks/<run>.txt.gz`` from a run's records (None when it has no masks)."""
    masks = run_masks(record, tensor_values)
    if masks is None:
        return None
    path = out / "masks" / f"{record['run_id']}.txt.gz"
    masks.write(path)
    return path
