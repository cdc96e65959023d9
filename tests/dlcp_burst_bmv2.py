"""The burst scenarios of :mod:`tests.dlcp_burst` on BMv2: ``simple_switch --use-files``, timing
markers for each packet's arrival, and the counters read through ``simple_switch_CLI`` (the
method is in :mod:`tests.dlcp_burst`'s module doc)."""

from __future__ import annotations

import re
import socket
import subprocess
import time
from pathlib import Path

from scapy.layers.inet import IP
from scapy.layers.l2 import Ether
from scapy.utils import RawPcapReader, wrpcap

from gradfabric.paths import P4SRC
from mininet_topos.launcher import free_port
from tests.dlcp_burst import (
    DEPTH,
    EARLY,
    ECT0,
    IN_PORT,
    JOB,
    MEMBERS,
    OUT_PORT,
    RED,
    BurstResult,
    Delivered,
    Entry,
    Scenario,
    Tern,
)
from tests.test_dlcp_pipeline import mac_int, peer_mac, port_mac, udp_frame

BMV2_RATE_PPS = 50             # BMv2's: a burst its loaded ingress spreads over 100 ms is five departures
MARKER_PORT = 9                # BMv2: timing markers leave here (an egress thread of no congested port)
MARKER_NET, MARKER_DST = "10.0.9.0/24", "10.0.9.9"
MARKER_ID = 0x8000             # a marker's IPv4 identification: this | the index of the packet it precedes
MARKER_EVERY = 4               # a marker before packets 0, 4, 8, ...: a quarter more ingress work, not double
MAX_ARRIVAL_SPAN_MS = 100.0    # BMv2: a burst must arrive within five departures of the congested queue
BURST_TRIES = 3                # runs of a scenario whose burst arrived slower than that, before an error
CLI_WAITS_S = (2, 5, 12, 30)   # the file reader's waits, each tried when the CLI was slower than the last


# -- BMv2 -------------------------------------------------------------------------------------
class Bmv2RunError(RuntimeError):
    """simple_switch or its CLI failed during a burst run."""


class _CliTooSlow(Bmv2RunError):
    """The entries were not all written before the file reader started injecting."""


def compile_bmv2(out_dir: Path) -> Path:
    """dlcp.p4 compiled by p4c into out_dir; returns the BMv2 JSON."""
    from gradfabric.p4build import compile_p4c
    from gradfabric.p4ref import require_tool

    return compile_p4c(P4SRC / "dlcp.p4", out_dir, str(require_tool("p4c"))).device_config


def cli_commands(scenario: Scenario, frames: int | None = None) -> list[str]:
    """The scenario's entries and queue settings in simple_switch_CLI syntax. Ports without a
    rate stand for uncongested links: their queues hold the whole burst of ``frames`` (BMv2's
    default of 64 packets tail-drops when a loaded machine slows its egress thread while the
    file reader injects at full speed); the congested ports then get the scenario's rate and
    depth."""
    lines = [f"set_queue_depth {max(64, frames or len(scenario.packets))}"]
    for e in scenario.entries:
        if e.default:
            lines.append(f"table_set_default {e.table} {e.action} {' '.join(map(str, e.args))}".rstrip())
            continue
        keys = [m if isinstance(m, str) else f"{m[0]}->{m[1]}" if isinstance(m, tuple)
                else "0&&&0" if m is None else f"{m.value}&&&{m.mask}" if isinstance(m, Tern) else str(m)
                for m in e.match]
        prio = f" {e.priority}" if e.priority else ""
        lines.append(f"table_add {e.table} {e.action} {' '.join(keys)} => {' '.join(map(str, e.args))}{prio}")
    for port in scenario.rate_ports:
        lines += [f"set_queue_rate {BMV2_RATE_PPS} {port}", f"set_queue_depth {DEPTH} {port}"]
    return lines


