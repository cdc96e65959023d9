"""Base forwarding for a fabric: /32 host routes, next hops and ECMP groups per switch.

Routes are one /32 per host on every switch (exact for any topology, and a few dozen
entries at emulation scale). A host on the switch itself gets a direct next hop with the
host's MAC. Otherwise every neighbour switch on a shortest path (networkx, hop count) is
a next hop, one per link: a single next hop is written straight into ``ipv4_lpm``,
several become an ECMP group (``set_ecmp_group``) whose members fill ``ecmp_member``.
Groups are shared by every destination with the same next-hop set and numbered from 1
in a stable order, so recomputing gives identical entries.
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx

from controller.entities import TableEntry
from controller.errors import FabricRoutingError
from controller.schema import P4Schema
from gradfabric.fabric import Fabric, switch_port_mac

IPV4_LPM = "DlcpIngress.ipv4_lpm"
ECMP_MEMBER = "DlcpIngress.ecmp_member"
SET_NHOP = "DlcpIngress.set_nhop"
SET_ECMP_GROUP = "DlcpIngress.set_ecmp_group"
SWITCH_SEED = "DlcpIngress.switch_seed"
ROUTE_TABLES = frozenset({IPV4_LPM, ECMP_MEMBER, SWITCH_SEED})


def switch_seed(device_id: int) -> int:
    """The spraying seed of a switch: its device id spread over 32 bits (Knuth's multiplicative
    hash), so switches with neighbouring ids start their choices far apart."""
    return (device_id * 0x9E3779B1) & 0xFFFFFFFF


@dataclass(frozen=True, order=True)
class NextHop:
    port: int
    smac: str
    dmac: str

    def params(self) -> dict[str, str | int]:
        return {"port": self.port, "smac": self.smac, "dmac": self.dmac}


def switch_graph(fabric: Fabric) -> nx.MultiGraph:
    """Switches as nodes; one edge per switch-to-switch link, keyed by the two ports."""
    graph = nx.MultiGraph()
    switches = {s.name for s in fabric.switches}
    graph.add_nodes_from(switches)
    for link in fabric.links:
        if link.a in switches and link.b in switches:
            graph.add_edge(link.a, link.b, ports={link.a: link.a_port, link.b: link.b_port})
    return graph


def next_hops(fabric: Fabric) -> dict[str, dict[str, tuple[NextHop, ...]]]:
    """For each switch and host: the next hops on every shortest path to the host."""
    graph = switch_graph(fabric)
    device = {s.name: s.device_id for s in fabric.switches}
    distances = dict(nx.all_pairs_shortest_path_length(graph))
    table: dict[str, dict[str, tuple[NextHop, ...]]] = {}
    for sw in fabric.switches:
        table[sw.name] = {}
        for host in fabric.hosts:
            if host.switch == sw.name:
                hops = (NextHop(host.switch_port, switch_port_mac(sw.device_id, host.switch_port), host.mac),)
            else:
                here = distances[sw.name].get(host.switch)
                if here is None:
                    raise FabricRoutingError(f"{sw.name} has no path to {host.name} (attached to {host.switch})")
                found = set()
                for _, neighbour, data in graph.edges(sw.name, data=True):
                    if distances[neighbour].get(host.switch) == here - 1:
                        out, back = data["ports"][sw.name], data["ports"][neighbour]
                        smac, dmac = switch_port_mac(sw.device_id, out), switch_port_mac(device[neighbour], back)
                        found.add(NextHop(out, smac, dmac))
                hops = tuple(sorted(found))
            table[sw.name][host.name] = hops
    return table


def route_entries(fabric: Fabric, schema: P4Schema) -> dict[str, list[TableEntry]]:
    """The ipv4_lpm and ecmp_member entries of every switch, and its spraying seed."""
    hops = next_hops(fabric)
    result: dict[str, list[TableEntry]] = {}
    for sw in fabric.switches:
        entries: list[TableEntry] = [
            TableEntry.build(schema, SWITCH_SEED, action="DlcpIngress.set_seed",
                             params={"seed": switch_seed(sw.device_id)}, is_default=True)
        ]
        groups = {h: i + 1 for i, h in enumerate(sorted({v for v in hops[sw.name].values() if len(v) > 1}))}
        for members, group_id in groups.items():
            for index, hop in enumerate(members):
                entries.append(
                    TableEntry.build(
                        schema,
                        ECMP_MEMBER,
                        {"meta.ecmp_group_id": group_id, "meta.ecmp_member": index},
                        SET_NHOP,
                        hop.params(),
                    )
                )
        for host in fabric.hosts:
            route = hops[sw.name][host.name]
            match = {"hdr.ipv4.dstAddr": f"{host.ip}/32"}
            if len(route) == 1:
                entries.append(TableEntry.build(schema, IPV4_LPM, match, SET_NHOP, route[0].params()))
            else:
                params = {"group_id": groups[route], "group_size": len(route)}
                entries.append(TableEntry.build(schema, IPV4_LPM, match, SET_ECMP_GROUP, params))
        result[sw.name] = entries
    return result
