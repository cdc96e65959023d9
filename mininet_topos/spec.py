"""Declarative topologies: load a YAML file into a validated :class:`TopologySpec`.

A topology file names switches, hosts and links (see ``leafspine.yaml`` for the format).
Every problem is reported as a :class:`TopologyError` that names the file and the key path
(``leafspine.yaml: links[3].b: unknown node 'l9'``), before anything is started.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import networkx as nx
import yaml

from gradfabric.errors import GradfabricError
from gradfabric.fabric import Host, switch_port_mac
from gradfabric.paths import TOPOLOGIES

#: Interface names are limited to 15 characters; "<node>-eth<port>" must fit.
MAX_NODE_NAME = 9
MAX_PORT = 254


class TopologyError(GradfabricError):
    """A topology file that cannot be loaded, with the file and the key that is wrong."""


@dataclass(frozen=True)
class LinkParams:
    """What a link emulates: bandwidth (Mbit/s), one-way delay (ms) and loss (percent)."""

    bw_mbps: float = 1000.0
    delay_ms: float = 0.0
    loss_pct: float = 0.0


RATE_SCOPES = ("port", "queue")


@dataclass(frozen=True)
class SwitchParams:
    """Traffic-manager settings of a switch: the egress queues are the bottleneck.

    ``rate_scope`` says what ``egress_rate_pps`` limits: ``queue`` gives that rate to each
    priority queue of every port (BMv2's ``set_queue_rate R PORT``); ``port`` makes it one rate
    shared by all priority queues of the port, so strict priority decides who gets a congested
    port (the embedded target's port rate; BMv2 has none and runs it as ``queue``).
    """

    priority_queues: int = 8
    egress_rate_pps: int = 40000
    queue_depth: int = 64
    rate_scope: str = "port"


@dataclass(frozen=True)
class SwitchSpec:
    name: str
    device_id: int
    role: str
    params: SwitchParams


@dataclass(frozen=True)
class LinkSpec:
    """A link between two nodes; a host's end has port 0 (hosts have one interface)."""

    a: str
    a_port: int
    b: str
    b_port: int
    params: LinkParams


@dataclass(frozen=True)
class TopologySpec:
    name: str
    source: Path
    switches: tuple[SwitchSpec, ...]
    hosts: tuple[Host, ...]
    links: tuple[LinkSpec, ...]

    def switch(self, name: str) -> SwitchSpec:
        return next(s for s in self.switches if s.name == name)

    def host(self, name: str) -> Host:
        return next(h for h in self.hosts if h.name == name)

    def ports_of(self, switch: str) -> list[tuple[int, str, int]]:
        """(port, peer, peer_port) of every link end on ``switch``, by port."""
        ends = [(l.a_port, l.b, l.b_port) for l in self.links if l.a == switch]
        ends += [(l.b_port, l.a, l.a_port) for l in self.links if l.b == switch]
        return sorted(ends)

    def graph(self) -> nx.MultiGraph:
        g = nx.MultiGraph()
        g.add_nodes_from(s.name for s in self.switches)
        g.add_nodes_from(h.name for h in self.hosts)
        g.add_edges_from((l.a, l.b) for l in self.links)
        return g

    def with_prefix(self, prefix: str) -> TopologySpec:
        """The same topology with every node name prefixed (to run beside another fabric)."""
        if len(prefix) + max(len(n) for n in self.node_names()) > MAX_NODE_NAME:
            raise TopologyError(f"{self.source.name}: prefix {prefix!r} makes node names too long")
        p = prefix
        return TopologySpec(
            name=self.name,
            source=self.source,
            switches=tuple(
                SwitchSpec(p + s.name, s.device_id, s.role, s.params) for s in self.switches
            ),
            hosts=tuple(
                Host(p + h.name, h.ip, h.prefix_len, h.mac, p + h.switch, h.switch_port,
                         h.gateway_mac)
                for h in self.hosts
            ),
            links=tuple(
                LinkSpec(p + l.a, l.a_port, p + l.b, l.b_port, l.params) for l in self.links
            ),
        )

    def node_names(self) -> list[str]:
        return [s.name for s in self.switches] + [h.name for h in self.hosts]


def host_mac(ip: str) -> str:
    """A host's MAC made from its IPv4 address: ``00:00:<a>:<b>:<c>:<d>``."""
    return "00:00:" + ":".join(f"{b:02x}" for b in ipaddress.IPv4Address(ip).packed)


def resolve(name_or_path: str | Path) -> Path:
    """A topology given by name (``leafspine``) or by path to a YAML file."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or path.exists():
        if not path.is_file():
            raise TopologyError(f"topology file {path} does not exist")
        return path
    candidate = TOPOLOGIES / f"{name_or_path}.yaml"
    if not candidate.is_file():
        known = ", ".join(sorted(p.stem for p in TOPOLOGIES.glob("*.yaml")))
        raise TopologyError(f"unknown topology {name_or_path!r} (known: {known}; or give a YAML file)")
    return candidate


def load_topology(name_or_path: str | Path) -> TopologySpec:
    """Load and validate a topology by name or path."""
    path = resolve(name_or_path)
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise TopologyError(f"{path.name}: not valid YAML: {exc}") from exc
    return parse_topology(data, path)


def parse_topology(data: Any, source: Path) -> TopologySpec:
    """Validate the parsed YAML ``data`` of ``source`` into a :class:`TopologySpec`."""
    return _Parser(source).parse(data)


class _Parser:
    def __init__(self, source: Path) -> None:
        self.source = source

    def fail(self, key: str, reason: str) -> TopologyError:
        return TopologyError(f"{self.source.name}: {key}: {reason}")

    def mapping(self, value: Any, key: str) -> Mapping[str, Any]:
        if not isinstance(value, Mapping):
            raise self.fail(key, f"must be a mapping, got {type(value).__name__}")
        return value

    def sequence(self, value: Any, key: str) -> list[Any]:
        if not isinstance(value, list):
            raise self.fail(key, f"must be a list, got {type(value).__name__}")
        return value

    def check_keys(self, item: Mapping[str, Any], key: str, allowed: set[str]) -> None:
        for k in item:
            if k not in allowed:
                raise self.fail(f"{key}.{k}", f"unknown key (expected one of {', '.join(sorted(allowed))})")

    def number(self, item: Mapping[str, Any], name: str, key: str, default: float,
               lo: float, hi: float, integer: bool = False) -> Any:
        value = item.get(name, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or (
            integer and not isinstance(value, int)
        ):
            kind = "an integer" if integer else "a number"
            raise self.fail(f"{key}.{name}", f"must be {kind}, got {value!r}")
        if not lo <= value <= hi:
            raise self.fail(f"{key}.{name}", f"must be {lo:g}..{hi:g}, got {value!r}")
        return value

    def choice(self, item: Mapping[str, Any], name: str, key: str, default: str,
               allowed: tuple[str, ...]) -> str:
        value = item.get(name, default)
        if value not in allowed:
            raise self.fail(f"{key}.{name}", f"must be one of {', '.join(allowed)}, got {value!r}")
        return str(value)

    def name(self, item: Mapping[str, Any], key: str) -> str:
        value = item.get("name")
        if not isinstance(value, str) or not value.isidentifier():
            raise self.fail(f"{key}.name", f"must be a short name of letters and digits, got {value!r}")
        if len(value) > MAX_NODE_NAME:
            raise self.fail(f"{key}.name", f"{value!r} is longer than {MAX_NODE_NAME} characters")
        return value

    def link_params(self, item: Mapping[str, Any], key: str, base: LinkParams) -> LinkParams:
        return LinkParams(
            bw_mbps=self.number(item, "bw_mbps", key, base.bw_mbps, 0.1, 100_000),
            delay_ms=self.number(item, "delay_ms", key, base.delay_ms, 0, 10_000),
            loss_pct=self.number(item, "loss_pct", key, base.loss_pct, 0, 100),
        )

    def switch_params(self, item: Mapping[str, Any], key: str, base: SwitchParams) -> SwitchParams:
        return SwitchParams(
            priority_queues=self.number(item, "priority_queues", key, base.priority_queues, 1, 8, True),
            egress_rate_pps=self.number(item, "egress_rate_pps", key, base.egress_rate_pps, 1, 10**8, True),
            queue_depth=self.number(item, "queue_depth", key, base.queue_depth, 1, 100_000, True),
            rate_scope=self.choice(item, "rate_scope", key, base.rate_scope, RATE_SCOPES),
        )

    def parse(self, data: Any) -> TopologySpec:
        top = self.mapping(data, "top level")
        self.check_keys(top, "top level", {"name", "description", "defaults", "switches", "hosts", "links"})
        name = top.get("name", self.source.stem)
        if not isinstance(name, str):
            raise self.fail("name", f"must be a string, got {name!r}")
        defaults = self.mapping(top.get("defaults", {}), "defaults")
        self.check_keys(defaults, "defaults", {"link", "switch"})
        link_base = self.link_params(self.mapping(defaults.get("link", {}), "defaults.link"),
                                     "defaults.link", LinkParams())
        switch_base = self.switch_params(self.mapping(defaults.get("switch", {}), "defaults.switch"),
                                         "defaults.switch", SwitchParams())

        switches = self.parse_switches(top.get("switches"), switch_base)
        host_names = self.parse_host_names(top.get("hosts"), {s.name for s in switches})
        links = self.parse_links(top.get("links"), switches, host_names, link_base)
        hosts = self.place_hosts(top["hosts"], host_names, switches, links)
        spec = TopologySpec(name, self.source, tuple(switches), tuple(hosts), tuple(links))
        self.check_reachable(spec)
        return spec

    def parse_switches(self, raw: Any, base: SwitchParams) -> list[SwitchSpec]:
        items = self.sequence(raw, "switches")
        if not items:
            raise self.fail("switches", "a topology needs at least one switch")
        switches: list[SwitchSpec] = []
        seen: dict[str, str] = {}
        ids: dict[int, str] = {}
        for i, raw_item in enumerate(items):
            key = f"switches[{i}]"
            item = self.mapping(raw_item, key)
            self.check_keys(item, key, {"name", "device_id", "role", *SwitchParams.__dataclass_fields__})
            name = self.name(item, key)
            if name in seen:
                raise self.fail(f"{key}.name", f"duplicate node {name!r} (also {seen[name]})")
            seen[name] = key
            device_id = self.number(item, "device_id", key, i + 1, 1, 255, True)
            if device_id in ids:
                raise self.fail(f"{key}.device_id", f"duplicate device id {device_id} (also {ids[device_id]})")
            ids[device_id] = key
            role = str(item.get("role", "switch"))
            switches.append(SwitchSpec(name, device_id, role, self.switch_params(item, key, base)))
        return switches

    def parse_host_names(self, raw: Any, switch_names: set[str]) -> dict[str, str]:
        items = self.sequence(raw, "hosts")
        if not items:
            raise self.fail("hosts", "a topology needs at least one host")
        names: dict[str, str] = {}
        for i, raw_item in enumerate(items):
            key = f"hosts[{i}]"
            item = self.mapping(raw_item, key)
            self.check_keys(item, key, {"name", "ip"})
            name = self.name(item, key)
            if name in names or name in switch_names:
                raise self.fail(f"{key}.name", f"duplicate node {name!r}")
            names[name] = key
        return names

    def parse_links(self, raw: Any, switches: list[SwitchSpec], hosts: dict[str, str],
                    base: LinkParams) -> list[LinkSpec]:
        items = self.sequence(raw, "links")
        switch_names = {s.name for s in switches}
        known = sorted(switch_names | set(hosts))
        used: dict[tuple[str, int], str] = {}
        host_link: dict[str, str] = {}
        # First pass: validate ends and claim explicit ports; second pass: assign the rest.
        ends: list[tuple[str, str, int | None, str, int | None, LinkParams]] = []
        for i, raw_item in enumerate(items):
            key = f"links[{i}]"
            item = self.mapping(raw_item, key)
            self.check_keys(item, key, {"a", "a_port", "b", "b_port", *LinkParams.__dataclass_fields__})
            resolved: list[tuple[str, int | None]] = []
            for side in ("a", "b"):
                node = item.get(side)
                if node not in switch_names and node not in hosts:
                    raise self.fail(f"{key}.{side}", f"unknown node {node!r} (known: {', '.join(known)})")
                port_key = f"{side}_port"
                port: int | None = None
                if node in hosts:
                    if port_key in item and item[port_key] != 0:
                        raise self.fail(f"{key}.{port_key}", f"host {node} has one interface, port 0")
                    if node in host_link:
                        raise self.fail(f"{key}.{side}",
                                        f"host {node!r} is already linked by {host_link[node]} "
                                        "(a host has one interface)")
                    host_link[node] = key
                    port = 0
                elif port_key in item:
                    port = self.number(item, port_key, key, 0, 1, MAX_PORT, True)
                    if (node, port) in used:
                        raise self.fail(f"{key}.{port_key}",
                                        f"duplicate port {port} on {node} (also {used[(node, port)]})")
                    used[(node, port)] = key
                resolved.append((node, port))
            (a, a_port), (b, b_port) = resolved
            if a == b:
                raise self.fail(key, f"a link from {a} to itself")
            if a in hosts and b in hosts:
                raise self.fail(key, f"hosts {a} and {b} must be linked through a switch")
            ends.append((key, a, a_port, b, b_port, self.link_params(item, key, base)))
        links: list[LinkSpec] = []
        for key, a, a_port, b, b_port, params in ends:
            a_port = self.next_port(a, a_port, used, key)
            b_port = self.next_port(b, b_port, used, key)
            links.append(LinkSpec(a, a_port, b, b_port, params))
        return links

    def next_port(self, node: str, port: int | None, used: dict[tuple[str, int], str], key: str) -> int:
        if port is not None:
            return port
        free = next(p for p in range(1, MAX_PORT + 2) if (node, p) not in used)
        if free > MAX_PORT:
            raise self.fail(key, f"{node} has no free port left")
        used[(node, free)] = key
        return free

    def place_hosts(self, raw: list[Any], names: dict[str, str], switches: list[SwitchSpec],
                    links: list[LinkSpec]) -> list[Host]:
        device = {s.name: s.device_id for s in switches}
        attach: dict[str, tuple[str, int]] = {}
        for link in links:
            if link.a in names:
                attach[link.a] = (link.b, link.b_port)
            if link.b in names:
                attach[link.b] = (link.a, link.a_port)
        hosts: list[Host] = []
        addresses: dict[str, str] = {}
        for item in raw:
            name = item["name"]
            key = names[name]
            if name not in attach:
                raise self.fail(key, f"host {name!r} is unreachable: no link attaches it to a switch")
            switch, port = attach[name]
            ip, prefix_len = self.address(item, key, device[switch], port)
            if ip in addresses:
                raise self.fail(f"{key}.ip", f"duplicate address {ip} (also {addresses[ip]})")
            addresses[ip] = key
            hosts.append(Host(name, ip, prefix_len, host_mac(ip), switch, port,
                                  switch_port_mac(device[switch], port)))
        return hosts

    def address(self, item: Mapping[str, Any], key: str, device_id: int, port: int) -> tuple[str, int]:
        if "ip" not in item:
            return f"10.0.{device_id}.{port}", 24
        try:
            iface = ipaddress.IPv4Interface(str(item["ip"]) if "/" in str(item["ip"]) else f"{item['ip']}/24")
        except ValueError as exc:
            raise self.fail(f"{key}.ip", f"not an IPv4 address: {exc}") from exc
        return str(iface.ip), iface.network.prefixlen

    def check_reachable(self, spec: TopologySpec) -> None:
        graph = spec.graph()
        first = spec.hosts[0].name
        reach = nx.node_connected_component(graph, first)
        for i, host in enumerate(spec.hosts):
            if host.name not in reach:
                raise self.fail(f"hosts[{i}]", f"host {host.name!r} is unreachable from {first!r}: "
                                "no path of links joins them")
