"""Burst scenarios for the DLCP mechanisms, run the same way on the embedded target and on BMv2.

A scenario is a list of frames arriving back to back on port 1 and the table entries and
queue settings that turn mechanisms on. Congestion is made the way BMv2 can have it: BMv2
paces each priority queue separately (``set_queue_rate R PORT`` gives *each* queue of the
port R packets/s), so every scenario congests one priority queue: the dropping and ECN
bursts stay inside one priority class (priority off: everything in queue 0), and the
priority burst rate-limits each queue, so a front-layer packet waits only behind its own
queue. A scenario where priority classes fight over one shared port rate cannot exist on
BMv2; the embedded target's port rate (``set_port_rate``) shows it in tests/test_dlcp_e2e.py.

- embedded: the p4switch pipeline and traffic manager on a virtual clock, packets
  ``ARRIVAL_GAP_US`` apart; each delivered packet's ``deq_timedelta`` is its delay and the
  depth of its queue when it arrived is recorded;
- BMv2: ``simple_switch --use-files`` (no interfaces, so no namespace lock), which injects
  the whole input pcap as fast as it can; entries and queue settings go through
  ``simple_switch_CLI`` before the injection starts. In a congested scenario every fourth
  packet is preceded by a *timing marker*, an ECN-capable UDP packet (never a queue step's
  drop) routed to port ``MARKER_PORT`` (no rate, so it leaves as soon as it is through the
  pipeline); a packet's delay is its output
  time minus the output time of the last marker before it, i.e. from when it reached the
  switch (overstated by at most three packets' ingress), not from when the burst began (on a
  loaded machine BMv2 injected the 30-packet priority burst over 50 ms, five departures'
  worth, and the front layers' late arrival counted as delay then). A run whose burst arrived
  over more than ``MAX_ARRIVAL_SPAN_MS`` (it could not congest the queue) is repeated, and
  BMv2's congested queues drain at ``BMV2_RATE_PPS`` (half the embedded rate: at 100 packets/s
  a priority burst that arrived over 86 ms had drained its back layers as they came, and they
  waited no longer than the front layers). BMv2's debug
  log would give arrival times too, but logging slows its ingress so much that the queue
  drains while the burst arrives.

``python -m tests.dlcp_burst [--target embedded|bmv2|both]`` prints the figures table of
p4src/README.md.
"""

from __future__ import annotations

import argparse
import math
import re
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from scapy.layers.inet import IP, TCP
from scapy.layers.l2 import Ether
from scapy.packet import Raw
from scapy.utils import RawPcapReader, wrpcap

from mininet_topos.launcher import free_port
from gradfabric.paths import P4SRC
from tests.test_dlcp_pipeline import (
    DST_IP,
    GW_MAC,
    HOST_MAC,
    SRC_IP,
    dlcp_frame,
    mac_int,
    peer_mac,
    port_mac,
    udp_frame,
)

IN_PORT, OUT_PORT = 1, 2
MEMBERS = (2, 3, 4, 5)
RATE_PPS = 100                 # per priority queue of a congested port
BMV2_RATE_PPS = 50             # BMv2's: a burst its loaded ingress spreads over 100 ms is five departures
DEPTH = 32                     # packets per priority queue
ARRIVAL_GAP_US = 20            # embedded: the burst arrives 500 times faster than it drains
JOB = 1
FRONT_TENSOR, BACK_TENSOR = 1, 40
SMALL_MAG, LARGE_MAG = 100, 140
SMALL_CLASS = (0, 119)         # the drop-eligible magnitude classes
DROP_THRESHOLD = 4             # early drop once the queue holds this many packets
ECN_THRESHOLD = 8
ECT0, CE = 2, 3
EARLY = 6                      # ingress_drops index of the early drop
RED = 7                        # ingress_drops index of a queue step's drop of a Not-ECT packet
COMMODITY_DSCP = 10            # the class DSCP hosts mark in the commodity scenario
MARKER_PORT = 9                # BMv2: timing markers leave here (an egress thread of no congested port)
MARKER_NET, MARKER_DST = "10.0.9.0/24", "10.0.9.9"
MARKER_ID = 0x8000             # a marker's IPv4 identification: this | the index of the packet it precedes
MARKER_EVERY = 4               # a marker before packets 0, 4, 8, ...: a quarter more ingress work, not double
MAX_ARRIVAL_SPAN_MS = 100.0    # BMv2: a burst must arrive within five departures of the congested queue
BURST_TRIES = 3                # runs of a scenario whose burst arrived slower than that, before an error
CLI_WAITS_S = (2, 5, 12, 30)   # the file reader's waits, each tried when the CLI was slower than the last