def run_bmv2(scenario: Scenario, json_path: Path, work: Path) -> BurstResult:
    """The burst through simple_switch in file mode (see the module doc). The file reader waits
    a fixed time before injecting; when the CLI has not finished by then (a loaded machine),
    the run is repeated with a longer wait. A congested scenario measures its mechanism only if
    the burst reached the switch as a burst: a run whose markers spread over more than
    ``MAX_ARRIVAL_SPAN_MS`` is repeated, at most ``BURST_TRIES`` times, then an error."""
    waits = iter(CLI_WAITS_S)
    wait_s = next(waits)
    spans: list[float] = []
    while True:
        try:
            result = _run_bmv2_once(scenario, json_path, work / f"wait{wait_s}-{len(spans)}", wait_s)
        except _CliTooSlow:
            longer = next(waits, None)
            if longer is None:
                raise Bmv2RunError(f"simple_switch_CLI needed more than {wait_s} s to write "
                                   f"{len(scenario.entries)} entries ({work})") from None
            wait_s = longer
            continue
        if result.arrival_span_ms <= MAX_ARRIVAL_SPAN_MS:
            return result
        spans.append(result.arrival_span_ms)
        if len(spans) >= BURST_TRIES:
            raise Bmv2RunError(
                f"{scenario.name}: the burst reached BMv2 over {', '.join(f'{x:.0f}' for x in spans)} ms in "
                f"{len(spans)} runs, more than {MAX_ARRIVAL_SPAN_MS:.0f} ms ({MAX_ARRIVAL_SPAN_MS * BMV2_RATE_PPS / 1000:.0f} "
                f"departures): the machine is too loaded for a burst to congest the queue ({work})")


def marker_route() -> Entry:
    return Entry("DlcpIngress.ipv4_lpm", (MARKER_NET,), "DlcpIngress.set_nhop",
                 (MARKER_PORT, mac_int(port_mac(MARKER_PORT)), mac_int(peer_mac(MARKER_PORT))))


def with_markers(scenario: Scenario) -> tuple[list[bytes], Scenario]:
    """The frames BMv2 is fed and the scenario with the markers' route: in a congested
    scenario a timing marker before every ``MARKER_EVERY``-th packet (module doc), else the
    packets alone."""
    if not scenario.rate_ports:
        return [p.frame for p in scenario.packets], scenario
    frames: list[bytes] = []
    for p in scenario.packets:
        if p.index % MARKER_EVERY == 0:
            frames.append(udp_frame(sport=7000, dport=7000, dst=MARKER_DST, ident=MARKER_ID | p.index, tos=ECT0))
        frames.append(p.frame)
    return frames, Scenario(scenario.name, scenario.packets, scenario.entries + (marker_route(),),
                            scenario.rate_ports)


def arrivals(marker_out: dict[int, float], packets: int) -> list[float | None]:
    """Each packet's arrival: the output time of its marker, or of the closest earlier one
    that left (an earlier arrival, so the delay is not understated); None before any."""
    result: list[float | None] = []
    last: float | None = None
    for i in range(packets):
        last = marker_out.get(i, last)
        result.append(last)
    return result


def _run_bmv2_once(scenario: Scenario, json_path: Path, work: Path, wait_s: int) -> BurstResult:
    from gradfabric.p4ref import require_tool

    work.mkdir(parents=True, exist_ok=True)
    frames, fed = with_markers(scenario)
    ports = sorted({IN_PORT, OUT_PORT, *MEMBERS} | ({MARKER_PORT} if fed is not scenario else set()))
    wrpcap(str(work / f"p{IN_PORT}_in.pcap"), [Ether(f) for f in frames])
    for port in ports:
        if port != IN_PORT:
            wrpcap(str(work / f"p{port}_in.pcap"), [])
    thrift = free_port()
    args = [str(require_tool("simple_switch")), "--use-files", str(wait_s), "--thrift-port", str(thrift),
            "--device-id", "1", "--notifications-addr", f"ipc://{work}/n.ipc"]
    for port in ports:
        args += ["-i", f"{port}@{work / f'p{port}'}"]
    args += [str(json_path), "--", "--priority-queues", "8"]
    log = (work / "switch.log").open("w")
    switch = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=work)
    try:
        started = time.monotonic()
        _cli(thrift, cli_commands(fed, len(frames)), work, deadline=started + wait_s)
        drain_s = len(scenario.packets) / BMV2_RATE_PPS if scenario.rate_ports else 0.0
        expected_s = wait_s + drain_s + 0.5
        _wait_quiet(work, ports, started + expected_s)
        counters = _read_counters(thrift, work)
    finally:
        switch.terminate()
        try:
            switch.wait(timeout=5)
        except subprocess.TimeoutExpired:
            switch.kill()
            switch.wait()
        log.close()
    delivered: dict[int, Delivered] = {}
    outputs = [(port, pkt) for port in ports if port != IN_PORT for pkt in _read_pcap(work / f"p{port}_out.pcap")]
    marker_out = {pkt[IP].id & ~MARKER_ID: when for port, (when, pkt) in outputs if port == MARKER_PORT}
    outputs = [(port, out) for port, out in outputs if port != MARKER_PORT]
    first = min((when for _, (when, _) in outputs), default=0.0)
    arrived = arrivals(marker_out, len(scenario.packets)) if fed is not scenario else []
    for port, (when, pkt) in outputs:
        i = pkt[IP].id
        t = (when - first) * 1e6
        since = arrived[i] if arrived else None
        delivered[i] = Delivered(i, port, t, t if since is None else (when - since) * 1e6, pkt[IP].tos & 3)
    span = (max(marker_out.values()) - min(marker_out.values())) * 1e3 if marker_out else 0.0
    return BurstResult(scenario, "bmv2", delivered, lambda name, index: counters.get((name, index), 0),
                       arrival_span_ms=span)


