"""Per-iteration loss masks: the file format, the packet layout of a model, and mask sources.

A mask says which DLCP data packets of which tensor a worker lost in one iteration, and at
which stage. Packet ``k`` of a tensor of ``L`` values carries values
``[k * n, min((k + 1) * n, L))`` with ``n = values_per_packet`` (361 float32 at a 1500-byte
MTU, ``hosts.wire.MAX_COUNT_MTU_1500``), as ``hosts.packetize`` cuts a message.

Stages, as DLCP's receiver fills what did not arrive:

* ``R`` (reduce: a PS push, a ring's reduce-scatter): the lost values are zero in the sum, so
  the worker's contribution to them is missing; the sum is still divided by the number of
  workers (``hosts.ps`` ``update="mean"``).
* ``G`` (gather: a PS pull, a ring's all-gather): the lost values keep what the worker held
  before, i.e. its replica keeps the previous iteration's parameters there (modelled as a
  parameter server's pull: each worker has its own replica).

File format (text, ``.gz`` compressed when the name ends so)::

    {"format": "gradfabric-loss-masks", "version": 1, "values_per_packet": 361,
     "workers": 4, "tensors": [864, 96, ...], "iterations": 60, "source": "..."}
    # comment lines start with '#'
    <iteration> <R|G> <worker> <tensor> <packets>

The first line is one JSON object (shown wrapped here): ``tensors`` lists each tensor's
number of values in tensor-id order, ``iterations`` how many iterations the run had (an
iteration without a line lost nothing). Each further line names the lost packets of one
(iteration, stage, worker, tensor) as comma-separated indices and inclusive ranges, e.g.
``12 R 3 5 0-4,17,20-21``. For a ring's reduce-scatter, a lost packet carrying the partial
sum of several workers is one line per worker whose contribution it carried.
"""

from __future__ import annotations

import gzip
import io
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import IO, Protocol

import numpy as np

from experiments.errors import ExperimentError
from hosts.packetize import DropRule, magnitude_classes
from hosts.wire import MAX_COUNT_MTU_1500

FORMAT = "gradfabric-loss-masks"
VERSION = 1
REDUCE, GATHER = "R", "G"
STAGES = (REDUCE, GATHER)


class MaskFileError(ExperimentError):
    """A loss-mask file is malformed; the message names the file and line."""


def format_ranges(packets: Iterable[int]) -> str:
    """Sorted, de-duplicated indices as ``a-b`` runs and single indices, comma-separated."""
    idx = sorted(set(int(p) for p in packets))
    if not idx:
        raise ValueError("no packets to format")
    out: list[str] = []
    start = prev = idx[0]
    for p in idx[1:] + [None]:  # type: ignore[list-item]
        if p is not None and p == prev + 1:
            prev = p
            continue
        out.append(str(start) if start == prev else f"{start}-{prev}")
        if p is not None:
            start = prev = p
    return ",".join(out)


def parse_ranges(text: str) -> np.ndarray:
    """Inverse of :func:`format_ranges` (int64 indices, sorted)."""
    parts: list[np.ndarray] = []
    for item in text.split(","):
        lo, sep, hi = item.partition("-")
        a, b = int(lo), int(hi) if sep else int(lo)
        if a < 0 or b < a:
            raise ValueError(f"bad packet range {item!r}")
        parts.append(np.arange(a, b + 1, dtype=np.int64))
    return np.unique(np.concatenate(parts))


Key = tuple[int, str, int, int]  # iteration, stage, worker, tensor


