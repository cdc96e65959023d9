"""The CPU a rank's transport spends on its host, for the packet simulation.

ns-3's links and queues cost the hosts nothing; the fabric's ranks move every packet through
their own process. Each host gets one sending and one receiving server
(``native/gradfabric_host.h``): each data packet the rank's transport sends or takes in
(a 1,448-byte segment for kernel TCP) waits, in order, for the server's earlier work, then
costs it ``*_packet_s / availability`` of wall time; probes and answers keep their place
in the order at no cost. Per message the same with ``*_message_s``. Two sources of the
CPU per packet, neither fitted to iteration times:

* ``bench``, the transport's benchmarks (``hosts/README.md``): the DLCP transport's C data
  path through one switch, profiled with perf on 2026-11-26 ("Where the CPU goes per
  packet"): sender 2,400 ns, receiver 2,530 ns per packet; kernel TCP on loopback
  (``make bench``, "Results"): sender 159.4 ns, receiver 475.7 ns per 1,444 bytes. No
  per-message figure was measured apart: 0.
* ``run``, the fabric sweep's own record (``runs/*.json``): a rank's CPU seconds (its
  ``cpu_share``, user + system time of its process over its wall time, times that wall
  time, the last iteration's ``ended_s``) over the data packets it sent and received
  (DLCP: ``packets + retransmitted + received_packets``; kernel TCP: twice its ``bytes``
  in 1,448-byte segments, a ring rank receives what it sends), split evenly between sender
  and receiver (the benchmark's two sides through a switch are within 6% of each other);
  the median over the configuration's ranks and runs. The trace worker sleeps through its
  compute, so this is the rank's communication, its per-message, per-answer and wake-up
  work folded into the packets (the runs count no messages): per message 0.

``availability``, both sources: of the time the rank's threads could run, the share they
ran, ``cpu_share / (cpu_share + cpu_wait_share)`` (the longest-waiting thread's wait over
wall time, recorded by trace runs since commit c828d8c); the configuration's median. Runs
without ``cpu_wait_share`` (the earlier sweeps) take it from another sweep's runs of the
same configuration (``availability_from``).
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simulator.packet.runtime import PacketSimulationError

SOURCES = ("none", "bench", "run")
#: The kernel's scheduling slice on this 2-core machine (EEVDF, Linux 6.6+:
#: ``sysctl_sched_base_slice`` = 0.75 ms x (1 + log2(CPUs)), CPUs capped at 8): how long a
#: runnable switch waits while another process holds its core.
SWITCH_OFF_S = 0.75e-3 * 2
#: p4switch/README.md, native datapath: the DLCP program forwarded 308,332 gradient packets/s
#: (bound by the bridge it was compared with, so at most this per packet).
SWITCH_FORWARD_S = 1 / 308_332
#: A switch that used less of a core than this carried no traffic of the job (its figures are noise).
SWITCH_IDLE_SHARE = 0.02
SEGMENT_BYTES = 1448
#: hosts/README.md, "Where the CPU goes per packet", through one switch (UDP GSO).
BENCH_DLCP_TX_S = 2_400e-9
BENCH_DLCP_RX_S = 2_530e-9
#: hosts/README.md, "Results": TCP sender / receiver CPU per 1,444 bytes on loopback.
BENCH_TCP_TX_S = 159.4e-9
BENCH_TCP_RX_S = 475.7e-9


@dataclass(frozen=True)
class HostCpu:
    """CPU seconds per data packet and per message at a rank's sender and receiver, and the
    share of its runnable time the rank ran (module doc)."""

    tx_packet_s: float = 0.0
    rx_packet_s: float = 0.0
    tx_message_s: float = 0.0
    rx_message_s: float = 0.0
    availability: float = 1.0
    source: str = "none"

    def __post_init__(self) -> None:
        costs = (self.tx_packet_s, self.rx_packet_s, self.tx_message_s, self.rx_message_s)
        if min(costs) < 0 or not 0 < self.availability <= 1:
            raise PacketSimulationError(f"host CPU costs must be non-negative and availability in (0, 1]: {self}")

    @property
    def active(self) -> bool:
        return max(self.tx_packet_s, self.rx_packet_s, self.tx_message_s, self.rx_message_s) > 0

    def wall_costs(self) -> tuple[float, float, float, float]:
        """(tx packet, rx packet, tx message, rx message) in seconds of wall time."""
        a = self.availability
        return self.tx_packet_s / a, self.rx_packet_s / a, self.tx_message_s / a, self.rx_message_s / a


@dataclass(frozen=True)
class RankCpu:
    """A configuration's ranks as a sweep recorded them (medians over ranks and runs)."""

    packet_s: float  # CPU seconds per data packet sent or received
    availability: float | None  # None: the runs lack cpu_wait_share
    ranks: int


