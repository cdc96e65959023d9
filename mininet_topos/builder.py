"""Turn a :class:`TopologySpec` into a Mininet ``Topo`` and into the fabric description.

Ports are explicit on both ends (Mininet names interfaces ``<node>-eth<port>``), so the
interface names, the switch port numbers the controller programs and the description the
agents read all agree by construction.
"""

from __future__ import annotations

import functools
import re
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mininet.link import TCLink
from mininet.topo import Topo

from gradfabric import fabric as fabric_description
from gradfabric.fabric import Fabric
from mininet_topos.spec import LinkParams, TopologySpec
from mininet_topos.switches import SwitchConfig


def iface_name(node: str, port: int) -> str:
    return f"{node}-eth{port}"


@functools.cache
def netem_available() -> bool:
    """Whether the kernel has the netem qdisc (link delay and loss need it).

    Probed on a dummy interface inside a throwaway network namespace.
    """
    probe = "ip link add d0 type dummy && tc qdisc add dev d0 root netem delay 1ms"
    proc = subprocess.run(["unshare", "--net", "sh", "-c", probe], capture_output=True, check=False)
    return proc.returncode == 0


#: Packets a link's token bucket holds before it drops: a Linux host's default transmit
#: queue (``txqueuelen`` 1000). Mininet's default (``latency_ms`` = 15,000 bytes at the link
#: rate, 0.12 ms at 1 Gbit/s) held ten packets, so hosts dropped about half of a TCP flow's
#: packets in their own qdisc before the switch saw them (issue 28); with a host-sized queue
#: the switches' queues are where congestion happens.
LINK_QUEUE_PACKETS = 1000
FRAME_BYTES = 1514


def tbf_latency_ms(bw_mbps: float, packets: int = LINK_QUEUE_PACKETS) -> float:
    """The tbf ``latency`` that lets the bucket's queue hold `packets` full frames at `bw_mbps`."""
    return packets * FRAME_BYTES * 8 / (bw_mbps * 1e6) * 1e3


def tc_params(params: LinkParams, netem: bool = True) -> dict[str, Any]:
    """TCLink options for a link's bandwidth, and delay and loss when ``netem`` is there.

    Token bucket shaping (tbf) rather than htb: same rate, no quantum warnings; its queue
    holds :data:`LINK_QUEUE_PACKETS` frames (a host's transmit queue), not Mininet's ten.
    """
    opts: dict[str, Any] = {"bw": params.bw_mbps, "use_tbf": True, "latency_ms": tbf_latency_ms(params.bw_mbps)}
    if netem and params.delay_ms:
        opts["delay"] = f"{params.delay_ms:g}ms"
    if netem and params.loss_pct:
        opts["loss"] = params.loss_pct
    return opts


def unemulated(spec: TopologySpec) -> list[str]:
    """Links whose delay or loss this kernel cannot emulate (no netem), as readable lines."""
    if netem_available():
        return []
    return [f"{l.a}-{l.b}: delay {l.params.delay_ms:g} ms, loss {l.params.loss_pct:g}%"
            for l in spec.links if l.params.delay_ms or l.params.loss_pct]


class FabricTopo(Topo):
    """The Mininet view of a topology: hosts, switches and TC-shaped links."""

    def build(self, spec: TopologySpec, switch_configs: Mapping[str, SwitchConfig] | None = None,
              target: str = "embedded") -> None:
        for sw in spec.switches:
            opts: dict[str, Any] = {"dpid": f"{sw.device_id:x}"}
            if switch_configs is not None:
                opts.update(config=switch_configs[sw.name], target=target)
            self.addSwitch(sw.name, **opts)
        for host in spec.hosts:
            self.addHost(host.name, ip=f"{host.ip}/{host.prefix_len}", mac=host.mac)
        for link in spec.links:
            self.addLink(link.a, link.b, port1=link.a_port, port2=link.b_port, cls=TCLink,
                         **tc_params(link.params, netem_available()))


def qdisc_drops(tc_output: str) -> int:
    """Packets dropped by every qdisc of ``tc -s qdisc show dev IFACE``'s output."""
    return sum(int(m.group(1)) for m in re.finditer(r"\(dropped (\d+),", tc_output))


def host_link_drops(fabric: Any) -> dict[str, int]:
    """Qdisc drops on each host's interface of a booted fabric (the host side of its link,
    in front of the switch), by host name (without the fabric's prefix)."""
    out: dict[str, int] = {}
    for host in fabric.spec.hosts:
        node = fabric.net.get(host.name)
        text = node.cmd(f"tc -s qdisc show dev {node.defaultIntf().name}")
        out[host.name[len(fabric.options.prefix):]] = qdisc_drops(text)
    return out


def root_interfaces(spec: TopologySpec) -> list[str]:
    """Interfaces the fabric puts in the root namespace: every switch port."""
    names = {s.name for s in spec.switches}
    out = []
    for link in spec.links:
        for node, port in ((link.a, link.a_port), (link.b, link.b_port)):
            if node in names:
                out.append(iface_name(node, port))
    return out


def describe(spec: TopologySpec, configs: Mapping[str, SwitchConfig], target: str,
             program: Mapping[str, str], relative_to: Path | None = None) -> Fabric:
    """The fabric description (what the controller and agents read) of a booted fabric.

    File paths are written relative to ``relative_to`` when given (the work directory the
    readers resolve them against), absolute otherwise.
    """

    def rel(path: Path | str) -> str:
        if not str(path):
            return ""
        absolute = Path(path).resolve()
        if relative_to is not None and absolute.is_relative_to(relative_to):
            return str(absolute.relative_to(relative_to))
        return str(absolute)

    switches = []
    for sw in spec.switches:
        cfg = configs[sw.name]
        entry: dict[str, Any] = {
            "name": sw.name, "device_id": sw.device_id, "grpc_addr": cfg.grpc_addr,
            "cpu_port": cfg.cpu_port, "log": rel(cfg.log_file), "request_log": rel(cfg.p4runtime_log),
            "ports": [
                {"port": port, "iface": iface_name(sw.name, port), "peer": peer, "peer_port": peer_port}
                for port, peer, peer_port in spec.ports_of(sw.name)
            ],
        }
        if cfg.thrift_port:
            entry["thrift_port"] = cfg.thrift_port
        switches.append(entry)
    hosts = [
        {"name": h.name, "ip": h.ip, "prefix_len": h.prefix_len, "mac": h.mac, "switch": h.switch,
         "switch_port": h.switch_port, "gateway_mac": h.gateway_mac}
        for h in spec.hosts
    ]
    links = [
        {"a": l.a, "a_port": l.a_port, "b": l.b, "b_port": l.b_port, "bw_mbps": l.params.bw_mbps,
         "delay_ms": l.params.delay_ms, "loss_pct": l.params.loss_pct}
        for l in spec.links
    ]
    data = {"name": spec.name, "target": target, "program": {k: rel(v) for k, v in program.items()},
            "switches": switches, "hosts": hosts, "links": links}
    return fabric_description.from_dict(data, f"fabric built from {spec.source.name}")

