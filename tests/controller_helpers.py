"""Shared helpers of the controller tests: the DLCP P4Info as the build makes it, and fabrics.

The P4Info and device config are compiled from p4src/dlcp.p4 by the embedded front end (what
``make p4`` writes), once per test process, so the controller's tests and the program cannot
drift apart; tests/test_p4info_p4c.py checks that p4c's P4Info is the same.
"""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path

from controller.pipeline import Pipeline
from controller.schema import P4Schema
from gradfabric import fabric as fabric_mod
from gradfabric.fabric import Fabric
from gradfabric.p4build import Artifacts, compile_embedded
from gradfabric.paths import P4SRC


@functools.cache
def dlcp_build() -> Artifacts:
    """p4src/dlcp.p4 compiled by the embedded front end into a folder of this process."""
    return compile_embedded(P4SRC / "dlcp.p4", Path(tempfile.mkdtemp(prefix="dlcp-build.")))


def schema() -> P4Schema:
    return P4Schema.load(dlcp_build().p4info)


def pipeline() -> Pipeline:
    built = dlcp_build()
    return Pipeline.load(built.p4info, built.device_config)


def leaf_spine(
    leaves: int = 2, spines: int = 2, hosts_per_leaf: int = 2, addrs: list[str] | None = None, tmp: Path | None = None
) -> Fabric:
    """A leaf-spine fabric description: leaves s1..sL, spines after them, hosts hL_i."""
    switches, hosts, links = [], [], []
    names = [f"s{i + 1}" for i in range(leaves + spines)]
    ports: dict[str, list[dict]] = {n: [] for n in names}
    for li in range(leaves):
        leaf = names[li]
        for h in range(hosts_per_leaf):
            host = f"h{li + 1}{h + 1}"
            port = h + 1
            ip = f"10.0.{li + 1}.{h + 1}"
            ports[leaf].append({"port": port, "iface": f"{leaf}-eth{port}", "peer": host, "peer_port": 0})
            hosts.append(
                {"name": host, "ip": ip, "prefix_len": 24, "mac": f"00:00:0a:00:{li + 1:02x}:{h + 1:02x}",
                 "switch": leaf, "switch_port": port, "gateway_mac": fabric_mod.switch_port_mac(li + 1, port)}
            )
            links.append({"a": leaf, "a_port": port, "b": host, "b_port": 0})
        for si in range(spines):
            spine = names[leaves + si]
            lp, sp = hosts_per_leaf + si + 1, li + 1
            ports[leaf].append({"port": lp, "iface": f"{leaf}-eth{lp}", "peer": spine, "peer_port": sp})
            ports[spine].append({"port": sp, "iface": f"{spine}-eth{sp}", "peer": leaf, "peer_port": lp})
            links.append({"a": leaf, "a_port": lp, "b": spine, "b_port": sp})
    for i, n in enumerate(names):
        addr = addrs[i] if addrs else f"127.0.0.1:{50001 + i}"
        log = str(tmp / f"{n}-p4runtime.log") if tmp else ""
        switches.append({"name": n, "device_id": i + 1, "grpc_addr": addr, "cpu_port": 510,
                         "log": "", "request_log": log, "ports": ports[n]})
    built = dlcp_build()
    data = {"name": "leafspine", "target": "embedded",
            "program": {"source": "p4src/dlcp.p4", "p4info": str(built.p4info),
                        "device_config": str(built.device_config)},
            "switches": switches, "hosts": hosts, "links": links}
    return fabric_mod.from_dict(data)