def _records(folder: Path) -> list[dict[str, Any]]:
    paths = sorted(folder.glob("runs/*.json"))
    if not paths:
        raise PacketSimulationError(f"{folder}: no runs/*.json to read the ranks' CPU from")
    out = []
    for path in paths:
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise PacketSimulationError(f"{path}: not a run record: {exc}") from None
        if record.get("status") == "ok":
            out.append(record)
    return out


def rank_cpu(folder: Path) -> dict[str, RankCpu]:
    """Per configuration of a fabric sweep: its ranks' CPU per packet and availability (module doc)."""
    per_packet: dict[str, list[float]] = {}
    available: dict[str, list[float]] = {}
    for record in _records(folder):
        config = str(record.get("config"))
        for job in (record.get("jobs") or {}).values():
            for rank in (job.get("ranks") or {}).values():
                share, records, totals = rank.get("cpu_share"), rank.get("records") or [], rank.get("totals") or {}
                if share is None or not records or rank.get("role", "worker") != "worker":
                    continue
                if "received_packets" in totals:
                    packets = int(totals.get("packets", 0)) + int(totals.get("retransmitted", 0)) + int(
                        totals["received_packets"])
                else:
                    packets = 2 * int(totals.get("bytes", 0)) // SEGMENT_BYTES
                if packets <= 0:
                    continue
                per_packet.setdefault(config, []).append(float(share) * float(records[-1]["ended_s"]) / packets)
                wait = rank.get("cpu_wait_share")
                if wait is not None and share > 0:
                    available.setdefault(config, []).append(float(share) / (float(share) + float(wait)))
    return {c: RankCpu(statistics.median(v), statistics.median(available[c]) if available.get(c) else None, len(v))
            for c, v in per_packet.items()}


def server_cpu(folder: Path, config: str) -> HostCpu | None:
    """A parameter server's CPU per packet (configuration ``config`` of ``folder``'s runs, None
    where no run has a ``server`` rank): its CPU seconds over every packet it takes in and sends
    back (the workers' data packets, counted as :func:`rank_cpu` counts them, is what it
    handles), and its own availability; medians over runs."""
    per_packet: list[float] = []
    available: list[float] = []
    for record in _records(folder):
        if str(record.get("config")) != config:
            continue
        for job in (record.get("jobs") or {}).values():
            ranks = list((job.get("ranks") or {}).values())
            servers = [r for r in ranks if r.get("role") == "server" and r.get("cpu_share") is not None]
            workers = [r for r in ranks if r.get("role", "worker") == "worker" and r.get("records")]
            if len(servers) != 1 or not workers:
                continue
            packets = 0
            for w in workers:
                totals = w.get("totals") or {}
                if "received_packets" in totals:
                    packets += int(totals.get("packets", 0)) + int(totals.get("retransmitted", 0)) + int(
                        totals["received_packets"])
                else:
                    packets += 2 * int(totals.get("bytes", 0)) // SEGMENT_BYTES
            wall = max(float(w["records"][-1]["ended_s"]) for w in workers)
            share, wait = float(servers[0]["cpu_share"]), servers[0].get("cpu_wait_share")
            if packets > 0:
                per_packet.append(share * wall / packets)
            if wait is not None and share > 0:
                available.append(share / (share + float(wait)))
    if not per_packet or not available:
        return None
    return HostCpu(statistics.median(per_packet), statistics.median(per_packet),
                   availability=statistics.median(available), source=f"run: {folder.name}, its server")


