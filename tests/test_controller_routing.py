"""Fabric routes: every host pair has a path over every equal-cost next hop."""

from __future__ import annotations

import pytest

from controller.errors import FabricRoutingError
from controller.routing import ECMP_MEMBER, IPV4_LPM, SWITCH_SEED, route_entries
from controller.values import Exact, Lpm
from gradfabric import fabric as fabric_mod
from gradfabric.fabric import Fabric
from tests.controller_helpers import leaf_spine, schema

S = schema()


def forward(fabric: Fabric, entries: dict, switch: str, dst_ip: str) -> list[tuple[int, str, str]]:
    """The (port, smac, dmac) choices a switch's entries give for a destination."""
    ip = int.from_bytes(bytes(int(x) for x in dst_ip.split(".")), "big")
    table = entries[switch]
    route = [e for e in table if e.table == IPV4_LPM and dict(e.match)["hdr.ipv4.dstAddr"] == Lpm(ip, 32)]
    assert len(route) == 1, f"{switch}: {len(route)} routes for {dst_ip}"
    params = dict(route[0].params)
    if route[0].action.endswith("set_nhop"):
        return [(params["port"], params["smac"], params["dmac"])]
    members = [
        dict(e.params)
        for e in table
        if e.table == ECMP_MEMBER and dict(e.match)["meta.ecmp_group_id"] == Exact(params["group_id"])
    ]
    indices = sorted(dict(e.match)["meta.ecmp_member"].value for e in table
                     if e.table == ECMP_MEMBER and dict(e.match)["meta.ecmp_group_id"] == Exact(params["group_id"]))
    assert indices == list(range(params["group_size"])), "members are numbered 0..size-1"
    return [(m["port"], m["smac"], m["dmac"]) for m in members]


def mac(text: str) -> int:
    return int(text.replace(":", ""), 16)


def paths(fabric: Fabric, entries: dict, src: str, dst: str) -> list[list[str]]:
    """Every path a packet from host src to host dst can take (following all ECMP members)."""
    target = fabric.host(dst)
    done: list[list[str]] = []
    stack = [[fabric.host(src).switch]]
    while stack:
        path = stack.pop()
        assert len(path) <= len(fabric.switches) + 1, f"loop: {path}"
        sw = fabric.switch(path[-1])
        for port, smac, dmac in forward(fabric, entries, sw.name, target.ip):
            assert smac == mac(fabric_mod.switch_port_mac(sw.device_id, port))
            peer = sw.port(port)
            if peer.peer == dst:
                assert dmac == mac(target.mac)
                done.append(path + [dst])
            else:
                nxt = fabric.switch(peer.peer)
                assert dmac == mac(nxt.port_mac(peer.peer_port))
                stack.append(path + [nxt.name])
    return done


@pytest.mark.parametrize(("leaves", "spines"), [(2, 2), (3, 2), (2, 3)])
def test_every_host_pair_has_all_shortest_paths(leaves: int, spines: int) -> None:
    fabric = leaf_spine(leaves, spines)
    entries = route_entries(fabric, S)
    for a in fabric.hosts:
        for b in fabric.hosts:
            if a.name == b.name:
                continue
            found = paths(fabric, entries, a.name, b.name)
            if a.switch == b.switch:
                assert found == [[a.switch, b.name]]
            else:
                assert len(found) == spines, "one path per spine"
                assert all(len(p) == 4 for p in found)


def test_leaf_uses_one_shared_group_and_spine_direct_hops() -> None:
    fabric = leaf_spine(2, 2)
    entries = route_entries(fabric, S)
    leaf = entries["s1"]
    groups = {dict(e.params)["group_id"] for e in leaf if e.table == IPV4_LPM and e.action.endswith("set_ecmp_group")}
    assert groups == {1}
    assert sum(e.table == ECMP_MEMBER for e in leaf) == 2
    assert all(e.action.endswith("set_nhop") for e in entries["s3"] if e.table == IPV4_LPM)
    assert route_entries(fabric, S) == entries, "recomputing gives identical entries"


def test_every_switch_gets_its_own_spraying_seed() -> None:
    fabric = leaf_spine(2, 2)
    entries = route_entries(fabric, S)
    seeds = {}
    for sw in fabric.switches:
        (seed,) = [e for e in entries[sw.name] if e.table == SWITCH_SEED]
        assert seed.is_default and seed.action == "DlcpIngress.set_seed"
        seeds[sw.name] = dict(seed.params)["seed"]
    assert len(set(seeds.values())) == len(seeds), seeds


def test_disconnected_switch_is_reported() -> None:
    data = leaf_spine(2, 1).to_dict()
    data["links"] = [link for link in data["links"] if not (link["a"] == "s2" and link["b"] == "s3")]
    fabric = fabric_mod.from_dict(data)
    with pytest.raises(FabricRoutingError, match="s1 has no path to h21"):
        route_entries(fabric, S)
