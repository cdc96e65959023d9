"""The scheduler interface shared by the live worker agent and the simulator.

A scheduler decides *which gradient bytes go on the wire next*. It is pure and
event-driven: no I/O, no sleeping, no clocks. Whoever drives it (the worker agent in real
time, :mod:`simulator.engine` in simulated time) passes the current time in seconds and
reports events; the scheduler answers with what to send.

Model
-----
* ``layers`` is a sequence of :class:`Layer` in **forward order** (index 0 is the input-side
  layer). Backward runs from the last layer down to layer 0, so gradients become ready in
  descending index order.
* Elements of a layer's gradient are float32 unless a cost model says otherwise; a
  :class:`Segment` names the element range ``[start, stop)`` of one layer.
* A :class:`Transfer` is one message: one or more segments (merged layers for
  ``mgwfbp``/``fusion``/``synceasgd``, a partition of a layer for ``p3``/``prophet``/``dlcp``),
  its size in bytes, a priority 0..7 (7 = most urgent; the DLCP ``prio_hint``) and, for
  ``dlcp``, a :class:`LossPolicy`. Ring all-reduce or PS push/pull of a transfer is one
  collective operation for the driver.

Driving protocol (one iteration)
--------------------------------
1. ``start_iteration(layers, now)`` when the backward pass of an iteration begins.
2. ``on_gradient_ready(layer_index, now)`` when a layer's gradient is computed.
3. After every event, call ``next_transfer(now, link_idle)`` repeatedly until it returns a
   :class:`Wait` or ``None``; each :class:`Transfer` it returns is to be started now (the
   driver sends it; if the link is busy it queues behind what is in flight, FIFO).
   ``link_idle`` is True when no transfer handed out earlier is still in flight.
   ``Wait(until=t)`` means: nothing to send now; call again at time ``t`` or at the next
   event, whichever comes first (``until=None``: at the next event). ``None`` means every
   gradient byte of this iteration has been handed out.
4. ``on_transfer_done(transfer, now, achieved_bytes_per_s)`` when a transfer completes
   (the driver measures the throughput it achieved; schedulers may learn bandwidth from it).

Every element of every layer is handed out exactly once per iteration; drivers may check
this with :func:`covered_numel`.
"""

from __future__ import annotations

import abc
import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from gradfabric.errors import GradfabricError
from gradfabric.traces import Layer  # one definition, shared with the trace reader

class SchedulerError(GradfabricError):
    """A scheduler was misused or misconfigured (unknown name, bad option, bad event)."""


#: Priority range of transfers (the DLCP header's ``prio_hint``): 0 lowest, 7 most urgent.
MAX_PRIORITY = 7


@dataclass(frozen=True)
class AlphaBeta:
    """Cost of one collective of ``M`` bytes: ``alpha + beta * M`` seconds."""

    alpha: float
    beta: float
    nbytes: int = 4

    def seconds(self, nbytes: int | float) -> float:
        """Time to move a message of ``nbytes`` bytes."""
        return self.alpha + self.beta * nbytes

    def seconds_for_numel(self, numel: int | float) -> float:
        """Time to move ``numel`` elements of ``self.nbytes`` bytes each."""
        return self.alpha + self.beta * numel * self.nbytes


@dataclass(frozen=True)
class Segment:
    """Elements ``[start, stop)`` of layer ``layer_index``'s gradient."""

    layer_index: int
    start: int
    stop: int

    @property
    def numel(self) -> int:
        return self.stop - self.start


@dataclass(frozen=True)
class LossPolicy:
    """Bounded-loss tagging of a DLCP transfer.

    ``loss_bound``: fraction of the message's values that may be lost without
    retransmission (0 = reliable). ``drop_eligible_share``: at most this fraction of the
    message's packets, smallest magnitude first, carry the drop-eligible flag
    (never more than ``loss_bound``).
    """

    loss_bound: float
    drop_eligible_share: float


_transfer_ids = itertools.count(1)


@dataclass(frozen=True)
class Transfer:
    """One message to send: segments of one or more layers, in the order given."""

    segments: tuple[Segment, ...]
    nbytes: int
    priority: int = 0
    loss: LossPolicy | None = None
    id: int = field(default_factory=lambda: next(_transfer_ids))

    @property
    def layer_indices(self) -> tuple[int, ...]:
        """Layers this transfer carries (each once, in segment order)."""
        return tuple(dict.fromkeys(s.layer_index for s in self.segments))

    @property
    def numel(self) -> int:
        return sum(s.numel for s in self.segments)


@dataclass(frozen=True)
class Wait:
    """Nothing to send now: call again at ``until`` (seconds) or at the next event."""

    until: float | None = None


Decision = Transfer | Wait | None


class Scheduler(abc.ABC):
    """Base of every gradient scheduler; see the module docstring for the protocol."""

    #: Registry name, set by :func:`hosts.schedulers.registry.register`.
    name: str = ""

    def __init__(self, *, cost: AlphaBeta | None = None, nbytes: int = 4) -> None:
        """``cost`` is the driver's all-reduce cost model (used by ``mgwfbp``, ignored by
        schedulers that do not plan with it); every scheduler accepts it so drivers can
        build any of them the same way."""
        self.cost = cost
        self.nbytes = cost.nbytes if cost is not None else nbytes
        self.layers: tuple[Layer, ...] = ()

    def start_iteration(self, layers: Sequence[Layer], now: float) -> None:
        """Begin an iteration's backward pass at ``now``; forget per-iteration state."""
        self.layers = tuple(layers)

    @abc.abstractmethod
    def on_gradient_ready(self, layer_index: int, now: float) -> None:
        """Layer ``layer_index``'s gradient is computed at ``now``."""

    @abc.abstractmethod
    def next_transfer(self, now: float, link_idle: bool) -> Decision:
        """What to send at ``now``: a transfer, a wait, or None when all is handed out."""

    def on_transfer_done(self, transfer: Transfer, now: float, achieved_bytes_per_s: float) -> None:
        """``transfer`` completed at ``now`` at the given throughput."""

    def segment_bytes(self, segments: Iterable[Segment]) -> int:
        return sum(s.numel for s in segments) * self.nbytes


def layer_priority(layer_index: int, num_layers: int) -> int:
    """Priority of a layer's gradient: front (input-side) layers most urgent.

    The layers are cut into ``MAX_PRIORITY + 1`` equal bands: layer 0 gets 7, the last 0.
    """
    if num_layers <= 0:
        raise SchedulerError("layer_priority needs at least one layer")
    band = layer_index * (MAX_PRIORITY + 1) // num_layers
    return MAX_PRIORITY - min(band, MAX_PRIORITY)


def covered_numel(transfers: Iterable[Transfer]) -> dict[int, int]:
    """Elements handed out per layer index (a driver's check that each is sent once)."""
    covered: dict[int, int] = {}
    for transfer in transfers:
        for seg in transfer.segments:
            covered[seg.layer_index] = covered.get(seg.layer_index, 0) + seg.numel
    return covered