def host_cpu(source: str, config: str, comm: str, cpu_from: Path | None,
             availability_from: Path | None = None) -> HostCpu:
    """The host CPU of configuration ``config`` (transport ``comm``: tcp or dlcp) from
    ``source`` (module doc); ``cpu_from`` is the fabric sweep whose runs give the figures,
    ``availability_from`` one whose runs record ``cpu_wait_share`` when ``cpu_from``'s do not."""
    if source not in SOURCES:
        raise PacketSimulationError(f"host CPU source {source!r} is not one of {', '.join(SOURCES)}")
    if source == "none":
        return HostCpu()
    if cpu_from is None:
        raise PacketSimulationError("host CPU from the runs needs the fabric sweep to read (cpu_from)")
    found = rank_cpu(cpu_from)
    if config not in found:
        raise PacketSimulationError(f"{cpu_from}: no run of configuration {config!r} records its ranks' CPU "
                                    f"(has {', '.join(sorted(found)) or 'none'})")
    availability = found[config].availability
    if availability is None and availability_from is not None:
        other = rank_cpu(availability_from).get(config)
        availability = other.availability if other is not None else None
    if availability is None:
        raise PacketSimulationError(f"{cpu_from}: configuration {config!r}'s runs record no cpu_wait_share; "
                                    f"give a sweep whose runs do (availability_from, now {availability_from})")
    if source == "bench":
        tx, rx = (BENCH_TCP_TX_S, BENCH_TCP_RX_S) if comm in ("tcp", "gloo") else (BENCH_DLCP_TX_S, BENCH_DLCP_RX_S)
    else:
        tx = rx = found[config].packet_s
    return HostCpu(tx, rx, availability=availability, source=f"{source}: {cpu_from.name}" + (
        f", availability from {availability_from.name}" if found[config].availability is None else ""))


def switch_availability(folder: Path) -> dict[str, float]:
    """Per configuration of a fabric sweep: the share of their runnable time its software switches
    ran, ``switch_cpu / (switch_cpu + switch_cpu_wait)`` (the run's ``switch`` record), median
    over the switches that carried traffic (at least :data:`SWITCH_IDLE_SHARE` of a core) and runs."""
    found: dict[str, list[float]] = {}
    for record in _records(folder):
        switch = record.get("switch") or {}
        cpu, wait = switch.get("switch_cpu") or {}, switch.get("switch_cpu_wait") or {}
        for name, share in cpu.items():
            if share is not None and wait.get(name) is not None and float(share) >= SWITCH_IDLE_SHARE:
                found.setdefault(str(record.get("config")), []).append(float(share) / (float(share) + float(wait[name])))
    return {c: statistics.median(v) for c, v in found.items()}


def switch_schedule(config: str, folder: Path, off_s: float = SWITCH_OFF_S,
                    availability_from: Path | None = None) -> tuple[float, float, float]:
    """(on, off, availability) of configuration ``config``'s switches from ``folder``'s runs (or,
    where they record no CPU wait, ``availability_from``'s): off for ``off_s`` (a slice of another
    process), on for ``off_s x a / (1 - a)``, so that they run the share ``a`` of their runnable
    time the runs recorded."""
    found = switch_availability(folder)
    if config not in found and availability_from is not None:
        found = switch_availability(availability_from)
    if config not in found:
        raise PacketSimulationError(f"{folder}: no run of configuration {config!r} records its switches' CPU and "
                                    f"CPU wait (switch.switch_cpu, switch.switch_cpu_wait; availability_from "
                                    f"{availability_from})")
    a = min(found[config], 0.99)
    return off_s * a / (1 - a), off_s, found[config]


