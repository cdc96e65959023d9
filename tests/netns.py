"""Network namespaces and veth pairs for tests, always removed afterwards.

Every namespace and interface made here carries a per-run prefix, so a crashed run
can be cleaned with :func:`remove_leftovers` and tests never touch anything else.
"""

from __future__ import annotations

import os
import socket
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from mininet_topos.launcher import free_ports

PREFIX = "gft"


def sh(*cmd: str, check: bool = True, timeout: float = 20) -> subprocess.CompletedProcess[str]:
    """Run a command, raising with its stderr when it fails."""
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc


def in_ns(ns: str, *cmd: str, **kw: object) -> subprocess.CompletedProcess[str]:
    return sh("ip", "netns", "exec", ns, *cmd, **kw)  # type: ignore[arg-type]


@dataclass
class Host:
    """A namespace with one interface, `iface`, addressed `ip`/24."""

    ns: str
    iface: str
    ip: str
    mac: str


@dataclass
class Lab:
    """Namespaces and root-namespace veth ends made by one test."""

    tag: str = field(default_factory=lambda: uuid.uuid4().hex[:5])
    namespaces: list[str] = field(default_factory=list)
    links: list[str] = field(default_factory=list)

    def name(self, kind: str, i: int) -> str:
        # Interface names are limited to 15 characters.
        return f"{PREFIX}{self.tag}{kind}{i}"

    def add_host(self, i: int, ip: str, *, root_side: bool = True) -> tuple[Host, str]:
        """A namespace host whose veth peer stays in the root namespace.

        Returns the host and the name of the root-side interface (to give to a switch).
        """
        ns = self.name("n", i)
        sh("ip", "netns", "add", ns)
        self.namespaces.append(ns)
        inner, outer = self.name("h", i), self.name("s", i)
        sh("ip", "link", "add", inner, "type", "veth", "peer", "name", outer)
        self.links.append(outer)
        sh("ip", "link", "set", inner, "netns", ns)
        mac = f"02:00:00:00:{i // 256:02x}:{i % 256:02x}"
        in_ns(ns, "ip", "link", "set", inner, "address", mac)
        in_ns(ns, "ip", "addr", "add", f"{ip}/24", "dev", inner)
        in_ns(ns, "ip", "link", "set", inner, "up")
        in_ns(ns, "ip", "link", "set", "lo", "up")
        # A software switch never fills checksums left to offload (see MISSION.md section 6).
        in_ns(ns, "ethtool", "-K", inner, "tx", "off", check=False)
        sh("ip", "link", "set", outer, "up")
        sh("ethtool", "-K", outer, "tx", "off", check=False)
        return Host(ns=ns, iface=inner, ip=ip, mac=mac), outer

    def add_bridge(self, ports: list[str], i: int = 0) -> str:
        """A root-namespace Linux bridge joining ``ports`` (root-side veth ends); its name."""
        bridge = self.name("br", i)
        sh("ip", "link", "add", bridge, "type", "bridge")
        self.links.append(bridge)
        for port in ports:
            sh("ip", "link", "set", port, "master", bridge)
        sh("ip", "link", "set", bridge, "up")
        return bridge

    def close(self) -> None:
        for link in self.links:
            sh("ip", "link", "del", link, check=False)
        for ns in self.namespaces:
            sh("ip", "netns", "del", ns, check=False)


@contextmanager
def lab() -> Iterator[Lab]:
    """A :class:`Lab` that is torn down whatever happens in the test."""
    made = Lab()
    try:
        yield made
    finally:
        made.close()


def route_through_gateways(hosts: dict[str, Host], descriptions: list[dict], subnet: str) -> None:
    """Give each host a route to ``subnet`` and a permanent neighbour entry for every other
    host's IP at its own ``gateway_mac`` (the switches route and never answer ARP).

    ``descriptions`` are fabric description host entries (``name``, ``ip``, ``gateway_mac``).
    """
    for desc in descriptions:
        host = hosts[desc["name"]]
        in_ns(host.ns, "ip", "route", "add", subnet, "dev", host.iface)
        for other in descriptions:
            if other is not desc:
                in_ns(host.ns, "ip", "neigh", "replace", other["ip"], "lladdr", desc["gateway_mac"],
                      "dev", host.iface, "nud", "permanent")


_handed_out: set[int] = set()


def free_port() -> int:
    """A TCP port on loopback that nothing listens on right now, never one this process got before
    (ports chosen one after another can repeat; two switches of one test would then clash)."""
    while True:
        port = free_ports(1)[0]
        if port not in _handed_out:
            _handed_out.add(port)
            return port


def accepts_connections(host: str, port: int) -> bool:
    """True when something listens on the port (a connection to itself does not count)."""
    try:
        with socket.create_connection((host, port), timeout=0.2) as sock:
            return sock.getsockname() != sock.getpeername()
    except OSError:
        return False


def remove_leftovers() -> None:
    """Delete every namespace and interface with the test prefix (after a crash)."""
    for ns in sh("ip", "netns", "list").stdout.split():
        if ns.startswith(PREFIX):
            sh("ip", "netns", "del", ns, check=False)
    for line in sh("ip", "-o", "link").stdout.splitlines():
        name = line.split(":")[1].strip().split("@")[0]
        if name.startswith(PREFIX):
            sh("ip", "link", "del", name, check=False)


def is_root() -> bool:
    return os.geteuid() == 0
