"""What a training-experiment scenario does to a job's messages: one port model per
scenario x configuration, and the link and scheduler the engine drives with it.

The bottleneck is the egress port towards a rank's host, shared with the scenario's
background (``experiments/scenarios.py``: long TCP flows into the job's host ports, or UDP
at half a port). Per port: ``port_pps`` full frames per second, a queue of
``queue_packets`` per priority, strict priority between queues, non-preemptive.

* **Priority queue** (the job one class above the background): the job's packets find at
  most the packet in service ahead (half a packet on average) and get the whole port.
* **Shared FIFO with a long TCP flow**: TCP fills a drop-tail queue until a loss and then
  cuts its window by CUBIC's factor 0.7, so the queue holds between 0.7 and 1 of its depth:
  0.85 on average (the path's own delay is small beside the queue). Flow-level max-min
  sharing gives the job half the port while both send. Packets are lost as the TCP flow's
  are; Mathis' law (``rate = 1.22 MSS / (RTT sqrt(p))``) with the flow's window of about
  the queue gives ``p = (1.22 / W)^2``.
* **Shared FIFO with UDP at a share u of the port**: max-min sharing leaves the job
  ``max(1 - u, 1/2)`` of the port; no standing queue, no loss (the UDP flows are below the
  port's rate).
* **A TCP ring's own ACKs** (:func:`with_own_acks`): the ports forward packets, whatever their
  size, and a ring's host port carries the ACKs of its host's own sends beside the data it
  receives: one per two segments (delayed ACK; the fabric's veths have no GRO), so kernel
  TCP's data get 2/3 of the job's share. The DLCP transport answers once per message.
* **Hops**: each store-and-forward switch port on the path adds one frame's time.
* **ECMP**: the tcp and udp scenarios' background and job meet at the hosts' ports, below
  any ECMP choice, so hashing (per flow) or spraying (per packet) does not change the
  bottleneck; collisions on the spines are not modelled.

**Hosts**: the busiest host handles (sends or receives) at most ``host_pps`` packets a
second (:mod:`simulator.host_model`); a message holds the link for its bytes at the port's
rate *plus* its packets at the host's. The two add up rather than overlap: the transports
move a message in windows far smaller than it, and on the CPU-starved emulation host each
window's handling at both ends waits for a CPU while the port is idle, and the port's
transmission while the hosts are (a pipelined host would make it the longer of the two; tried
again for the paced DLCP transport at 5,000 packets/s, simulator/README.md, and not taken).

**Multitenant**: two rings cross the spines and share the leaves' two uplinks; hashed per
flow, the jobs land on the same uplink with probability 1/2 (half the port each), else on
different ones; sprayed per packet they pool both (the whole port each). No background
shares the host ports. **Hotspot** is modelled alike: its bulk job (the same configuration
without compute, a ring h2-h6) crosses the same uplinks.

A collective's step costs ``(hops + queued packets) / port_pps`` of latency and its bytes
at the job's share of the port. A ring of ``N`` ranks: ``2(N-1)`` steps of ``M/N`` bytes. A
star (parameter server on rank 0): the server's port carries every worker's push and pull,
one after the other; the pushes come in at the job's share of the port, the pulls leave it
in the other direction, where incast's background (long TCP into the server) does not go:
at the whole port (``CollectiveLink.pull_share``). With ``pull_flows`` (``star-pulls``) the
pulls hold neither the pushes' port nor the link: the server's host link is not rate-limited
(only the switches' egress queues are), and every worker sits on the other leaf, so the pulls
leave the server's leaf over its two uplinks, a worker's flow each, hashed per flow (the busiest
uplink carries :func:`busiest_of` of them; sprayed per packet, half each), and complete in the
round trip, overlapping the next message's pushes (a message's pulls are shorter than its
pushes: the link model of ``simulator.engine`` serves one transfer at a time). Kernel TCP's pushes are ``W`` flows into
the server's FIFO beside the background's one (:func:`split_fifo`): ``W / (W + 1)`` of the
port and Mathis' loss with the standing queue split ``W + 1`` ways. (A ring keeps the form
above, the background's flow holding the queue; split between it and the job's flow, its
loss would be four times as high: validated alike, see simulator/README.md.)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from hosts.schedulers import Decision, Layer, Scheduler, Segment, Transfer, Wait
from simulator.errors import SimulatorError

#: Gradient payload of one DLCP packet (361 float32 values) and of one TCP segment.
DLCP_PAYLOAD_BYTES = 361 * 4
TCP_PAYLOAD_BYTES = 1448
#: CUBIC's multiplicative decrease: the queue oscillates between 0.7 and 1 of its depth.
CUBIC_BETA = 0.7
#: Mathis' constant for periodic loss.
MATHIS_C = 1.22


@dataclass(frozen=True)
class PortModel:
    """The job's view of its bottleneck port."""

    port_pps: float
    share: float  # of the port's rate the job gets while it sends
    queued_packets: float  # packets ahead of each of the job's packets
    loss_rate: float  # per packet
    hops: int
    payload_bytes: int

    @property
    def step_latency_s(self) -> float:
        return (self.hops + self.queued_packets) / self.port_pps

    @property
    def bytes_per_s(self) -> float:
        return self.share * self.port_pps * self.payload_bytes

    def packets(self, nbytes: float) -> int:
        return max(1, math.ceil(nbytes / self.payload_bytes))


