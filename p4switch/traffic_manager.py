"""Traffic manager: per egress port, strict-priority queues with tail drop and rate limits.

Time is passed in by the caller (microseconds), so the same code serves the real switch
(wall clock) and deterministic tests (a virtual clock).

The model is BMv2 1.15's (``simple_switch``, ``QueueingLogicPriRL``):

- a packet joins the queue ``standard_metadata.priority`` of its egress port; a priority
  not below ``priority_queues`` is dropped; a full queue (``depth`` packets) tail-drops;
- each priority queue has its own rate (packets/s; unlimited unless set) and the pacing is
  decided at enqueue: the packet may leave at ``max(now, previous packet's time + 1/rate)``;
- among the queues of a port whose head may leave, the highest priority leaves first;
- ``enq_qdepth``: packets in the packet's own priority queue just before it joined;
  ``deq_qdepth``: packets left in that queue once it left; ``qid``: the priority;
  ``deq_timedelta``: microseconds it spent queued.

So on BMv2 a rate set for a port (``set_queue_rate R PORT``) is given to each of its
priority queues: the port as a whole carries up to ``priority_queues x R``, and strict
priority only orders packets that are due at the same time.

Embedded-only extension (BMv2 has nothing like it): a **port rate** (:meth:`set_port_rate`),
one rate shared by all priority queues of the port, applied at dequeue. With it the port is
one bottleneck and strict priority decides which queue gets it. Rates may also be in bits
per second (``10Mbps``), which BMv2 does not offer.
"""

from __future__ import annotations

import logging
import math
import re
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from p4switch.errors import P4SwitchError

log = logging.getLogger("p4switch.tm")

DEFAULT_QUEUE_DEPTH = 64


class QueueConfigError(P4SwitchError):
    """A queue rate, depth or priority that cannot be applied."""


@dataclass(frozen=True)
class Rate:
    """A rate limit: ``value`` packets per second, or bits per second when ``per_bit``."""

    value: float
    per_bit: bool = False

    _PATTERN = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([kKmMgG]?)(pps|bps)?\s*$")

    @classmethod
    def parse(cls, text: str) -> Rate:
        """``1000``/``1000pps`` (packets/s, BMv2's unit), ``10Mbps``, ``2.5kpps``..."""
        match = cls._PATTERN.match(text)
        if not match:
            raise QueueConfigError(f"bad rate {text!r}: expected NUMBER[k|M|G][pps|bps]")
        scale = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[match.group(2).lower()]
        value = float(match.group(1)) * scale
        if value <= 0:
            raise QueueConfigError(f"bad rate {text!r}: must be positive")
        return cls(value, per_bit=match.group(3) == "bps")

    def service_us(self, size_bytes: int) -> float:
        """Microseconds one packet of ``size_bytes`` occupies at this rate."""
        if self.per_bit:
            return size_bytes * 8 * 1e6 / self.value
        return 1e6 / self.value

    def __str__(self) -> str:
        return f"{self.value:g}{'bps' if self.per_bit else 'pps'}"


class QueueMetadata(NamedTuple):
    """What the egress pipeline sees of the queue a packet went through (the attributes of
    the pipeline's ``QueueMeta``, so it is handed to egress as it is)."""

    enq_timestamp: int
    enq_qdepth: int
    deq_timedelta: int
    deq_qdepth: int
    qid: int


class Departure(NamedTuple):
    """A packet leaving its queue for the egress pipeline."""

    item: Any
    port: int
    priority: int
    size: int
    time_us: int
    queue: QueueMetadata


class _Queued(NamedTuple):
    item: Any
    size: int
    enq_timestamp: int
    enq_qdepth: int
    send_us: float  # the earliest time its own queue's rate lets it leave (decided at enqueue)


@dataclass(slots=True)
class _PriorityQueue:
    depth: int
    rate: Rate | None = None
    last_send: float = -math.inf  # departure time granted to the last packet that joined
    last_size: int = 0
    packets: deque[_Queued] = field(default_factory=deque)

    def next_send(self, now_us: float, size: int) -> float:
        """BMv2's ``max(now, last_sent + delay)`` (the delay of a bit rate is the previous
        packet's transmission time)."""
        if self.rate is None:
            return max(now_us, self.last_send)
        return max(now_us, self.last_send + self.rate.service_us(self.last_size))


