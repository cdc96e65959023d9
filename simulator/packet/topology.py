"""Topologies of the packet simulation, as plain data: nodes, links, port figures, next hops.

Nothing here imports ns-3; :mod:`simulator.packet.network` builds a :class:`Topology` in it.
Three shapes: the experiment's leaf-spine read from its YAML file (the fabric's own format,
read here rather than through ``mininet_topos``, which the simulator does not import), a
generated leaf-spine, and a k-ary fat-tree (k even, 4..16: k^3/4 hosts, 5k^2/4 switches).
Every equal-cost next hop towards every host comes from shortest paths (networkx).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import networkx as nx
import yaml

from simulator.errors import SimulatorError

#: The fabric's switch port (experiments/topologies/leafspine_training.yaml): full frames per
#: second and packets per priority queue.
FABRIC_PORT_PPS = 20_000
FABRIC_QUEUE_PACKETS = 32
FABRIC_PRIORITIES = 8
#: Bytes of a full frame, what a port's packets-per-second rate counts.
FRAME_BYTES = 1500


@dataclass(frozen=True)
class Port:
    """What every switch port has: a rate, strict-priority queues and thresholds (packets)."""

    rate_bps: float = FABRIC_PORT_PPS * FRAME_BYTES * 8
    priorities: int = FABRIC_PRIORITIES
    queue_packets: int = FABRIC_QUEUE_PACKETS
    drop_threshold: int = 0  # drop-eligible packets above this depth (0: never)
    ecn_threshold: int = 0  # ECN marks above this depth (0: never)
    port_scope: bool = False  # thresholds count the whole port, not the packet's own queue

    def __post_init__(self) -> None:
        if self.rate_bps <= 0 or not 1 <= self.priorities <= 8 or self.queue_packets < 1:
            raise SimulatorError(f"bad port: rate {self.rate_bps} bit/s, {self.priorities} priorities "
                                 f"(1..8), {self.queue_packets} packets per queue (>= 1)")


@dataclass(frozen=True)
class Link:
    a: str
    b: str
    rate_bps: float
    delay_s: float = 0.0


@dataclass
class Topology:
    """Hosts and switches (names) and links; ``hosts`` in rank-placement order."""

    name: str
    hosts: list[str]
    switches: list[str]
    links: list[Link]
    port: Port = field(default_factory=Port)
    host_queue_packets: int = 1000  # a host's own interface queue (Linux's txqueuelen)

    def graph(self) -> nx.Graph:
        g = nx.Graph()
        g.add_nodes_from(self.hosts + self.switches)
        for link in self.links:
            if g.has_edge(link.a, link.b):
                raise SimulatorError(f"topology {self.name}: two links between {link.a} and {link.b}")
            g.add_edge(link.a, link.b)
        return g

    def validate(self) -> None:
        known = set(self.hosts) | set(self.switches)
        if len(known) != len(self.hosts) + len(self.switches):
            raise SimulatorError(f"topology {self.name}: a name is used twice")
        for i, link in enumerate(self.links):
            for end in (link.a, link.b):
                if end not in known:
                    raise SimulatorError(f"topology {self.name}: links[{i}] names unknown node {end!r}")
        g = self.graph()
        for h in self.hosts:
            if g.degree(h) != 1:
                raise SimulatorError(f"topology {self.name}: host {h} has {g.degree(h)} links (one expected)")
        if not nx.is_connected(g):
            raise SimulatorError(f"topology {self.name}: not connected")

    def next_hops(self) -> dict[str, dict[str, list[str]]]:
        """node -> host -> neighbours on a shortest path to that host (sorted)."""
        g = self.graph()
        hops: dict[str, dict[str, list[str]]] = {n: {} for n in g.nodes}
        for host in self.hosts:
            dist = nx.single_source_shortest_path_length(g, host)
            for node in g.nodes:
                if node == host:
                    continue
                hops[node][host] = sorted(m for m in g.neighbors(node)
                                          if dist.get(m, 1 << 30) == dist[node] - 1
                                          and (m == host or m not in self.hosts))
        return hops


def tiny(host_bps: float, switch_bps: float, delay_s: float, port: Port) -> Topology:
    """Two hosts and one switch: h1 -- s1 -- h2; h1's link at ``host_bps``, h2's at ``switch_bps``."""
    return Topology("tiny", ["h1", "h2"], ["s1"],
                    [Link("h1", "s1", host_bps, delay_s), Link("s1", "h2", switch_bps, delay_s)], port)


def from_yaml(path: Path) -> Topology:
    """The fabric's topology file (switches, hosts, links, defaults.link/switch)."""
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise SimulatorError(f"cannot read topology {path}: {exc}") from exc
    try:
        defaults = data.get("defaults", {})
        sw = defaults.get("switch", {})
        link_bw = float(defaults.get("link", {}).get("bw_mbps", 1000)) * 1e6
        delay = float(defaults.get("link", {}).get("delay_ms", 0)) * 1e-3
        pps = sw.get("egress_rate_pps")
        rate = float(pps) * FRAME_BYTES * 8 if pps else link_bw
        port = Port(rate_bps=min(rate, link_bw), priorities=int(sw.get("priority_queues", FABRIC_PRIORITIES)),
                    queue_packets=int(sw.get("queue_depth", FABRIC_QUEUE_PACKETS)))
        switches = [s["name"] for s in data["switches"]]
        hosts = [h["name"] for h in data["hosts"]]
        links = [Link(l["a"], l["b"], min(float(l.get("bw_mbps", link_bw / 1e6)) * 1e6, port.rate_bps),
                      float(l.get("delay_ms", delay * 1e3)) * 1e-3) for l in data["links"]]
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise SimulatorError(f"topology {path}: missing or bad field ({exc})") from exc
    topo = Topology(str(data.get("name", path.stem)), hosts, switches, links, port)
    topo.validate()
    return topo