# -- scenario ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Packet:
    index: int                 # also its IPv4 identification, to find it on the way out
    kind: str                  # "important", "eligible", "front", "background", "tcp"
    frame: bytes


@dataclass(frozen=True)
class Tern:
    """A ternary match item."""

    value: int
    mask: int


@dataclass(frozen=True)
class Entry:
    """A table entry; match items are ints (exact), (lo, hi) (range), "a.b.c.d/len" (lpm),
    :class:`Tern` or None (a ternary wildcard). ``default``: the table's default action."""

    table: str
    match: tuple[int | tuple[int, int] | str | Tern | None, ...]
    action: str
    args: tuple[int, ...]
    priority: int = 0
    default: bool = False


@dataclass(frozen=True)
class Scenario:
    name: str
    packets: tuple[Packet, ...]
    entries: tuple[Entry, ...]
    rate_ports: tuple[int, ...] = (OUT_PORT,)


def route(port: int = OUT_PORT) -> Entry:
    return Entry("DlcpIngress.ipv4_lpm", ("10.0.2.0/24",), "DlcpIngress.set_nhop",
                 (port, mac_int(port_mac(port)), mac_int(peer_mac(port))))


def group(ports: tuple[int, ...], group_id: int = 7) -> list[Entry]:
    entries = [Entry("DlcpIngress.ipv4_lpm", ("10.0.2.0/24",), "DlcpIngress.set_ecmp_group",
                     (group_id, len(ports)))]
    for member, port in enumerate(ports):
        entries.append(Entry("DlcpIngress.ecmp_member", (group_id, member), "DlcpIngress.set_nhop",
                             (port, mac_int(port_mac(port)), mac_int(peer_mac(port)))))
    return entries


DROPPING = Entry("DlcpIngress.drop_class", (JOB, (0, 0xFFFF), SMALL_CLASS), "DlcpIngress.drop_above",
                 (DROP_THRESHOLD,), priority=10)
ECN = Entry("DlcpEgress.ecn_threshold", (JOB,), "DlcpEgress.mark_above", (ECN_THRESHOLD,))
PRIORITY = (
    Entry("DlcpIngress.layer_priority", (JOB, (0, 9), (0, 255)), "DlcpIngress.set_priority", (7, 46), 20),
    Entry("DlcpIngress.layer_priority", (JOB, (10, 0xFFFF), (0, 255)), "DlcpIngress.set_priority", (1, 10), 10),
)


def spraying(mode: str) -> Entry:
    return Entry("DlcpIngress.spray_mode", (JOB,), f"DlcpIngress.{mode}", ())


def mixed_burst(groups: int = 10) -> list[Packet]:
    """Per group: one background packet, one important gradient (large, not drop-eligible), three
    drop-eligible small gradients; all ECN-capable. 50 packets against a 32-packet queue."""
    packets: list[Packet] = []
    for _ in range(groups):
        i = len(packets)
        packets.append(Packet(i, "background", udp_frame(sport=5000, dport=6000, ident=i, tos=ECT0)))
        packets.append(Packet(i + 1, "important", dlcp_frame(tensor=BACK_TENSOR, mag=LARGE_MAG, ecn=ECT0, seq=i + 1)))
        for k in range(2, 5):
            packets.append(Packet(i + k, "eligible", dlcp_frame(tensor=BACK_TENSOR, mag=SMALL_MAG, eligible=True,
                                                                ecn=ECT0, seq=i + k)))
    return packets


def layered_burst(back: int = 20, front: int = 10) -> list[Packet]:
    """Back-layer gradients first, front-layer ones right after (backpropagation's order)."""
    packets = [Packet(i, "important", dlcp_frame(tensor=BACK_TENSOR, mag=LARGE_MAG, ecn=ECT0, seq=i))
               for i in range(back)]
    packets += [Packet(i, "front", dlcp_frame(tensor=FRONT_TENSOR, mag=LARGE_MAG, ecn=ECT0, seq=i))
                for i in range(back, back + front)]
    return packets