@dataclass
class LossMasks:
    """A run's recorded losses: packets lost per (iteration, stage, worker, tensor)."""

    tensors: list[int]
    workers: int
    iterations: int
    values_per_packet: int = MAX_COUNT_MTU_1500
    source: str = ""
    lost: dict[Key, np.ndarray] = field(default_factory=dict)

    def packets(self, tensor: int) -> int:
        return max(1, math.ceil(self.tensors[tensor] / self.values_per_packet))

    def add(self, iteration: int, stage: str, worker: int, tensor: int, packets: Iterable[int]) -> None:
        """Record lost packets (merged with any already recorded for the same key)."""
        if stage not in STAGES:
            raise ExperimentError(f"stage must be one of {STAGES}, got {stage!r}")
        if not 0 <= tensor < len(self.tensors) or not 0 <= worker < self.workers or iteration < 0:
            raise ExperimentError(f"mask entry out of range: iteration {iteration}, worker {worker} "
                                  f"(of {self.workers}), tensor {tensor} (of {len(self.tensors)})")
        idx = np.unique(np.asarray(list(packets), dtype=np.int64))
        if idx.size == 0:
            return
        if idx[0] < 0 or idx[-1] >= self.packets(tensor):
            raise ExperimentError(f"tensor {tensor} has {self.packets(tensor)} packets; got index {int(idx[-1])}")
        key = (iteration, stage, worker, tensor)
        self.lost[key] = np.union1d(self.lost[key], idx) if key in self.lost else idx
        self.iterations = max(self.iterations, iteration + 1)

    def header(self) -> dict[str, object]:
        return {"format": FORMAT, "version": VERSION, "values_per_packet": self.values_per_packet,
                "workers": self.workers, "tensors": list(self.tensors), "iterations": self.iterations,
                "source": self.source}

    def write(self, path: Path) -> None:
        """Write the file (gzip when `path` ends in ``.gz``)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "wt", encoding="utf-8") as f:  # type: ignore[operator]
            f.write(json.dumps(self.header()) + "\n")
            for key in sorted(self.lost):
                it, stage, worker, tensor = key
                f.write(f"{it} {stage} {worker} {tensor} {format_ranges(self.lost[key].tolist())}\n")

    def lost_share(self, stage: str = REDUCE) -> float:
        """Share of all values (every worker, iteration and tensor) lost at `stage`."""
        total = sum(self.tensors) * self.workers * max(1, self.iterations)
        lost = 0
        for (_, s, _, t), idx in self.lost.items():
            if s == stage:
                n = self.values_per_packet
                lost += int(np.minimum((idx + 1) * n, self.tensors[t]).sum() - (idx * n).sum())
        return lost / total if total else 0.0


def read_masks(path: Path) -> LossMasks:
    """Read a loss-mask file; errors name the file and line."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise MaskFileError(f"{path}: cannot read ({exc.strerror})") from exc
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    return parse_masks(io.StringIO(raw.decode("utf-8")), str(path))


def parse_masks(f: IO[str], name: str = "<masks>") -> LossMasks:
    first = f.readline()
    try:
        head = json.loads(first)
        if head.get("format") != FORMAT or head.get("version") != VERSION:
            raise ValueError(f"not a {FORMAT} version {VERSION} header")
        masks = LossMasks(tensors=[int(t) for t in head["tensors"]], workers=int(head["workers"]),
                          iterations=int(head.get("iterations", 0)),
                          values_per_packet=int(head["values_per_packet"]), source=str(head.get("source", "")))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise MaskFileError(f"{name}:1: bad header: {exc}") from exc
    for number, line in enumerate(f, start=2):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        try:
            it, stage, worker, tensor, ranges = line.split()
            masks.add(int(it), stage, int(worker), int(tensor), parse_ranges(ranges).tolist())
        except (ValueError, ExperimentError) as exc:
            raise MaskFileError(f"{name}:{number}: {exc} in {line!r}") from exc
    return masks


@dataclass(frozen=True)
class PacketLayout:
    """How a model's flat gradient (its tensors concatenated) is cut into DLCP packets."""

    sizes: tuple[int, ...]
    values_per_packet: int = MAX_COUNT_MTU_1500

    @cached_property
    def tensor_packets(self) -> np.ndarray:
        return np.array([max(1, math.ceil(s / self.values_per_packet)) for s in self.sizes], dtype=np.int64)

    @cached_property
    def tensor_first_packet(self) -> np.ndarray:
        """Index of each tensor's first packet among all packets."""
        return np.concatenate([[0], np.cumsum(self.tensor_packets)[:-1]]).astype(np.int64)

    @cached_property
    def packets(self) -> int:
        return int(self.tensor_packets.sum())

    @cached_property
    def element_packet(self) -> np.ndarray:
        """For each element of the flat gradient, the index of the packet carrying it."""
        parts = [first + np.arange(size) // self.values_per_packet
                 for first, size in zip(self.tensor_first_packet, self.sizes)]
        return np.concatenate(parts).astype(np.int64)

    @cached_property
    def packet_starts(self) -> np.ndarray:
        """Offset of each packet's first value in the flat gradient."""
        offsets = np.concatenate([[0], np.cumsum(self.sizes)[:-1]])
        return np.concatenate([off + np.arange(k) * self.values_per_packet
                               for off, k in zip(offsets, self.tensor_packets)]).astype(np.int64)

    def packet_counts(self, tensor: int) -> np.ndarray:
        """Values of each packet of `tensor` (the last may be shorter)."""
        n, size = self.values_per_packet, self.sizes[tensor]
        k = int(self.tensor_packets[tensor])
        counts = np.full(k, n, dtype=np.int64)
        counts[-1] = size - n * (k - 1)
        return counts


