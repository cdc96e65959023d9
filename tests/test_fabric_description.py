"""The fabric description: load/save round trip and validation messages with key paths."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from gradfabric import fabric as fabric_mod
from gradfabric.fabric import FabricError
from tests.controller_helpers import leaf_spine

CONTRACT_EXAMPLE = {
    "name": "leafspine", "target": "embedded",
    "program": {"source": "p4src/dlcp.p4", "p4info": "build/dlcp.p4info.txtpb", "device_config": "build/dlcp.json"},
    "switches": [{"name": "s1", "device_id": 1, "grpc_addr": "127.0.0.1:50001", "cpu_port": 510,
                  "log": "logs/s1.log", "request_log": "logs/s1-p4runtime.log",
                  "ports": [{"port": 1, "iface": "s1-eth1", "peer": "h1", "peer_port": 0}]}],
    "hosts": [{"name": "h1", "ip": "10.0.1.1", "prefix_len": 24, "mac": "00:00:0a:00:01:01",
               "switch": "s1", "switch_port": 1, "gateway_mac": "00:00:00:00:01:01"}],
    "links": [{"a": "s1", "a_port": 1, "b": "h1", "b_port": 0, "bw_mbps": 100, "delay_ms": 0, "loss_pct": 0}],
}


def test_contract_example_loads(tmp_path: Path) -> None:
    path = tmp_path / "fabric.json"
    path.write_text(json.dumps(CONTRACT_EXAMPLE))
    fabric = fabric_mod.load(path)
    assert fabric.switch("s1").port(1).peer == "h1"
    assert fabric.host("h1").gateway_mac == fabric.switch("s1").port_mac(1)
    assert fabric.to_dict() == CONTRACT_EXAMPLE


def test_save_load_round_trip(tmp_path: Path) -> None:
    fabric = leaf_spine(2, 2)
    path = fabric_mod.save(fabric, tmp_path / "build" / "fabric.json")
    assert fabric_mod.load(path) == fabric


def test_port_macs_follow_the_contract() -> None:
    assert fabric_mod.switch_port_mac(1, 1) == "00:00:00:00:01:01"
    assert fabric_mod.switch_port_mac(12, 255) == "00:00:00:00:0c:ff"


def broken(change) -> list[str]:
    data = copy.deepcopy(CONTRACT_EXAMPLE)
    change(data)
    with pytest.raises(FabricError) as err:
        fabric_mod.from_dict(data, "fabric.json")
    return err.value.problems


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda d: d["switches"].append({**d["switches"][0], "name": "s2", "grpc_addr": "127.0.0.1:50002"}),
         "switches[1].device_id: 1 is already used by switches[0] (s1)"),
        (lambda d: d["switches"][0].update(grpc_addr="localhost"), "switches[0].grpc_addr: must be HOST:PORT"),
        (lambda d: d["switches"][0]["ports"][0].update(port=0), "switches[0].ports[0].port: must be 1..510"),
        (lambda d: d["hosts"][0].update(ip="10.0.1"), "hosts[0].ip: not an IPv4 address"),
        (lambda d: d["hosts"][0].update(switch_port=7), "hosts[0].switch_port: s1 has no port 7"),
        (lambda d: d["hosts"][0].update(switch="s9"), "hosts[0].switch: no switch named 's9'"),
        (lambda d: d["links"][0].update(b="h9"), "links[0]: no switch or host named 'h9'"),
        (lambda d: d["switches"][0].pop("device_id"), "switches[0].device_id: is required"),
        (lambda d: d.update(target="tofino"), "target: must be embedded or bmv2"),
        (lambda d: d["hosts"][0].update(mac="zz"), "hosts[0].mac: not a MAC address"),
    ],
)
def test_validation_messages(change, expected: str) -> None:
    found = broken(change)
    assert any(p.startswith(expected) for p in found), found


def test_missing_and_malformed_files(tmp_path: Path) -> None:
    with pytest.raises(FabricError, match="no fabric description here; boot the fabric first"):
        fabric_mod.load(tmp_path / "none.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(FabricError, match="not valid JSON"):
        fabric_mod.load(bad)