def sprayed_burst(dlcp: int = 800, tcp: int = 40) -> list[Packet]:
    """One DLCP message (one 5-tuple) interleaved with one TCP flow."""
    packets: list[Packet] = []
    every = (dlcp + tcp) // tcp
    for i in range(dlcp + tcp):
        if i % every == 0:
            frame = bytes(Ether(src=HOST_MAC, dst=GW_MAC) / IP(src=SRC_IP, dst=DST_IP, id=i)
                          / TCP(sport=43211, dport=5201, flags="A", seq=i) / Raw(b"x" * 32))
            packets.append(Packet(i, "tcp", frame))
        else:
            packets.append(Packet(i, "important", dlcp_frame(seq=i)))
    return packets


def dropping_scenario(on: bool) -> Scenario:
    return Scenario(f"dropping {'on' if on else 'off'}", tuple(mixed_burst()),
                    (route(),) + ((DROPPING,) if on else ()))


def ecn_scenario(on: bool) -> Scenario:
    return Scenario(f"ecn {'on' if on else 'off'}", tuple(mixed_burst(groups=6)),
                    (route(),) + ((ECN,) if on else ()))


def priority_scenario(on: bool) -> Scenario:
    return Scenario(f"priority {'on' if on else 'off'}", tuple(layered_burst()),
                    (route(),) + (PRIORITY if on else ()))


def spraying_scenario(mode: str | None) -> Scenario:
    entries = tuple(group(MEMBERS)) + ((spraying(mode),) if mode else ())
    return Scenario(f"spraying {mode or 'off'}", tuple(sprayed_burst()), entries, rate_ports=())


def commodity_burst(groups: int = 10) -> list[Packet]:
    """The mixed burst as hosts mark it for a commodity switch: one DSCP for the job, ECT(0) for
    packets that must not be dropped, Not-ECT for the drop-eligible ones."""
    packets: list[Packet] = []
    for _ in range(groups):
        i = len(packets)
        packets.append(Packet(i, "background", udp_frame(sport=5000, dport=6000, ident=i, tos=ECT0)))
        packets.append(Packet(i + 1, "important", dlcp_frame(tensor=BACK_TENSOR, mag=LARGE_MAG, ecn=ECT0,
                                                             dscp=COMMODITY_DSCP, seq=i + 1)))
        for k in range(2, 5):
            packets.append(Packet(i + k, "eligible", dlcp_frame(tensor=BACK_TENSOR, mag=SMALL_MAG, eligible=True,
                                                                ecn=0, dscp=COMMODITY_DSCP, seq=i + k)))
    return packets


def commodity_scenario() -> Scenario:
    """The commodity profile: the job's class from its DSCP (queue 0, one class as in the
    dropping burst), queue 0's step at DROP_THRESHOLD drops Not-ECT packets and marks ECT ones;
    the job's own drop class and ECN threshold are installed but unused."""
    entries = (
        route(),
        Entry("DlcpIngress.profile", (), "DlcpIngress.profile_commodity", (), default=True),
        Entry("DlcpIngress.traffic_class", (Tern(COMMODITY_DSCP, 0x3F), None, None, None, None, None),
              "DlcpIngress.set_traffic_class", (0,), priority=10),
        Entry("DlcpIngress.queue_red", (0,), "DlcpIngress.red_drop_above", (DROP_THRESHOLD,)),
        Entry("DlcpEgress.queue_ecn", (0,), "DlcpEgress.mark_above", (DROP_THRESHOLD,)),
        DROPPING, ECN,
    )
    return Scenario("commodity profile", tuple(commodity_burst()), entries)


def together_scenario() -> Scenario:
    """Priority, dropping, ECN and round-robin spraying over two rate-limited members at once."""
    packets = mixed_burst() + [Packet(50 + i, "front", dlcp_frame(tensor=FRONT_TENSOR, mag=LARGE_MAG, ecn=ECT0,
                                                                  seq=50 + i)) for i in range(8)]
    entries = (*group((2, 3)), spraying("spray_round_robin"), DROPPING, ECN, *PRIORITY)
    return Scenario("all together", tuple(packets), entries, rate_ports=(2, 3))