def element_mask(layout: PacketLayout, lost_packets: np.ndarray) -> np.ndarray:
    """Boolean mask over the flat gradient: True where the value's packet was lost."""
    return lost_packets[layout.element_packet]


class MaskSource(Protocol):
    """Which packets each worker lost in one iteration, given the workers' flat gradients."""

    name: str

    def lost(self, iteration: int, grads: Sequence[np.ndarray]) -> tuple[list[np.ndarray], list[np.ndarray] | None]:
        """Per worker a boolean array over the layout's packets for the reduce stage, and the
        same for the gather stage (None when nothing is lost there)."""
        ...


class NoLoss:
    name = "none"

    def __init__(self, layout: PacketLayout) -> None:
        self.layout = layout

    def lost(self, iteration: int, grads: Sequence[np.ndarray]) -> tuple[list[np.ndarray], list[np.ndarray] | None]:
        return [np.zeros(self.layout.packets, dtype=bool) for _ in grads], None


class RandomLoss:
    """Each packet of each worker's push lost independently with probability `share`."""

    def __init__(self, layout: PacketLayout, share: float, seed: int) -> None:
        if not 0.0 <= share < 1.0:
            raise ExperimentError(f"loss share must be in [0, 1), got {share}")
        self.layout, self.share = layout, share
        self.rng = np.random.default_rng([seed, 0x5EED, round(share * 10_000)])
        self.name = f"random-{share * 100:g}"

    def lost(self, iteration: int, grads: Sequence[np.ndarray]) -> tuple[list[np.ndarray], list[np.ndarray] | None]:
        return [self.rng.random(self.layout.packets) < self.share for _ in grads], None


def smallest_packets(layout: PacketLayout, grad: np.ndarray, share: float) -> np.ndarray:
    """The packets DLCP marks drop-eligible under a bound of `share` for every layer: per tensor,
    packets in increasing magnitude class (ties by sequence) while their values stay within
    ``floor(share * L)`` (``hosts.packetize.DropRule`` with the same share for every layer).
    A packet's class is the class of its largest |value| (``hosts.packetize.magnitude_classes``)."""
    rule = DropRule(bound=share, back_share=1.0)
    out = np.zeros(layout.packets, dtype=bool)
    peaks = np.maximum.reduceat(np.abs(np.asarray(grad, dtype=np.float32)), layout.packet_starts)
    classes = magnitude_classes(peaks, 1)
    for t, (first, size) in enumerate(zip(layout.tensor_first_packet, layout.sizes)):
        counts = layout.packet_counts(t)
        out[first: first + len(counts)] = rule.eligible(classes[first: first + len(counts)], counts, size, 0.0)
    return out


class SmallestLoss:
    """Every worker loses all its drop-eligible packets (the `share` smallest by DLCP's rule)."""

    def __init__(self, layout: PacketLayout, share: float) -> None:
        if not 0.0 <= share < 1.0:
            raise ExperimentError(f"loss share must be in [0, 1), got {share}")
        self.layout, self.share = layout, share
        self.name = f"smallest-{share * 100:g}"

    def lost(self, iteration: int, grads: Sequence[np.ndarray]) -> tuple[list[np.ndarray], list[np.ndarray] | None]:
        return [smallest_packets(self.layout, g, self.share) for g in grads], None


def relative_tensor_map(model_tensors: int, recorded_tensors: int) -> list[int]:
    """Model tensor ``j`` of ``J`` -> recorded tensor ``floor(j * (T - 1) / (J - 1) + 1/2)`` of ``T``."""
    J, T = model_tensors, recorded_tensors
    return [math.floor(j * (T - 1) / (J - 1) + 0.5) if J > 1 else 0 for j in range(J)]