def switch_run_schedules(config: str, folder: Path, repetition: int, switches: list[str],
                         off_s: float = SWITCH_OFF_S, recorded_off: bool = False, scenario: str | None = None,
                         wall: bool = False) -> dict[str, tuple[float, float, float]]:
    """Each of ``switches`` (the topology's names) with its own (on, off, availability), as
    :func:`switch_schedule` makes them, from one fabric run of configuration ``config``: the
    run of repetition ``repetition`` (modulo the runs there are), so repetitions draw from the
    recorded spread over runs and switches rather than one median. A fabric switch is matched
    by the name it ends with (``gtl1`` is ``l1``); one that carried no traffic (below
    :data:`SWITCH_IDLE_SHARE` of a core) or is not recorded is always on (off 0). Its off time
    is the mean wait per timeslice of its busiest thread where the run records one above 0
    (``switch_wait_per_slice_ns``, experiments/trace_sweep.py) and ``recorded_off`` is set,
    else ``off_s``. With ``scenario``, only that scenario's runs count (a sweep may hold several).
    With ``wall``, a switch is off the share of the wall time its busiest thread waited
    (availability 1 - wait) rather than of its runnable time (CPU / (CPU + wait)): a switch that
    sleeps part of the run is not kept off while it sleeps."""
    runs = sorted((r for r in _records(folder) if str(r.get("config")) == config
                   and (scenario is None or str(r.get("scenario")) == scenario)),
                  key=lambda r: (int(r.get("repetition", 0)), str(r.get("run_id", ""))))
    runs = [r for r in runs if (r.get("switch") or {}).get("switch_cpu_wait")]
    if not runs:
        raise PacketSimulationError(f"{folder}: no run of configuration {config!r}"
                                    + (f" in scenario {scenario!r}" if scenario is not None else "")
                                    + " records its switches' CPU and CPU wait (switch.switch_cpu, switch.switch_cpu_wait)")
    record = runs[repetition % len(runs)]["switch"]
    cpu, wait = record.get("switch_cpu") or {}, record.get("switch_cpu_wait") or {}
    per_slice = (record.get("switch_wait_per_slice_ns") or {}) if recorded_off else {}
    out: dict[str, tuple[float, float, float]] = {}
    for name in switches:
        matched = [f for f in cpu if f.endswith(name)]
        if len(matched) > 1:
            raise PacketSimulationError(f"{folder}: switch {name!r} matches {', '.join(sorted(matched))} of the runs")
        share = float(cpu[matched[0]]) if matched and cpu[matched[0]] is not None else 0.0
        waited = wait.get(matched[0]) if matched else None
        if share < SWITCH_IDLE_SHARE or waited is None:
            out[name] = (0.0, 0.0, 1.0)
            continue
        a = max(1.0 - float(waited), 0.01) if wall else share / (share + float(waited))
        capped = min(a, 0.99)
        slice_ns = per_slice.get(matched[0])
        off = float(slice_ns) * 1e-9 if slice_ns is not None and float(slice_ns) > 0 else off_s
        out[name] = (off * capped / (1 - capped), off, a)
    return out


def linux_tcp_buffers(root: Path = Path("/proc/sys/net/ipv4")) -> tuple[int, int]:
    """(send, receive): the largest TCP buffers Linux autotunes to here, ``tcp_wmem`` and
    ``tcp_rmem``'s maximum (the fabric's hosts are network namespaces of this kernel: a new
    namespace reads the same, 16 MiB each on 2026-11-26)."""
    out = []
    for name in ("tcp_wmem", "tcp_rmem"):
        try:
            out.append(int((root / name).read_text().split()[2]))
        except (OSError, ValueError, IndexError) as exc:
            raise PacketSimulationError(f"{root / name}: cannot read the TCP buffer maximum: {exc}") from None
    return out[0], out[1]