# -- results ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Delivered:
    index: int
    port: int
    time_us: float             # departure (embedded: virtual; BMv2: since the first output)
    delay_us: float            # queueing delay (BMv2: output time minus its timing marker's)
    ecn: int
    depth_at_arrival: int | None = None   # embedded only: its queue's real depth when it arrived


@dataclass
class BurstResult:
    scenario: Scenario
    target: str
    delivered: dict[int, Delivered]
    counters: Callable[[str, int], int]
    early_dropped: set[int] = field(default_factory=set)   # embedded: seen dropped in ingress
    #: embedded only: depth of queue (OUT_PORT, priority 0) when each packet arrived
    depth_q0: dict[int, int] = field(default_factory=dict)
    #: BMv2, congested scenarios: from the first timing marker's output to the last one's (ms)
    arrival_span_ms: float = 0.0

    def kind(self, index: int) -> str:
        return self.scenario.packets[index].kind

    def of(self, kind: str) -> list[Packet]:
        return [p for p in self.scenario.packets if p.kind == kind]

    def lost(self, kind: str) -> int:
        return sum(p.index not in self.delivered for p in self.of(kind))

    def delays_ms(self, kind: str) -> np.ndarray:
        return np.array([self.delivered[p.index].delay_us / 1000 for p in self.of(kind) if p.index in self.delivered])

    def departure_order(self) -> list[int]:
        return [d.index for d in sorted(self.delivered.values(), key=lambda d: (d.time_us, d.index))]


# -- embedded target --------------------------------------------------------------------------
def run_embedded(scenario: Scenario, seed: int = 1) -> BurstResult:
    """The burst through the embedded pipeline and traffic manager (BMv2's queue model)."""
    from p4switch.frontend import load_program
    from p4switch.pipeline import Pipeline, QueueMeta
    from p4switch.tables import Exact, Lpm, Range, TableEntry, Ternary
    from p4switch.traffic_manager import Rate, TrafficManager

    pipeline = Pipeline(_program(load_program), seed=seed)
    for e in scenario.entries:
        if e.default:
            pipeline.tables[e.table].set_default(e.action, e.args)
            continue
        match: list = []
        for m in e.match:
            if isinstance(m, str):
                net, length = m.split("/")
                match.append(Lpm(int.from_bytes(socket.inet_aton(net), "big"), int(length)))
            elif m is None or isinstance(m, Tern):
                match.append(None if m is None else Ternary(m.value, m.mask))
            else:
                match.append(Range(*m) if isinstance(m, tuple) else Exact(m))
        pipeline.tables[e.table].insert(TableEntry(match=tuple(match), priority=e.priority, action=e.action,
                                                   args=e.args))
    tm = TrafficManager(priority_queues=8, default_depth=DEPTH)
    for port in scenario.rate_ports:
        tm.set_queue_rate(port, Rate(RATE_PPS))
    index_of: dict[int, int] = {}
    arrival_depth: dict[int, int] = {}
    delivered: dict[int, Delivered] = {}
    early: set[int] = set()

    def drain(now_us: float) -> None:
        for dep in tm.dequeue(now_us):
            q = dep.queue
            meta = QueueMeta(enq_timestamp=q.enq_timestamp, enq_qdepth=q.enq_qdepth,
                             deq_timedelta=q.deq_timedelta, deq_qdepth=q.deq_qdepth, qid=q.qid)
            i = index_of[id(dep.item)]
            for port, frame in pipeline.egress(dep.item, meta):
                delivered[i] = Delivered(i, port, dep.time_us, q.deq_timedelta, Ether(frame)[IP].tos & 3,
                                         arrival_depth.get(i))

    depth_q0: dict[int, int] = {}
    for packet in scenario.packets:
        now = packet.index * ARRIVAL_GAP_US
        drain(now)
        depth_q0[packet.index] = tm.depth(OUT_PORT, 0)
        jobs = pipeline.ingress(packet.frame, IN_PORT, now)
        if not jobs:
            early.add(packet.index)
        for job in jobs:
            index_of[id(job)] = packet.index
            arrival_depth[packet.index] = tm.depth(job.egress_port, job.priority)
            tm.enqueue(job, job.egress_port, job.priority, len(packet.frame), now)
    while (due := tm.next_departure_us()) is not None:
        drain(math.ceil(due))

    def counter(name: str, index: int) -> int:
        return pipeline.counters[name].read(index)[0]

    return BurstResult(scenario, "embedded", delivered, counter, early, depth_q0)


