"""A :class:`~simulator.packet.topology.Topology` built in ns-3.

Every link is an ns-3 point-to-point link (its rate and propagation delay), one /30 subnet
each. Every switch port gets gradfabric's ``PortQueueDisc`` (strict priority, per-queue
depth, early drop of drop-eligible packets, ECN marks) in front of a one-packet device
queue, so the queue disc, not the device, holds the backlog. Hosts keep a FIFO of
``host_queue_packets`` in their device. Every node routes with gradfabric's ``EcmpRouting``:
the equal-cost next hops of :meth:`Topology.next_hops`, a per-flow hash with the switch's
own seed, or per-packet random choice for DLCP packets when spraying. Every host gets the
ranks' CPU costs (:mod:`simulator.packet.host_cpu`; only the jobs' transports pay them).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from simulator.packet.host_cpu import HostCpu
from simulator.packet.runtime import PacketSimulationError, load
from simulator.packet.topology import Topology


#: With ``HostCosts.switch_port_clock``, a switch port's device runs this many times the port's
#: rate: it only carries what the port's clock releases (p4switch's veth, not the port's rate).
CLOCKED_DEVICE_SPEEDUP = 1000.0


@dataclass(frozen=True)
class HostCosts:
    """Costs of the emulated fabric's software that links and queues do not have (none by
    default; ``EcmpRouting::SetHostCosts``): each switch forwards one packet per
    ``switch_forward_s`` in arrival order, at most ``switch_backlog`` waiting, ahead of its
    egress queues; each packet delivered to a host arrives ``deliver_latency_s`` later.
    With ``switch_off_s`` > 0 each switch's CPU is on for ``switch_on_s``, then off for
    ``switch_off_s``, repeating (``SwitchSchedule``), ``switch_phase_s`` into its cycle at
    t = 0 (None: drawn per switch from the run's seed): while off it neither forwards nor
    sends from its ports. ``switch_each`` gives named switches their own (on, off) seconds
    (the others keep ``switch_on_s`` / ``switch_off_s``). ``switch_port_clock``: every switch
    port paces as p4switch's traffic manager (``PortQueueDisc::SetPortClock``): a packet leaves
    at max(its enqueue time, the port's free time) onto a device :data:`CLOCKED_DEVICE_SPEEDUP`
    times the port's rate, so the backlog due while a switch was off leaves in a burst when it
    is on again (without it the port sends at its rate after the off period and loses that time)."""

    switch_forward_s: float = 0.0
    switch_backlog: int = 1000
    deliver_latency_s: float = 0.0
    switch_on_s: float = 0.0
    switch_off_s: float = 0.0
    switch_phase_s: float | None = None
    switch_each: tuple[tuple[str, float, float], ...] = ()  # (switch, on s, off s)
    switch_port_clock: bool = False

    def __post_init__(self) -> None:
        schedules = [(self.switch_on_s, self.switch_off_s)] + [(on, off) for _, on, off in self.switch_each]
        if min(self.switch_forward_s, self.deliver_latency_s, *(x for pair in schedules for x in pair)) < 0 or \
                self.switch_backlog < 1 or any((off > 0) != (on > 0) for on, off in schedules):
            raise PacketSimulationError(f"host costs must be non-negative with a backlog of at least one, and a "
                                        f"switch schedule needs both its on and off times ({self})")

    def schedule_of(self, switch: str) -> tuple[float, float]:
        """(on, off) seconds of ``switch``'s CPU (off 0: always on)."""
        for name, on, off in self.switch_each:
            if name == switch:
                return on, off
        return self.switch_on_s, self.switch_off_s

    def switch_phase(self, seed: int, index: int, name: str | None = None) -> float:
        """Seconds into its on/off cycle switch ``index`` (``name``) is at t = 0 (uniform, from ``seed``)."""
        if self.switch_phase_s is not None:
            return self.switch_phase_s
        on, off = self.schedule_of(name) if name is not None else (self.switch_on_s, self.switch_off_s)
        return random.Random(seed * 1_000_003 + index).uniform(0.0, on + off)


@dataclass
class Network:
    """The ns-3 objects of a built topology, by name."""

    topology: Topology
    nodes: dict[str, Any]
    addresses: dict[str, int]  # host -> IPv4 address as an integer
    queues: dict[tuple[str, str], Any] = field(default_factory=dict)  # (switch, neighbour) -> queue disc
    routing: dict[str, Any] = field(default_factory=dict)
    devices: dict[tuple[str, str], Any] = field(default_factory=dict)  # (node, neighbour) -> its device

    def address(self, host: str) -> int:
        try:
            return self.addresses[host]
        except KeyError:
            raise PacketSimulationError(f"{host!r} is not a host of {self.topology.name}") from None

    def host_cpu_busy(self, hosts: list[str]) -> dict[str, float]:
        """Seconds of work the sending and receiving servers of ``hosts`` took, summed."""
        _, gf = load()
        ids = [int(self.nodes[h].GetId()) for h in hosts]
        return {"tx_busy_s": sum(float(gf.HostCpuBusy(i, True)) for i in ids),
                "rx_busy_s": sum(float(gf.HostCpuBusy(i, False)) for i in ids)}

    def queue_totals(self) -> dict[str, int]:
        """Summed switch-port counters: overflow drops, early drops, ECN marks, packets queued."""
        total = {"overflow_drops": 0, "early_drops": 0, "ecn_marks": 0, "enqueued": 0, "max_depth": 0}
        for qd in self.queues.values():
            total["overflow_drops"] += int(qd.overflowDrops)
            total["early_drops"] += int(qd.earlyDrops)
            total["ecn_marks"] += int(qd.marks)
            total["enqueued"] += int(qd.enqueued)
            total["max_depth"] = max(total["max_depth"], int(qd.maxDepth))
        switches = [self.routing[s] for s in self.topology.switches if s in self.routing]
        total["cpu_drops"] = sum(int(r.cpuDrops) for r in switches)
        total["cpu_max_backlog"] = max((int(r.cpuMaxBacklog) for r in switches), default=0)
        return total


def build(topology: Topology, seed: int = 1, spray: bool = False, spray_port: int = 0,
          costs: HostCosts = HostCosts(), host_cpu: HostCpu = HostCpu(),
          host_cpu_of: dict[str, HostCpu] | None = None) -> Network:
    """Build ``topology`` in ns-3 (module doc). ``seed`` derives every switch's ECMP seed."""
    ns, gf = load()
    topology.validate()
    gf.ClearHostCpus()  # the previous network's (ns-3 numbers the nodes afresh)
    nodes: dict[str, Any] = {}
    for name in topology.hosts + topology.switches:
        container = ns.NodeContainer()
        container.Create(1)
        nodes[name] = container.Get(0)
    stack = ns.InternetStackHelper()
    for name in topology.hosts + topology.switches:
        stack.Install(nodes[name])
    switches = set(topology.switches)
    address = ns.Ipv4AddressHelper()
    address.SetBase(ns.Ipv4Address("10.0.0.0"), ns.Ipv4Mask("255.255.255.252"))
    device_of: dict[tuple[str, str], Any] = {}
    ip_of: dict[tuple[str, str], int] = {}
    p2p = ns.PointToPointHelper()
    rate_of = {frozenset((link.a, link.b)): float(link.rate_bps) for link in topology.links}
    for link in topology.links:
        p2p.SetDeviceAttribute("DataRate", ns.DataRateValue(ns.DataRate(int(link.rate_bps))))
        p2p.SetChannelAttribute("Delay", ns.TimeValue(ns.NanoSeconds(round(link.delay_s * 1e9))))
        pair = ns.NodeContainer()
        pair.Add(nodes[link.a])
        pair.Add(nodes[link.b])
        devices = p2p.Install(pair)
        for i, (me, other) in enumerate(((link.a, link.b), (link.b, link.a))):
            dev = devices.Get(i)
            depth = 1 if me in switches else topology.host_queue_packets
            queue = dev.GetObject[ns.PointToPointNetDevice]().GetQueue()
            queue.SetMaxSize(ns.QueueSize(f"{depth}p"))
            device_of[(me, other)] = dev
        interfaces = address.Assign(devices)
        ip_of[(link.a, link.b)] = interfaces.GetAddress(0).Get()
        ip_of[(link.b, link.a)] = interfaces.GetAddress(1).Get()
        address.NewNetwork()
    net = Network(topology, nodes, {h: ip_of[(h, _neighbour(topology, h))] for h in topology.hosts},
                  devices=device_of)
    for host in topology.hosts:  # ``host_cpu_of``: hosts whose CPU differs (a parameter server)
        cpu = (host_cpu_of or {}).get(host, host_cpu)
        if cpu.active:
            gf.SetHostCpu(nodes[host].GetId(), *cpu.wall_costs())
    port = topology.port
    for (me, other), dev in device_of.items():
        if me in switches:
            net.queues[(me, other)] = gf.InstallPortQueue(
                dev, port.priorities, port.queue_packets, port.drop_threshold, port.ecn_threshold, port.port_scope)
            if costs.switch_port_clock:
                rate = rate_of[frozenset((me, other))]
                dev.GetObject[ns.PointToPointNetDevice]().SetDataRate(
                    ns.DataRate(int(rate * CLOCKED_DEVICE_SPEEDUP)))
                net.queues[(me, other)].SetPortClock(rate)
    hops = topology.next_hops()
    for index, name in enumerate(topology.hosts + topology.switches):
        routing = gf.InstallEcmpRouting(nodes[name], seed * 1_000_003 + index, spray and name in switches, spray_port)
        if name in switches:
            routing.SetHostCosts(costs.switch_forward_s, costs.switch_backlog, 0.0)
            on, off = costs.schedule_of(name)
            if off > 0:
                phase = costs.switch_phase(seed, index, name)
                routing.SetSchedule(on, off, phase)
                for (me, _other), qd in net.queues.items():
                    if me == name:
                        qd.SetSchedule(on, off, phase)
        else:
            routing.SetHostCosts(0.0, 1, costs.deliver_latency_s)
        ipv4 = nodes[name].GetObject[ns.Ipv4]()
        for host, neighbours in hops[name].items():
            for other in neighbours:
                interface = ipv4.GetInterfaceForDevice(device_of[(name, other)])
                routing.AddRoute(net.addresses[host], interface, ip_of[(other, name)])
        net.routing[name] = routing
    return net


def _neighbour(topology: Topology, host: str) -> str:
    for link in topology.links:
        if link.a == host:
            return link.b
        if link.b == host:
            return link.a
    raise PacketSimulationError(f"host {host} has no link")