@dataclass(slots=True)
class _Port:
    queues: list[_PriorityQueue]
    rate: Rate | None = None  # the embedded-only port rate, shared by every priority queue
    free_at: float = 0.0
    queued: int = 0  # packets in all priority queues together
    order: int = 0  # creation order: breaks ties between ports due at the same time


class TrafficManager:
    """Strict-priority egress queues for every port, driven by caller-supplied time."""

    def __init__(self, priority_queues: int = 1, default_depth: int = DEFAULT_QUEUE_DEPTH) -> None:
        if not 1 <= priority_queues <= 8:
            raise QueueConfigError(f"priority queues must be 1..8, not {priority_queues}")
        if default_depth < 1:
            raise QueueConfigError(f"queue depth must be at least 1, not {default_depth}")
        self.priority_queues = priority_queues
        self.default_depth = default_depth
        self._ports: dict[int, _Port] = {}
        self._queued = 0  # packets queued on every port together
        self._busy: dict[int, _Port] = {}  # ports with packets queued, in first-queued order
        #: Drops by (port, priority, reason); reasons: ``queue_full``, ``bad_priority``.
        self.drops: Counter[tuple[int, int, str]] = Counter()
        #: Packets that left, by (port, priority).
        self.departed: Counter[tuple[int, int]] = Counter()

    # -- configuration -----------------------------------------------------------------

    def _port(self, port: int) -> _Port:
        state = self._ports.get(port)
        if state is None:
            state = _Port([_PriorityQueue(self.default_depth) for _ in range(self.priority_queues)],
                          order=len(self._ports))
            self._ports[port] = state
        return state

    def _check_priority(self, priority: int) -> None:
        if not 0 <= priority < self.priority_queues:
            raise QueueConfigError(
                f"priority {priority} out of range: this switch has {self.priority_queues} "
                f"priority queue(s) (0..{self.priority_queues - 1})"
            )

    def set_queue_rate(self, port: int, rate: Rate | None, priority: int | None = None) -> None:
        """Rate of one priority queue, or (``priority`` None) of each priority queue of the
        port, as BMv2's ``set_queue_rate``; None = unlimited. Packets already queued keep the
        departure times they were given."""
        state = self._port(port)
        if priority is None:
            for queue in state.queues:
                queue.rate = rate
        else:
            self._check_priority(priority)
            state.queues[priority].rate = rate
        log.info("queue rate port %d %s = %s", port, "each prio" if priority is None else f"prio {priority}",
                 rate or "unlimited")

    def set_port_rate(self, port: int, rate: Rate | None) -> None:
        """Embedded-only: one rate shared by every priority queue of the port (strict priority
        decides who uses it); None = no port rate (BMv2's behaviour)."""
        self._port(port).rate = rate
        log.info("port rate port %d = %s", port, rate or "none")

    def set_queue_depth(self, port: int, depth: int, priority: int | None = None) -> None:
        """Depth in packets of every priority queue of a port, or of one."""
        if depth < 1:
            raise QueueConfigError(f"queue depth must be at least 1 packet, not {depth}")
        state = self._port(port)
        if priority is None:
            for queue in state.queues:
                queue.depth = depth
        else:
            self._check_priority(priority)
            state.queues[priority].depth = depth
        log.info("queue depth port %d%s = %d", port, "" if priority is None else f" prio {priority}",
                 depth)

    def ports(self) -> list[int]:
        """Ports that have been configured or have carried traffic."""
        return sorted(self._ports)

    def queue_settings(self, port: int) -> dict[str, object]:
        """The port rate and the queues' rates and depths, for display."""
        state = self._port(port)
        return {
            "port_rate": str(state.rate) if state.rate else "none",
            "queues": [
                {"priority": p, "depth": q.depth, "rate": str(q.rate) if q.rate else "unlimited",
                 "queued": len(q.packets)}
                for p, q in enumerate(state.queues)
            ],
        }

    # -- packet path --------------------------------------------------------------------

    def clear(self) -> int:
        """Discard every queued packet (a new pipeline was installed); returns how many."""
        discarded = 0
        for state in self._ports.values():
            for queue in state.queues:
                discarded += len(queue.packets)
                queue.packets.clear()
            state.queued = 0
        self._queued = 0
        self._busy.clear()
        return discarded

    def depth(self, port: int, priority: int | None = None) -> int:
        """Packets queued on a port (all priorities together), or in one of its queues."""
        state = self._ports.get(port)
        if state is None:
            return 0
        return state.queued if priority is None else len(state.queues[priority].packets)

    @property
    def queued(self) -> int:
        """Packets queued on every port together."""
        return self._queued

    def enqueue(self, item: Any, port: int, priority: int, size: int, now_us: int) -> bool:
        """Queue a packet; False (and a counted, logged drop) when it cannot be queued."""
        if not 0 <= priority < self.priority_queues:
            self.drops[(port, priority, "bad_priority")] += 1
            log.warning("drop port %d: priority %d but only %d priority queue(s)",
                        port, priority, self.priority_queues)
            return False
        state = self._ports.get(port) or self._port(port)
        queue = state.queues[priority]
        packets = queue.packets
        if len(packets) >= queue.depth:
            self.drops[(port, priority, "queue_full")] += 1
            log.debug("drop port %d prio %d: queue full (%d packets)", port, priority, queue.depth)
            return False
        send = queue.next_send(now_us, size)
        queue.last_send, queue.last_size = send, size
        packets.append(_Queued(item, size, now_us, len(packets), send))
        state.queued += 1
        self._queued += 1
        self._busy[port] = state
        return True

    def pass_through(self, item: Any, port: int, priority: int, size: int, now_us: int) -> Departure | None:
        """The departure of a packet that finds its port idle (nothing queued, no pacing still
        in effect), exactly as :meth:`enqueue` then :meth:`dequeue` at ``now_us`` would give it;
        None when the packet has to be queued (or dropped) by :meth:`enqueue`."""
        state = self._ports.get(port) or self._port(port)
        if state.queued or not 0 <= priority < self.priority_queues:
            return None
        queue = state.queues[priority]
        if state.free_at > now_us or queue.next_send(now_us, size) > now_us:
            return None
        queue.last_send, queue.last_size = now_us, size
        if state.rate is not None:
            state.free_at = now_us + state.rate.service_us(size)
        self.departed[(port, priority)] += 1
        return Departure(item, port, priority, size, now_us, QueueMetadata(now_us, 0, 0, 0, priority))

    def _candidate(self, state: _Port) -> tuple[float, int] | None:
        """Earliest departure time on a port and the priority that would leave then (the
        highest of those due at that time)."""
        if not state.queued:
            return None
        best_time = 0.0
        best_priority = -1
        port_free = state.free_at
        queues = state.queues
        for priority in range(len(queues) - 1, -1, -1):
            packets = queues[priority].packets
            if not packets:
                continue
            time = max(port_free, packets[0].send_us)
            if best_priority < 0 or time < best_time:
                best_time, best_priority = time, priority
        return (best_time, best_priority) if best_priority >= 0 else None

    def next_departure_us(self) -> float | None:
        """When the next packet can leave (None when every queue is empty)."""
        if not self._queued:
            return None
        times = [c[0] for s in self._busy.values() if (c := self._candidate(s)) is not None]
        return min(times) if times else None

    def dequeue(self, now_us: int) -> list[Departure]:
        """Every packet whose departure time has come by ``now_us``, in departure order."""
        out: list[Departure] = []
        while self._queued:
            found: tuple[float, int, int, int] | None = None
            for port, state in self._busy.items():
                candidate = self._candidate(state)
                if candidate is None or candidate[0] > now_us:
                    continue
                if found is None or (candidate[0], state.order) < (found[0], found[1]):
                    found = (candidate[0], state.order, port, candidate[1])
            if found is None:
                break
            time, _, port, priority = found
            out.append(self._pop(port, priority, time))
        return out

    def _pop(self, port: int, priority: int, time: float) -> Departure:
        state = self._ports[port]
        queue = state.queues[priority]
        packet = queue.packets.popleft()
        state.queued -= 1
        self._queued -= 1
        if not state.queued:
            del self._busy[port]
        if state.rate is not None:
            state.free_at = time + state.rate.service_us(packet.size)
        tick = int(time)
        self.departed[(port, priority)] += 1
        meta = QueueMetadata(packet.enq_timestamp, packet.enq_qdepth, max(0, tick - packet.enq_timestamp),
                             len(queue.packets), priority)
        return Departure(packet.item, port, priority, packet.size, tick, meta)
