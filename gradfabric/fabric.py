"""The fabric description: switches, hosts and links of an emulated fabric.

The launcher writes it to ``build/fabric.json``; the controller and the host agents read
it. :func:`load` validates everything and reports each problem with its key path
(``switches[1].device_id: 1 is already used by switches[0] (s1)``). Relative file paths
resolve against the work directory (:func:`gradfabric.paths.workdir`).
"""

from __future__ import annotations

import ipaddress
import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gradfabric.errors import GradfabricError
from gradfabric.paths import build_dir, workdir

_MAC = re.compile(r"^[0-9a-f]{2}(:[0-9a-f]{2}){5}$")
_ADDR = re.compile(r"^[^:\s]+:\d{1,5}$")


class FabricError(GradfabricError):
    """A fabric description that is missing, unreadable or inconsistent."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.problems = problems
        super().__init__(f"{source}: " + "; ".join(problems))


def default_path() -> Path:
    return build_dir() / "fabric.json"


def switch_port_mac(device_id: int, port: int) -> str:
    """The MAC of a switch port: 00:00:00:00:<device_id>:<port> (hex bytes)."""
    return f"00:00:00:00:{device_id & 0xFF:02x}:{port & 0xFF:02x}"


@dataclass(frozen=True)
class Program:
    source: str
    p4info: str
    device_config: str


@dataclass(frozen=True)
class SwitchPort:
    port: int
    iface: str
    peer: str
    peer_port: int


@dataclass(frozen=True)
class Switch:
    name: str
    device_id: int
    grpc_addr: str
    cpu_port: int = 510
    log: str = ""
    request_log: str = ""
    ports: tuple[SwitchPort, ...] = ()
    thrift_port: int | None = None

    def port(self, number: int) -> SwitchPort:
        for p in self.ports:
            if p.port == number:
                return p
        raise FabricError(self.name, [f"has no port {number}"])

    def port_mac(self, number: int) -> str:
        return switch_port_mac(self.device_id, number)


@dataclass(frozen=True)
class Host:
    name: str
    ip: str
    prefix_len: int
    mac: str
    switch: str
    switch_port: int
    gateway_mac: str


@dataclass(frozen=True)
class Link:
    a: str
    a_port: int
    b: str
    b_port: int
    bw_mbps: float = 0
    delay_ms: float = 0
    loss_pct: float = 0


@dataclass(frozen=True)
class Fabric:
    name: str
    target: str
    program: Program
    switches: tuple[Switch, ...]
    hosts: tuple[Host, ...]
    links: tuple[Link, ...] = field(default=())

    def switch(self, name: str) -> Switch:
        for s in self.switches:
            if s.name == name:
                return s
        raise FabricError(self.name, [f"no switch named {name!r} (has: {', '.join(s.name for s in self.switches)})"])

    def host(self, name: str) -> Host:
        for h in self.hosts:
            if h.name == name:
                return h
        raise FabricError(self.name, [f"no host named {name!r}"])

    @staticmethod
    def path(relative: str) -> Path:
        """A file named in the description, resolved against the work directory."""
        p = Path(relative)
        return p if p.is_absolute() else workdir() / p

    def to_dict(self) -> dict[str, Any]:
        data = json.loads(json.dumps(asdict(self)))
        for sw in data["switches"]:
            if sw["thrift_port"] is None:
                del sw["thrift_port"]
        return data


# -- parsing with key paths ------------------------------------------------------------------
class _Checker:
    def __init__(self) -> None:
        self.problems: list[str] = []

    def get(self, obj: Any, key: str, path: str, kind: type | tuple[type, ...], default: Any = ...) -> Any:
        where = f"{path}.{key}" if path else key
        if not isinstance(obj, dict):
            self.problems.append(f"{path}: must be a mapping")
            return None if default is ... else default
        if key not in obj:
            if default is ...:
                self.problems.append(f"{where}: is required")
                return None
            return default
        value = obj[key]
        if isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)):
            value = None
        if not isinstance(value, kind):
            names = "/".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
            self.problems.append(f"{where}: must be {names}, got {obj[key]!r}")
            return None if default is ... else default
        return value

    def check(self, ok: bool, message: str) -> None:
        if not ok:
            self.problems.append(message)


def _parse_switch(c: _Checker, sw: Any, path: str) -> Switch:
    ports = []
    for j, p in enumerate(c.get(sw, "ports", path, list, []) or []):
        ppath = f"{path}.ports[{j}]"
        number = c.get(p, "port", ppath, int)
        c.check(
            number is None or 1 <= number <= 510,
            f"{ppath}.port: must be 1..510 (ports are numbered from 1), got {number}",
        )
        ports.append(
            SwitchPort(
                port=number or 0,
                iface=c.get(p, "iface", ppath, str, ""),
                peer=c.get(p, "peer", ppath, str) or "",
                peer_port=c.get(p, "peer_port", ppath, int, 0),
            )
        )
    numbers = [p.port for p in ports]
    c.check(len(set(numbers)) == len(numbers), f"{path}.ports: port numbers repeat: {sorted(numbers)}")
    device_id = c.get(sw, "device_id", path, int)
    if device_id is not None:
        c.check(0 <= device_id < 1 << 64, f"{path}.device_id: must be a 64-bit unsigned number, got {device_id}")
    addr = c.get(sw, "grpc_addr", path, str)
    if addr is not None:
        c.check(bool(_ADDR.match(addr)), f"{path}.grpc_addr: must be HOST:PORT, got {addr!r}")
    return Switch(
        name=c.get(sw, "name", path, str) or "",
        device_id=device_id if device_id is not None else -1,
        grpc_addr=addr or "",
        cpu_port=c.get(sw, "cpu_port", path, int, 510),
        log=c.get(sw, "log", path, str, ""),
        request_log=c.get(sw, "request_log", path, str, ""),
        ports=tuple(ports),
        thrift_port=c.get(sw, "thrift_port", path, (int, type(None)), None),
    )


def _parse_host(c: _Checker, h: Any, path: str) -> Host:
    host = Host(
        name=c.get(h, "name", path, str) or "",
        ip=c.get(h, "ip", path, str) or "",
        prefix_len=c.get(h, "prefix_len", path, int, 24),
        mac=(c.get(h, "mac", path, str) or "").lower(),
        switch=c.get(h, "switch", path, str) or "",
        switch_port=c.get(h, "switch_port", path, int) or 0,
        gateway_mac=(c.get(h, "gateway_mac", path, str, "") or "").lower(),
    )
    try:
        ipaddress.IPv4Address(host.ip)
    except ValueError:
        c.problems.append(f"{path}.ip: not an IPv4 address: {host.ip!r}")
    c.check(0 <= host.prefix_len <= 32, f"{path}.prefix_len: must be 0..32, got {host.prefix_len}")
    c.check(bool(_MAC.match(host.mac)), f"{path}.mac: not a MAC address: {host.mac!r}")
    c.check(
        not host.gateway_mac or bool(_MAC.match(host.gateway_mac)),
        f"{path}.gateway_mac: not a MAC address: {host.gateway_mac!r}",
    )
    return host


def _parse_link(c: _Checker, link: Any, path: str) -> Link:
    return Link(
        a=c.get(link, "a", path, str) or "",
        a_port=c.get(link, "a_port", path, int) or 0,
        b=c.get(link, "b", path, str) or "",
        b_port=c.get(link, "b_port", path, int) or 0,
        bw_mbps=c.get(link, "bw_mbps", path, (int, float), 0),
        delay_ms=c.get(link, "delay_ms", path, (int, float), 0),
        loss_pct=c.get(link, "loss_pct", path, (int, float), 0),
    )


def from_dict(data: Any, source: str = "fabric") -> Fabric:
    """A validated Fabric; raises FabricError listing every problem with its key path."""
    c = _Checker()
    if not isinstance(data, dict):
        raise FabricError(source, ["top level must be a JSON object"])
    name = c.get(data, "name", "", str)
    target = c.get(data, "target", "", str, "embedded")
    c.check(target in ("embedded", "bmv2"), f"target: must be embedded or bmv2, got {target!r}")
    prog = c.get(data, "program", "", dict) or {}
    program = Program(
        source=c.get(prog, "source", "program", str, ""),
        p4info=c.get(prog, "p4info", "program", str) or "",
        device_config=c.get(prog, "device_config", "program", str) or "",
    )
    switches = [_parse_switch(c, sw, f"switches[{i}]") for i, sw in enumerate(c.get(data, "switches", "", list) or [])]
    hosts = [_parse_host(c, h, f"hosts[{i}]") for i, h in enumerate(c.get(data, "hosts", "", list, []) or [])]
    links = [_parse_link(c, link, f"links[{i}]") for i, link in enumerate(c.get(data, "links", "", list, []) or [])]
    fabric = Fabric(name or "", target, program, tuple(switches), tuple(hosts), tuple(links))
    _check_unique(fabric, c)
    _check_references(fabric, c)
    if c.problems:
        raise FabricError(source, c.problems)
    return fabric


def _check_unique(fabric: Fabric, c: _Checker) -> None:
    """Device ids, P4Runtime addresses and names are each used once."""
    ids: dict[int, str] = {}
    addrs: dict[str, str] = {}
    names: dict[str, str] = {}
    for i, s in enumerate(fabric.switches):
        path = f"switches[{i}]"
        if s.device_id >= 0:
            used = ids.get(s.device_id)
            c.check(used is None, f"{path}.device_id: {s.device_id} is already used by {used}")
            ids.setdefault(s.device_id, f"{path} ({s.name})")
        if s.grpc_addr:
            used = addrs.get(s.grpc_addr)
            c.check(used is None, f"{path}.grpc_addr: {s.grpc_addr} is already used by {used}")
            addrs.setdefault(s.grpc_addr, f"{path} ({s.name})")
        c.check(s.name not in names, f"{path}.name: {s.name!r} is already used by {names.get(s.name)}")
        names.setdefault(s.name, path)
    ips: dict[str, str] = {}
    for i, h in enumerate(fabric.hosts):
        c.check(h.name not in names, f"hosts[{i}].name: {h.name!r} is already used by {names.get(h.name)}")
        names.setdefault(h.name, f"hosts[{i}]")
        c.check(h.ip not in ips, f"hosts[{i}].ip: {h.ip} is already used by {ips.get(h.ip)}")
        ips.setdefault(h.ip, f"hosts[{i}] ({h.name})")


def _check_references(fabric: Fabric, c: _Checker) -> None:
    """Hosts attach to existing switch ports; links join existing nodes and ports."""
    names = {s.name for s in fabric.switches} | {h.name for h in fabric.hosts}
    switches = {s.name: s for s in fabric.switches}
    for i, h in enumerate(fabric.hosts):
        sw = switches.get(h.switch)
        if sw is None:
            c.problems.append(f"hosts[{i}].switch: no switch named {h.switch!r}")
        else:
            c.check(
                any(p.port == h.switch_port for p in sw.ports),
                f"hosts[{i}].switch_port: {h.switch} has no port {h.switch_port}",
            )
    for i, link in enumerate(fabric.links):
        for end, port in ((link.a, link.a_port), (link.b, link.b_port)):
            c.check(end in names, f"links[{i}]: no switch or host named {end!r}")
            sw = switches.get(end)
            if sw is not None:
                c.check(any(p.port == port for p in sw.ports), f"links[{i}]: {end} has no port {port}")


def load(path: str | Path | None = None) -> Fabric:
    """Read and validate a fabric description (default: build/fabric.json)."""
    path = Path(path) if path else default_path()
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise FabricError(str(path), ["no fabric description here; boot the fabric first (make run)"]) from None
    except OSError as exc:
        raise FabricError(str(path), [f"cannot read: {exc.strerror}"]) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise FabricError(str(path), [f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"]) from None
    return from_dict(data, str(path))


def save(fabric: Fabric, path: str | Path | None = None) -> Path:
    """Write the description as indented JSON (validated first); returns the path."""
    path = Path(path) if path else default_path()
    from_dict(fabric.to_dict(), str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(fabric.to_dict(), indent=2) + "\n")
    return path