def _read_pcap(path: Path) -> list[tuple[float, Ether]]:
    """(time, frame) of each packet of an output pcap (none when BMv2 never wrote to it). BMv2
    writes its output files with link type 0, so the frames are decoded as Ethernet here."""
    if not path.exists() or path.stat().st_size <= 24:   # 24 bytes: the pcap file header alone
        return []
    with RawPcapReader(str(path)) as reader:
        return [(meta.sec + meta.usec / 1e6, Ether(data)) for data, meta in reader]


def _cli(thrift: int, commands: list[str], work: Path, deadline: float | None = None) -> str:
    from gradfabric.p4ref import require_tool

    cli = str(require_tool("simple_switch_CLI"))
    for _ in range(50):   # the Thrift server needs a moment after start
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", thrift)) == 0:
                break
        time.sleep(0.05)
    proc = subprocess.run([cli, "--thrift-port", str(thrift)], input="\n".join(commands) + "\n",
                          capture_output=True, text=True, timeout=60, cwd=work)
    if proc.returncode != 0 or "Error" in proc.stdout or "Invalid" in proc.stdout:
        tail = (proc.stdout + proc.stderr)[-1500:]
        raise Bmv2RunError(f"simple_switch_CLI refused a command (logs in {work}):\n{tail}")
    if deadline is not None and time.monotonic() > deadline:
        raise _CliTooSlow(f"simple_switch_CLI took longer than the file reader's wait ({work})")
    return proc.stdout


def _wait_quiet(work: Path, ports: list[int], not_before: float) -> None:
    """Until the output pcaps stop growing (and at least until ``not_before``)."""
    sizes: list[int] = []
    while True:
        time.sleep(0.2)
        now = [(work / f"p{p}_out.pcap").stat().st_size if (work / f"p{p}_out.pcap").exists() else 0
               for p in ports]
        if now == sizes and time.monotonic() >= not_before:
            return
        sizes = now


COUNTERS = (("DlcpIngress.ingress_drops", (EARLY, RED)), ("DlcpIngress.early_drops", (JOB,)),
            ("DlcpEgress.ecn_marks", (JOB,)), ("DlcpIngress.job_rx", (JOB,)),
            ("DlcpIngress.queue_red_drops", (OUT_PORT * 8,)), ("DlcpEgress.queue_ecn_marks", (OUT_PORT * 8,)),
            ("DlcpEgress.port_tx", tuple(p * 8 + q for p in MEMBERS for q in (0, 1, 7))))
_COUNTER_LINE = re.compile(r"(\S+)\[(\d+)\]\s*=\s*\(?\s*(\d+)\s*bytes,\s*(\d+)\s*packets")
_COUNTER_LINE2 = re.compile(r"(\S+)\[(\d+)\]=\s*BmCounterValue\(packets=(\d+),\s*bytes=(\d+)\)")


def _read_counters(thrift: int, work: Path) -> dict[tuple[str, int], int]:
    commands = [f"counter_read {name} {i}" for name, cells in COUNTERS for i in cells]
    out = _cli(thrift, commands, work)
    result: dict[tuple[str, int], int] = {}
    for m in _COUNTER_LINE2.finditer(out):
        result[(m.group(1), int(m.group(2)))] = int(m.group(3))
    for m in _COUNTER_LINE.finditer(out):
        result[(m.group(1), int(m.group(2)))] = int(m.group(4))
    if len(result) != len(commands):
        raise Bmv2RunError(f"could not read {len(commands) - len(result)} counter(s) from:\n{out[-800:]}")
    return result