def port_model(*, port_pps: float, queue_packets: int, background: str, job_above_background: bool,
               udp_share: float = 0.5, hops: int = 3, payload_bytes: int = DLCP_PAYLOAD_BYTES) -> PortModel:
    """The port model of one scenario x configuration (module doc); ``background`` is
    ``tcp``, ``udp`` or ``none``."""
    if port_pps <= 0 or queue_packets < 1:
        raise SimulatorError(f"bad port: {port_pps} packets/s, queue of {queue_packets}")
    if background not in ("tcp", "udp", "none"):
        raise SimulatorError(f"unknown background {background!r}; choose tcp, udp or none")
    if job_above_background or background == "none":
        return PortModel(port_pps, 1.0, 0.5 if background != "none" else 0.0, 0.0, hops, payload_bytes)
    if background == "udp":
        return PortModel(port_pps, max(1.0 - udp_share, 0.5), 0.0, 0.0, hops, payload_bytes)
    queued = (1 + CUBIC_BETA) / 2 * queue_packets
    window = queued + hops
    return PortModel(port_pps, 0.5, queued, (MATHIS_C / window) ** 2, hops, payload_bytes)


def split_fifo(port: PortModel, flows: int) -> PortModel:
    """A shared FIFO behind one long TCP flow (the background) that ``flows`` of the job's TCP
    flows enter at once (a star's workers pushing to the server together): max-min gives the
    job ``flows / (flows + 1)`` of the port, and the ``flows + 1`` flows hold the standing
    queue between them, each a window of ``(queued + hops) / (flows + 1)``, so Mathis' loss is
    ``(1.22 (flows + 1) / (queued + hops))^2``. A port without that loss (priority, UDP, no
    background) is returned as it is."""
    if flows < 1:
        raise SimulatorError(f"a split FIFO needs at least one flow of the job, not {flows}")
    if port.loss_rate == 0:
        return port
    window = (port.queued_packets + port.hops) / (flows + 1)
    return replace(port, share=flows / (flows + 1), loss_rate=min(1.0, (MATHIS_C / window) ** 2))


def with_own_acks(port: PortModel, segments_per_ack: int) -> PortModel:
    """A kernel-TCP ring's port: each rank's host port carries the data it receives and the
    ACKs of the data it sends (one per ``segments_per_ack`` segments: delayed ACK), and the
    switches forward packets, not bytes, so the data get ``segments / (segments + 1)`` of the
    job's packet share (2/3 with delayed ACK)."""
    if segments_per_ack < 1:
        raise SimulatorError(f"an ACK covers at least one segment, not {segments_per_ack}")
    return replace(port, share=port.share * segments_per_ack / (segments_per_ack + 1))


def busiest_of(flows: int, links: int = 2) -> float:
    """The expected number of ``flows`` on the busiest of ``links`` when each flow is hashed to
    one of them uniformly and independently (4 flows on 2 links: 2.75)."""
    if flows < 1 or links < 1:
        raise SimulatorError(f"need a flow and a link, not {flows} flows on {links} links")
    counts = {(0,) * links: 1.0}
    for _ in range(flows):
        grown: dict[tuple[int, ...], float] = {}
        for c, p in counts.items():
            for i in range(links):
                key = tuple(sorted(c[:i] + (c[i] + 1,) + c[i + 1:]))
                grown[key] = grown.get(key, 0.0) + p / links
        counts = grown
    return sum(max(c) * p for c, p in counts.items())


