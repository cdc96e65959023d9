"""Background traffic between hosts that share links with a job, and what it achieved.

A :class:`Flow` is a long iperf3 flow (``tcp``, or ``udp`` at a fixed rate) or a stream of
short request/response connections (``rr``, :mod:`experiments.rr`). The hosts are reached
through a :class:`Hosts` (Mininet hosts of a fabric, or network namespaces). Use
:class:`BackgroundTraffic` as a context manager: every process it starts is stopped on the
way out; :meth:`BackgroundTraffic.finish` stops the clients and returns a
:class:`FlowReport` per flow (goodput from the receiver's byte count, UDP loss, FCTs).
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from types import TracebackType
from typing import Any, Protocol

from experiments.errors import ExperimentError

BASE_PORT = 5201
PROTOCOLS = ("udp", "tcp", "rr")


class Hosts(Protocol):
    def popen(self, host: str, argv: list[str]) -> subprocess.Popen: ...

    def ip(self, host: str) -> str: ...


@dataclass(frozen=True)
class Flow:
    src: str
    dst: str
    protocol: str  # "udp", "tcp" (long flows, iperf3) or "rr" (short request/response)
    mbps: float | None = None  # UDP: sending rate; TCP: None (as fast as the path allows)
    packet_bytes: int | None = None  # UDP datagram payload; rr: response bytes
    interval_s: float = 0.05  # rr: seconds between request starts

    def describe(self) -> str:
        if self.protocol == "rr":
            return (f"request/response {self.src}->{self.dst} {self.packet_bytes or 8000} B "
                    f"every {self.interval_s * 1e3:g} ms")
        rate = f" {self.mbps:g} Mbit/s" if self.mbps else ""
        size = f" {self.packet_bytes} B" if self.packet_bytes else ""
        return f"{self.protocol.upper()} {self.src}->{self.dst}{rate}{size}"


@dataclass
class FlowReport:
    """What one background flow achieved while the job ran."""

    flow: str
    protocol: str
    seconds: float
    goodput_mbps: float | None = None  # received payload
    loss: float | None = None  # UDP: share of datagrams lost
    requests: int | None = None  # rr
    failed: int | None = None  # rr: requests that timed out or broke
    fct_s: list[float] = field(default_factory=list)  # rr: completion times
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _json(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


class BackgroundTraffic:
    """See the module doc."""

    def __init__(self, hosts: Hosts, flows: Sequence[Flow], *, seconds: float = 3600.0) -> None:
        if any(f.protocol != "rr" for f in flows) and shutil.which("iperf3") is None:
            raise ExperimentError("background traffic needs iperf3 (apt-get install iperf3)")
        for f in flows:
            if f.protocol not in PROTOCOLS:
                raise ExperimentError(f"background flow {f.describe()}: protocol must be one of {', '.join(PROTOCOLS)}")
        self.hosts = hosts
        self.flows = list(flows)
        self.seconds = seconds
        self.servers: list[subprocess.Popen] = []
        self.clients: list[subprocess.Popen] = []
        self.started = 0.0

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

    def _server_argv(self, i: int, flow: Flow) -> list[str]:
        port = str(BASE_PORT + i)
        if flow.protocol == "rr":
            return [sys.executable, "-m", "experiments.rr", "server", "--port", port]
        return ["iperf3", "-s", "-1", "--json", "-p", port]

    def _client_argv(self, i: int, flow: Flow) -> list[str]:
        port, dst = str(BASE_PORT + i), self.hosts.ip(flow.dst)
        if flow.protocol == "rr":
            return [sys.executable, "-m", "experiments.rr", "client", "--server", dst, "--port", port,
                    "--size", str(flow.packet_bytes or 8000), "--interval", repr(flow.interval_s)]
        argv = ["iperf3", "-c", dst, "-p", port, "-t", f"{self.seconds:g}", "--json"]
        if flow.protocol == "udp":
            argv += ["-u", "-b", f"{flow.mbps or 1:g}M"]
            if flow.packet_bytes:
                argv += ["-l", str(flow.packet_bytes)]
        return argv

    def start(self) -> None:
        for i, flow in enumerate(self.flows):
            self.servers.append(self.hosts.popen(flow.dst, self._server_argv(i, flow)))
        time.sleep(0.7)  # servers listening
        self.started = time.monotonic()
        for i, flow in enumerate(self.flows):
            self.clients.append(self.hosts.popen(flow.src, self._client_argv(i, flow)))
        for server in self.servers:
            if server.poll() is not None:
                raise ExperimentError(f"a background server exited at start (exit {server.returncode})")

    def wait(self, timeout: float) -> list[dict[str, Any]]:
        """Wait for every iperf3 client to end on its own; their JSON reports."""
        reports = []
        for client in self.clients:
            out, _ = client.communicate(timeout=timeout)
            report = _json(out or "")
            if report is None:
                raise ExperimentError(f"a background client wrote no JSON report (exit {client.returncode})")
            reports.append(report)
        return reports

    def finish(self) -> list[FlowReport]:
        """Stop the clients (SIGINT: they report), then collect every flow's report."""
        seconds = time.monotonic() - self.started
        for client in self.clients:
            if client.poll() is None:
                client.send_signal(signal.SIGINT)
        outs = []
        for client in self.clients:
            try:
                out, _ = client.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                client.kill()
                out, _ = client.communicate(timeout=5)
            outs.append(out or "")
        server_outs = []
        for i, server in enumerate(self.servers):
            if self.flows[i].protocol != "rr":
                try:
                    out, _ = server.communicate(timeout=5)
                except subprocess.TimeoutExpired:
                    out = ""
                server_outs.append(out or "")
            else:
                server_outs.append("")
        reports = [self._report(flow, seconds, c, s) for flow, c, s in zip(self.flows, outs, server_outs)]
        self.stop()
        return reports

    @staticmethod
    def _report(flow: Flow, seconds: float, client_out: str, server_out: str) -> FlowReport:
        report = FlowReport(flow=flow.describe(), protocol=flow.protocol, seconds=round(seconds, 2))
        client = _json(client_out.strip().splitlines()[-1] if flow.protocol == "rr" and client_out.strip()
                       else client_out)
        if client is None:
            report.error = "the client wrote no JSON report"
            return report
        if flow.protocol == "rr":
            report.requests, report.failed = int(client["requests"]), int(client["failed"])
            report.fct_s = [float(f) for f in client["fct_s"]]
            report.goodput_mbps = len(report.fct_s) * int(client["size"]) * 8 / max(seconds, 1e-9) / 1e6
            return report
        server = _json(server_out) or {}
        received = server.get("end", {}).get("sum_received", {})
        if received:
            report.goodput_mbps = float(received.get("bytes", 0)) * 8 / max(seconds, 1e-9) / 1e6
        if flow.protocol == "udp":
            sent = client.get("end", {}).get("sum", {}).get("packets")
            got = received.get("packets")
            if sent and got is not None:
                report.loss = max(0.0, 1.0 - float(got) / float(sent))
        if not received:
            report.error = "the server wrote no report"
        return report

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