class RecordedLoss:
    """A recorded run's masks replayed onto a model's layout.

    Mapping when the model differs from the recorded job: model tensor ``j`` of ``J`` takes
    recorded tensor ``floor(j * (T - 1) / (J - 1) + 1/2)`` of ``T`` (same relative position, front to
    back); its packet ``k`` of ``n`` is lost when recorded packet ``floor(k * m / n)`` of ``m``
    was; iteration ``i`` replays recorded iteration ``i mod iterations``; worker ``w`` replays
    recorded worker ``w mod workers``. Same tensors and sizes give the identity.
    """

    def __init__(self, layout: PacketLayout, masks: LossMasks, name: str) -> None:
        self.layout, self.masks, self.name = layout, masks, name
        self.tensor_map = relative_tensor_map(len(layout.sizes), len(masks.tensors))
        self.packet_map = []
        for j, n in enumerate(layout.tensor_packets):
            m = masks.packets(self.tensor_map[j])
            self.packet_map.append((np.arange(n) * m) // n)

    def _stage(self, iteration: int, stage: str, workers: int) -> list[np.ndarray]:
        it = iteration % max(1, self.masks.iterations)
        out = []
        for w in range(workers):
            lost = np.zeros(self.layout.packets, dtype=bool)
            for j, first in enumerate(self.layout.tensor_first_packet):
                rec = self.masks.lost.get((it, stage, w % self.masks.workers, self.tensor_map[j]))
                if rec is not None:
                    hit = np.zeros(self.masks.packets(self.tensor_map[j]), dtype=bool)
                    hit[rec] = True
                    lost[first: first + len(self.packet_map[j])] = hit[self.packet_map[j]]
            out.append(lost)
        return out

    def lost(self, iteration: int, grads: Sequence[np.ndarray]) -> tuple[list[np.ndarray], list[np.ndarray] | None]:
        gather = self._stage(iteration, GATHER, len(grads))
        return self._stage(iteration, REDUCE, len(grads)), (gather if any(g.any() for g in gather) else None)


def shares_from_counts(counts: Sequence[dict[int, int]], tensor_values: Sequence[int],
                       workers: int) -> list[dict[int, float]]:
    """Per iteration, the share of each recorded tensor's values zero-filled over `workers`
    workers: ``min(1, count / (values * workers))`` (counts summed over the workers)."""
    out: list[dict[int, float]] = []
    for it in counts:
        shares: dict[int, float] = {}
        for t, n in it.items():
            if not 0 <= t < len(tensor_values):
                raise ExperimentError(f"zero-filled count for tensor {t}, but the run has {len(tensor_values)} tensors")
            if n > 0:
                shares[t] = min(1.0, n / (tensor_values[t] * workers))
        out.append(shares)
    return out


def smallest_whole_packets(peaks: np.ndarray, counts: np.ndarray, share: float) -> np.ndarray:
    """Packets of one tensor (peak |value| and values of each) lost as a zero-filled `share`
    of its values: in increasing peak magnitude (ties by sequence), whole packets while their
    values stay within ``floor(share * L)``, and at least the smallest one when that budget is
    positive (the fabric loses whole packets)."""
    lost = np.zeros(len(peaks), dtype=bool)
    want = math.floor(share * int(counts.sum()))
    if want <= 0:
        return lost
    order = np.argsort(peaks, kind="stable")
    take = np.cumsum(counts[order]) <= want
    take[0] = True
    lost[order[take]] = True
    return lost


class CountedLoss:
    """A run that recorded how many values of each tensor were zero-filled per iteration
    (the trace experiment's ``lost_by_tensor``), not which packets: each iteration, one
    worker (`worker`) loses, in every model tensor, the smallest-magnitude packets covering
    the share its recorded tensor lost (:func:`smallest_whole_packets`), at the reduce stage.
    Tensors map by relative position (:func:`relative_tensor_map`); iteration ``i`` replays
    recorded iteration ``i mod iterations``."""

    def __init__(self, layout: PacketLayout, shares: Sequence[dict[int, float]], recorded_tensors: int,
                 name: str, worker: int = 0) -> None:
        if not shares:
            raise ExperimentError(f"{name}: the run recorded no iterations")
        self.layout, self.shares, self.name, self.worker = layout, list(shares), name, worker
        self.tensor_map = relative_tensor_map(len(layout.sizes), recorded_tensors)

    def lost(self, iteration: int, grads: Sequence[np.ndarray]) -> tuple[list[np.ndarray], list[np.ndarray] | None]:
        out = [np.zeros(self.layout.packets, dtype=bool) for _ in grads]
        shares = self.shares[iteration % len(self.shares)]
        if not shares or self.worker >= len(grads):
            return out, None
        peaks = np.maximum.reduceat(np.abs(np.asarray(grads[self.worker], dtype=np.float32)), self.layout.packet_starts)
        for j, first in enumerate(self.layout.tensor_first_packet):
            share = shares.get(self.tensor_map[j], 0.0)
            if share > 0:
                k = int(self.layout.tensor_packets[j])
                out[self.worker][first: first + k] = smallest_whole_packets(
                    peaks[first: first + k], self.layout.packet_counts(j), share)
        return out, None