@dataclass(frozen=True)
class CollectiveLink:
    """A collective on the port model: the bytes hold the link, the steps' latency is the
    round trip (the link is free meanwhile, so windows of several messages overlap it)."""

    port: PortModel
    ranks: int
    collective: str = "ring"
    #: The busiest host's packet-rate ceiling (:mod:`simulator.host_model`); infinite: none.
    host_pps: float = math.inf
    #: A star's pulls leave the server's port in the other direction from its pushes, which
    #: the background shares (incast's long TCP flows into the server): the share of the port
    #: the pulls get (None: the port model's, as the pushes).
    pull_share: float | None = None
    #: The busiest host's CPU time per message it sends and receives, at the CPU share it got
    #: (the DLCP transport's per-message work: packing, state, answers, wake-ups); 0: none.
    message_s: float = 0.0
    #: A star's pulls over the server's leaf's uplinks (module doc): the workers' pulls the
    #: busiest uplink carries; None: the pulls hold the server's port after the pushes.
    pull_flows: float | None = None
    #: With ``pull_flows``: a push's credit is back as it leaves the link (kernel TCP: the push
    #: completes once the socket's buffer holds it), else after the steps' latency (an acknowledged send).
    credit_on_send: bool = False

    def __post_init__(self) -> None:
        if self.ranks < 2 or self.collective not in ("ring", "star"):
            raise SimulatorError(f"a collective needs 2 or more ranks and ring or star, not {self.ranks}, "
                                 f"{self.collective!r}")

    def steps(self) -> int:
        return 2 * (self.ranks - 1) if self.collective == "ring" else 2

    def wire_bytes(self, nbytes: int) -> float:
        """Bytes through the busiest port for a message of ``nbytes``."""
        if self.collective == "ring":
            return 2 * (self.ranks - 1) / self.ranks * nbytes
        return 2 * (self.ranks - 1) * nbytes  # the server's port: every worker's push, then every pull

    def seconds(self, transfer: Transfer) -> float:
        """The port's time for the bytes plus the host's for the packets (module doc)."""
        wire = self.wire_bytes(transfer.nbytes) / self.port.bytes_per_s
        if self.collective == "star" and self.pull_flows is not None:  # the pushes alone hold the port
            wire /= 2
        elif self.collective == "star" and self.pull_share is not None:  # pulls at their own share
            half = self.wire_bytes(transfer.nbytes) / 2
            wire = half / self.port.bytes_per_s + half / (self.pull_share * self.port.port_pps * self.port.payload_bytes)
        messages = self.host_messages() * self.message_s
        if math.isinf(self.host_pps):
            return wire + messages
        return wire + messages + self.host_packets(transfer.nbytes) / self.host_pps

    def round_trip_s(self, transfer: Transfer) -> float:
        """The steps' latency, and a star's pulls where they leave over the uplinks (``pull_flows``)."""
        pulls = 0.0
        if self.collective == "star" and self.pull_flows is not None:
            pulls = self.pull_flows * transfer.nbytes / (self.port.port_pps * self.port.payload_bytes)
        return self.steps() * self.port.step_latency_s + pulls

    def credit_s(self, transfer: Transfer) -> float:
        """When the sender hears the transfer done (a scheduler's credit back): a star's push is
        acknowledged before its pulls come back (the trace worker pulls in a thread of its own),
        with ``pull_flows`` after the steps' latency, or as it leaves the link (``credit_on_send``);
        otherwise at completion."""
        if self.collective == "star" and self.pull_flows is not None:
            return 0.0 if self.credit_on_send else self.steps() * self.port.step_latency_s
        return self.round_trip_s(transfer)

    def packets(self, nbytes: int) -> int:
        """Packets of one message on the busiest port."""
        per_step = self.wire_bytes(nbytes) / self.steps()
        return self.steps() * self.port.packets(per_step)

    def host_messages(self) -> int:
        """Messages the busiest host sends and receives for one collective, each counted once
        for both its ends: a ring member sends one and receives one per step (``2(N-1)``
        steps); a star's server receives every worker's push and sends every pull, a push's
        receiving end and a pull's sending end for each of its ``N-1`` workers."""
        return self.steps() if self.collective == "ring" else self.ranks - 1

    def host_packets(self, nbytes: int) -> int:
        """Packets the busiest host sends and receives for one message: a ring member
        receives as many as it sends; a star's server receives the pushes and sends the
        pulls, which :meth:`wire_bytes` already counts both."""
        return self.packets(nbytes) * (2 if self.collective == "ring" else 1)


class WindowScheduler(Scheduler):
    """Each layer's gradient alone, in ready order, at most ``window`` messages in flight
    (DDP's buckets on gloo: two at a time, its worker threads; the DLCP hook: ``in_flight`` sender threads)."""

    name = "window"

    def __init__(self, window: int, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        if window < 1:
            raise SimulatorError(f"window must be at least 1, not {window}")
        self.window = window
        self._ready: list[int] = []
        self._sent = 0
        self._outstanding = 0

    def start_iteration(self, layers: Sequence[Layer], now: float) -> None:
        super().start_iteration(layers, now)
        self._ready, self._sent, self._outstanding = [], 0, 0

    def on_gradient_ready(self, layer_index: int, now: float) -> None:
        self._ready.append(layer_index)

    def next_transfer(self, now: float, link_idle: bool) -> Decision:
        if self._sent == len(self.layers):
            return None
        if self._sent == len(self._ready) or self._outstanding >= self.window:
            return Wait()
        layer = self.layers[self._ready[self._sent]]
        self._sent += 1
        self._outstanding += 1
        segments = (Segment(layer.index, 0, layer.numel),)
        return Transfer(segments=segments, nbytes=self.segment_bytes(segments))

    def on_transfer_done(self, transfer: Transfer, now: float, achieved_bytes_per_s: float) -> None:
        self._outstanding -= 1