def leafspine(leaves: int, spines: int, hosts_per_leaf: int, port: Port, delay_s: float = 0.0) -> Topology:
    """``leaves`` leaves with ``hosts_per_leaf`` hosts each, every leaf linked to every spine."""
    if min(leaves, spines, hosts_per_leaf) < 1:
        raise SimulatorError(f"leaf-spine needs at least one leaf, spine and host per leaf "
                             f"(got {leaves}, {spines}, {hosts_per_leaf})")
    hosts, links = [], []
    for leaf in range(1, leaves + 1):
        for i in range(hosts_per_leaf):
            h = f"h{len(hosts) + 1}"
            hosts.append(h)
            links.append(Link(f"l{leaf}", h, port.rate_bps, delay_s))
        for spine in range(1, spines + 1):
            links.append(Link(f"l{leaf}", f"s{spine}", port.rate_bps, delay_s))
    switches = [f"l{i}" for i in range(1, leaves + 1)] + [f"s{i}" for i in range(1, spines + 1)]
    topo = Topology(f"leafspine-{leaves}x{spines}x{hosts_per_leaf}", hosts, switches, links, port)
    topo.validate()
    return topo


def fattree(k: int, port: Port, delay_s: float = 0.0) -> Topology:
    """k-ary fat-tree: k pods of k/2 edge and k/2 aggregation switches, (k/2)^2 cores."""
    if k < 4 or k > 16 or k % 2:
        raise SimulatorError(f"fat-tree k must be even and 4..16 (got {k})")
    half = k // 2
    hosts: list[str] = []
    links: list[Link] = []
    switches = [f"c{i}" for i in range(1, half * half + 1)]
    for pod in range(k):
        for e in range(half):
            edge = f"e{pod}_{e}"
            switches.append(edge)
            for _ in range(half):
                h = f"h{len(hosts) + 1}"
                hosts.append(h)
                links.append(Link(edge, h, port.rate_bps, delay_s))
            for a in range(half):
                links.append(Link(edge, f"a{pod}_{a}", port.rate_bps, delay_s))
        for a in range(half):
            agg = f"a{pod}_{a}"
            switches.append(agg)
            for c in range(half):
                links.append(Link(agg, f"c{a * half + c + 1}", port.rate_bps, delay_s))
    topo = Topology(f"fattree-k{k}", hosts, switches, links, port)
    topo.validate()
    return topo


def from_spec(spec: str, yaml_default: Path) -> Topology:
    """A topology from the command line: ``experiment`` (``yaml_default``), a YAML file,
    ``leafspine:L,S,H`` or ``fattree:K`` (their ports as ``yaml_default``'s)."""
    base = from_yaml(yaml_default).port
    if spec == "experiment":
        return from_yaml(yaml_default)
    if spec.startswith("leafspine:"):
        try:
            leaves, spines, per = (int(x) for x in spec.split(":", 1)[1].split(","))
        except ValueError:
            raise SimulatorError(f"--topo {spec!r}: expected leafspine:LEAVES,SPINES,HOSTS_PER_LEAF") from None
        return leafspine(leaves, spines, per, base)
    if spec.startswith("fattree:"):
        try:
            k = int(spec.split(":", 1)[1])
        except ValueError:
            raise SimulatorError(f"--topo {spec!r}: expected fattree:K") from None
        return fattree(k, Port(base.rate_bps, base.priorities, base.queue_packets))
    return from_yaml(Path(spec))


def at_port_pps(topo: Topology, pps: float) -> Topology:
    """``topo`` with its switch ports at ``pps`` full frames per second: the port's rate and every
    link that ran at it (the fabric's links are capped at the switches' egress rate); queues in
    packets unchanged (the scaling rule keeps ``b``, so a real buffer is as many packets)."""
    if pps <= 0:
        raise SimulatorError(f"port rate must be positive (got {pps} packets/s)")
    old, new = topo.port.rate_bps, pps * FRAME_BYTES * 8
    links = [replace(l, rate_bps=new) if l.rate_bps == old else l for l in topo.links]
    out = Topology(f"{topo.name}@{pps:g}pps", list(topo.hosts), list(topo.switches), links,
                   replace(topo.port, rate_bps=new), topo.host_queue_packets)
    out.validate()
    return out