_PROGRAM: list = []


def _program(load_program: Callable) -> object:
    if not _PROGRAM:
        _PROGRAM.append(load_program(P4SRC / "dlcp.p4"))
    return _PROGRAM[0]


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
            "--device-id", "1"]
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


# -- the figures table ------------------------------------------------------------------------
def table_rows(results: list[BurstResult]) -> list[str]:
    rows = ["| target | scenario | important delay p50 / p99 (ms) | front-layer delay p50 / p99 (ms) "
            "| lost: important / eligible / background | early drops (counter) | CE marks (counter) |",
            "|---|---|---|---|---|---|---|"]
    for r in results:
        def pct(kind: str) -> str:
            d = r.delays_ms(kind)
            return f"{np.percentile(d, 50):.1f} / {np.percentile(d, 99):.1f}" if d.size else "-"
        rows.append(
            f"| {r.target} | {r.scenario.name} | {pct('important')} | {pct('front')} "
            f"| {r.lost('important')} / {r.lost('eligible')} / {r.lost('background')} "
            f"| {early_drops(r)} | {ce_marks(r)} |")
    return rows


def early_drops(r: BurstResult) -> int:
    """Drops before the queue: a DLCP drop class's (ingress_drops[6]) and a queue step's ([7])."""
    return r.counters("DlcpIngress.ingress_drops", EARLY) + r.counters("DlcpIngress.ingress_drops", RED)


def ce_marks(r: BurstResult) -> int:
    """CE marks: the job's ECN threshold's and queue 0 of the congested port's step."""
    return r.counters("DlcpEgress.ecn_marks", JOB) + r.counters("DlcpEgress.queue_ecn_marks", OUT_PORT * 8)


def plot(results: list[BurstResult], path: Path) -> None:
    """Delay p50/p99 of the packets each mechanism protects, off against on, per target."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pairs = [("dropping", "important"), ("priority", "front")]
    targets = sorted({r.target for r in results}, key=lambda t: t != "embedded")
    fig, axes = plt.subplots(1, len(pairs), figsize=(9, 3.4))
    for ax, (mechanism, kind) in zip(axes, pairs):
        labels, p50, p99 = [], [], []
        for target in targets:
            for state in ("off", "on"):
                (r,) = [r for r in results if r.target == target and r.scenario.name == f"{mechanism} {state}"]
                d = r.delays_ms(kind)
                labels.append(f"{target}\n{state}")
                p50.append(float(np.percentile(d, 50)))
                p99.append(float(np.percentile(d, 99)))
        x = np.arange(len(labels))
        ax.bar(x - 0.2, p50, 0.4, label="p50")
        ax.bar(x + 0.2, p99, 0.4, label="p99")
        ax.set_xticks(x, labels)
        ax.set_title(f"{mechanism} off/on: {'important' if kind == 'important' else 'front-layer'} packets")
        ax.set_ylabel("queueing delay (ms)")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


SCENARIOS: tuple[Callable[[], Scenario], ...] = (
    lambda: dropping_scenario(False), lambda: dropping_scenario(True),
    lambda: ecn_scenario(False), lambda: ecn_scenario(True),
    lambda: priority_scenario(False), lambda: priority_scenario(True),
    together_scenario, commodity_scenario,
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="DLCP burst scenarios: the figures table of p4src/README.md")
    parser.add_argument("--target", choices=("embedded", "bmv2", "both"), default="both")
    parser.add_argument("--plot", type=Path, help="also write the delays as a PNG here")
    args = parser.parse_args(argv)
    results: list[BurstResult] = []
    if args.target in ("embedded", "both"):
        results += [run_embedded(make()) for make in SCENARIOS]
    if args.target in ("bmv2", "both"):
        with tempfile.TemporaryDirectory(prefix="dlcp-burst-") as tmp:
            json_path = compile_bmv2(Path(tmp) / "build")
            for n, make in enumerate(SCENARIOS):
                scenario = make()
                print(f"bmv2: {scenario.name} ...", flush=True)
                results.append(run_bmv2(scenario, json_path, Path(tmp) / f"run{n}"))
    print("\n".join(table_rows(results)))
    if args.plot:
        plot(results, args.plot)
        print(f"plot: {args.plot}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
