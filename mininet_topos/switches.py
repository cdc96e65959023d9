"""Mininet switch nodes: a P4 switch process per node (embedded target or BMv2), and a plain
Linux bridge used to check the fabric plumbing without any P4 switch.

A :class:`P4SwitchNode` lives in the root namespace, like Mininet's own software switches.
Its process is started in a session of its own (so a Ctrl-C in the Mininet CLI does not
reach it), writes its output next to its log, and is ready when its P4Runtime port accepts
connections. A switch that does not get there is reported with its command line and the
last lines of what it wrote.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mininet.node import Switch

from gradfabric.errors import GradfabricError

TARGETS = ("embedded", "bmv2")
BMV2_BINARY = "simple_switch_grpc"
LOG_TAIL_LINES = 20


class SwitchStartError(GradfabricError):
    """A switch process that exited or never opened its P4Runtime port."""


class TargetMissingError(GradfabricError):
    """The requested switch target is not installed."""


@dataclass(frozen=True)
class SwitchConfig:
    """Everything one switch process is started with."""

    name: str
    device_id: int
    grpc_port: int
    log_file: Path
    p4runtime_log: Path
    cpu_port: int = 510
    priority_queues: int = 8
    egress_rate_pps: int = 40000
    queue_depth: int = 64
    #: "port": egress_rate_pps is one rate shared by a port's priority queues (embedded only);
    #: "queue": each priority queue gets it (BMv2's set_queue_rate R PORT).
    rate_scope: str = "port"
    log_level: str = "info"
    pcap_dir: Path | None = None
    #: BMv2 only: its Thrift port (for simple_switch_CLI queue settings).
    thrift_port: int = 0
    #: (port number, interface name), filled from the node's interfaces at start.
    ports: tuple[tuple[int, str], ...] = field(default=())

    @property
    def grpc_addr(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def output_file(self) -> Path:
        """Where the process's own stdout and stderr go (beside its log)."""
        return self.log_file.with_suffix(".out")


def embedded_command(cfg: SwitchConfig) -> list[str]:
    """The `p4switch run` command line of one switch (pipeline from the controller)."""
    cmd = [sys.executable, "-m", "p4switch.cli", "run", "--no-p4"]
    for port, iface in cfg.ports:
        cmd += ["-i", f"{port}@{iface}"]
    cmd += [
        "--device-id", str(cfg.device_id),
        "--grpc-server-addr", cfg.grpc_addr,
        "--cpu-port", str(cfg.cpu_port),
        "--priority-queues", str(cfg.priority_queues),
        "--log-file", str(cfg.log_file),
        "--log-level", cfg.log_level,
        "--p4runtime-log", str(cfg.p4runtime_log),
    ]
    rate_option = "--port-rate" if cfg.rate_scope == "port" else "--queue-rate"
    for port, _ in cfg.ports:
        cmd += [rate_option, f"{port}={cfg.egress_rate_pps}pps", "--queue-depth", f"{port}={cfg.queue_depth}"]
    if cfg.pcap_dir is not None:
        cmd += ["--pcap", str(cfg.pcap_dir)]
    return cmd


def require_bmv2() -> str:
    """The path of simple_switch_grpc ($GRADFABRIC_P4REF/bin, else PATH), or a clear refusal."""
    from gradfabric.p4ref import ENV_PREFIX, find_tool

    binary = find_tool(BMV2_BINARY)
    if binary is None:
        raise TargetMissingError(
            f"--target bmv2 needs {BMV2_BINARY} under ${ENV_PREFIX}/bin or on PATH and it is in "
            "neither; install BMv2 (p4lang/behavioral-model built with PI/P4Runtime) or use "
            "--target embedded"
        )
    return str(binary)


def bmv2_command(cfg: SwitchConfig) -> list[str]:
    """The `simple_switch_grpc` command line of one switch (pipeline from the controller).

    BMv2 1.15's form: general options, then ``--no-p4``, then after ``--`` the target
    options of ``simple_switch_grpc`` (P4Runtime address on loopback, CPU port, priority
    queues). Queue rate and depth are not command-line options of BMv2: the launcher sets
    them afterwards through its Thrift CLI (``simple_switch_CLI``, on ``thrift_port``).
    """
    cmd = [require_bmv2()]
    for port, iface in cfg.ports:
        cmd += ["-i", f"{port}@{iface}"]
    cmd += [
        "--device-id", str(cfg.device_id),
        "--log-file", str(cfg.log_file.with_suffix("")),  # BMv2 appends ".txt" (the launcher's log_file)
        "--log-flush",
        "--log-level", cfg.log_level,
        "--thrift-port", str(cfg.thrift_port),
    ]
    if cfg.pcap_dir is not None:
        cmd += ["--pcap", str(cfg.pcap_dir)]
    cmd += ["--no-p4", "--",
            "--grpc-server-addr", cfg.grpc_addr,
            "--cpu-port", str(cfg.cpu_port),
            "--priority-queues", str(cfg.priority_queues)]
    return cmd


def tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last lines of a file, or a note that it does not exist."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return f"    ({path} was not written)"
    last = text.splitlines()[-lines:]
    return "\n".join(f"    {line}" for line in last) if last else f"    ({path} is empty)"


def port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.2)
        return sock.connect_ex(("127.0.0.1", port)) == 0


class SwitchProcess:
    """One running switch process: start, readiness, failure report, stop."""

    def __init__(self, cfg: SwitchConfig, command: list[str]) -> None:
        self.cfg = cfg
        self.command = command
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.cfg.log_file.parent.mkdir(parents=True, exist_ok=True)
        if self.cfg.pcap_dir is not None:
            self.cfg.pcap_dir.mkdir(parents=True, exist_ok=True)
        with open(self.cfg.output_file, "wb") as out:
            self.proc = subprocess.Popen(
                self.command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def wait_ready(self, deadline: float) -> None:
        """Return once the P4Runtime port accepts connections; raise with the log tail if not."""
        assert self.proc is not None, "start() first"
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise self.failure(f"exited with code {self.proc.returncode}")
            if port_open(self.cfg.grpc_port):
                return
            time.sleep(0.1)
        raise self.failure(f"did not open its P4Runtime port {self.cfg.grpc_addr} in time")

    def failure(self, what: str) -> SwitchStartError:
        return SwitchStartError(
            f"switch {self.cfg.name} {what}\n  command: {' '.join(self.command)}\n"
            f"  last lines of {self.cfg.output_file}:\n{tail(self.cfg.output_file)}\n"
            f"  last lines of {self.cfg.log_file}:\n{tail(self.cfg.log_file)}"
        )

    def stop(self, timeout: float = 5.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout)


class P4SwitchNode(Switch):
    """A Mininet switch whose data plane is a P4 switch process (embedded or BMv2).

    Mininet calls :meth:`start` once the links exist; the launcher then waits on
    :attr:`process` for readiness.
    """

    def __init__(self, name: str, config: SwitchConfig, target: str = "embedded",
                 **params: Any) -> None:
        if target not in TARGETS:
            raise GradfabricError(f"unknown target {target!r} (expected one of {', '.join(TARGETS)})")
        params.setdefault("dpid", f"{config.device_id:x}")
        super().__init__(name, **params)
        self.config = config
        self.target = target
        self.process: SwitchProcess | None = None

    def port_map(self) -> tuple[tuple[int, str], ...]:
        return tuple(sorted((port, intf.name) for intf, port in self.ports.items()
                            if intf.name != "lo"))

    def start(self, controllers: list[Any]) -> None:
        cfg = SwitchConfig(**{**self.config.__dict__, "ports": self.port_map()})
        self.config = cfg
        command = bmv2_command(cfg) if self.target == "bmv2" else embedded_command(cfg)
        for _, iface in cfg.ports:
            self.cmd(f"ethtool -K {iface} tx off rx off >/dev/null 2>&1; "
                     f"sysctl -qw net.ipv6.conf.{iface}.disable_ipv6=1")
        self.process = SwitchProcess(cfg, command)
        self.process.start()

    def stop(self, deleteIntfs: bool = True) -> None:  # noqa: N803 (Mininet's signature)
        if self.process is not None:
            self.process.stop()
        super().stop(deleteIntfs)


class BridgeSwitchNode(Switch):
    """A Linux bridge named after the node: plain L2 forwarding, for checking the plumbing."""

    def __init__(self, name: str, **params: Any) -> None:
        params.pop("config", None)
        params.pop("target", None)
        super().__init__(name, **params)

    def start(self, controllers: list[Any]) -> None:
        self.cmd(f"ip link add name {self.name} type bridge")
        for intf in self.intfList():
            if intf.name != "lo":
                self.cmd(f"ip link set {intf.name} master {self.name}")
        self.cmd(f"ip link set {self.name} up")

    def stop(self, deleteIntfs: bool = True) -> None:  # noqa: N803
        self.cmd(f"ip link del {self.name}")
        super().stop(deleteIntfs)


def process_start_time(pid: int) -> int | None:
    """The start time of a running process (clock ticks since boot), to tell a reused pid
    apart; None when there is no such process or it has exited (a zombie)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return None if fields[0] in ("Z", "X") else int(fields[19])

