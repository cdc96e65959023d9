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
import socket
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from scapy.layers.inet import IP, TCP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

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
        from tests.dlcp_burst_bmv2 import compile_bmv2, run_bmv2

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


if __name__ == "__main__":  # through the package's module, so the BMv2 runner shares its types
    from tests.dlcp_burst import main as package_main

    raise SystemExit(package_main())
