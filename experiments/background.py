"""Background traffic (iperf3, UDP and TCP) between hosts that share links with a job.

A :class:`Flow` runs an iperf3 server on its destination and a client on its source; the
hosts are reached through a :class:`Hosts` (Mininet hosts of a fabric, or network
namespaces). Use :class:`BackgroundTraffic` as a context manager: every process it starts
is stopped on the way out.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Protocol

from experiments.errors import ExperimentError

BASE_PORT = 5201


class Hosts(Protocol):
    def popen(self, host: str, argv: list[str]) -> subprocess.Popen: ...

    def ip(self, host: str) -> str: ...


@dataclass(frozen=True)
class Flow:
    src: str
    dst: str
    protocol: str  # "udp" or "tcp"
    mbps: float | None = None  # UDP: sending rate; TCP: None (as fast as the path allows)
    packet_bytes: int | None = None  # UDP datagram payload

    def describe(self) -> str:
        rate = f" {self.mbps:g} Mbit/s" if self.mbps else ""
        size = f" {self.packet_bytes} B" if self.packet_bytes else ""
        return f"{self.protocol.upper()} {self.src}->{self.dst}{rate}{size}"


class BackgroundTraffic:
    """See the module doc."""

    def __init__(self, hosts: Hosts, flows: Sequence[Flow], *, seconds: float = 3600.0) -> None:
        if shutil.which("iperf3") is None:
            raise ExperimentError("background traffic needs iperf3 (apt-get install iperf3)")
        for f in flows:
            if f.protocol not in ("udp", "tcp"):
                raise ExperimentError(f"background flow {f.describe()}: protocol must be udp or tcp")
        self.hosts = hosts
        self.flows = list(flows)
        self.seconds = seconds
        self.servers: list[subprocess.Popen] = []
        self.clients: list[subprocess.Popen] = []

    def __enter__(self) -> BackgroundTraffic:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def start(self) -> None:
        for i, flow in enumerate(self.flows):
            self.servers.append(self.hosts.popen(flow.dst, ["iperf3", "-s", "-p", str(BASE_PORT + i)]))
        time.sleep(0.5)  # servers listening
        for i, flow in enumerate(self.flows):
            argv = ["iperf3", "-c", self.hosts.ip(flow.dst), "-p", str(BASE_PORT + i),
                    "-t", f"{self.seconds:g}", "--json"]
            if flow.protocol == "udp":
                argv += ["-u", "-b", f"{flow.mbps or 1:g}M"]
                if flow.packet_bytes:
                    argv += ["-l", str(flow.packet_bytes)]
            self.clients.append(self.hosts.popen(flow.src, argv))
        for server in self.servers:
            if server.poll() is not None:
                raise ExperimentError(f"an iperf3 server exited at start (exit {server.returncode})")

    def wait(self, timeout: float) -> list[dict[str, Any]]:
        """Wait for every client to end on its own; their iperf3 JSON reports."""
        reports = []
        for client in self.clients:
            out, _ = client.communicate(timeout=timeout)
            try:
                reports.append(json.loads(out))
            except ValueError:
                raise ExperimentError(f"iperf3 client wrote no JSON report (exit {client.returncode})") from None
        return reports

    def stop(self) -> None:
        for proc in self.clients + self.servers:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.clients + self.servers:
            try:
                proc.communicate(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate(timeout=5)
        self.clients, self.servers = [], []


class NamespaceHosts:
    """Hosts that are Linux network namespaces: name -> (namespace, IP)."""

    def __init__(self, hosts: dict[str, tuple[str, str]]) -> None:
        self._hosts = hosts

    def popen(self, host: str, argv: list[str]) -> subprocess.Popen:
        ns, _ = self._hosts[host]
        return subprocess.Popen(["ip", "netns", "exec", ns, *argv], stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, text=True)

    def ip(self, host: str) -> str:
        return self._hosts[host][1]
