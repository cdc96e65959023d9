"""One packet-level run: a scenario's jobs and background on a topology, in ns-3.

:func:`run` builds the topology (:mod:`simulator.packet.network`) with the configuration's
switch policy, starts the background at t = 0 and the jobs at ``job_start_s`` (the fabric's
runner waits 1 s for queues to fill and TCP flows to leave slow start), runs until every
job has done its iterations, and returns a record in the fabric's raw-run format
(``experiments/runner.py``: ``jobs -> ranks -> records/totals``, ``background``,
``switch``), plus a ``simulation`` entry (simulated and wall time, events, port counters).

Transports: DLCP jobs use one :class:`DlcpEndpoint` per host; gloo jobs one ns-3 TCP
connection per ordered pair of ranks that talk. Background TCP is ns-3's BulkSend; UDP its
OnOff at a constant rate; request/response flows gradfabric's ``RrFlow``. ns-3's TCP takes
``rto_min_s`` as its minimum RTO (``TcpSocketBase::MinRto``) and NewReno.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from simulator.packet.host_cpu import HostCpu
from simulator.packet.jobs import JobRun, JobSpec
from simulator.packet.network import HostCosts, Network, build
from simulator.packet.runtime import PacketSimulationError, load
from simulator.packet.scenarios import Configuration, Scenario
from simulator.packet.topology import Topology
from simulator.packet.workload import Workload

DLCP_PORT = 40000
VALUES_PER_PACKET = 360
BG_PORT = 5201
#: ns-3's TCP congestion controls a run may choose (RunSettings.tcp_variant).
TCP_VARIANTS = ("NewReno", "Cubic", "Bbr")
#: BulkSend's write size with buffers above it (its default 512 bytes slows a MiB buffer's run tenfold).
BULK_WRITE_BYTES = 65_536
#: The DLCP endpoints' counters summed into a run's record (DlcpStats, native/gradfabric_dlcp_wire.h).
DLCP_COUNTERS = ("packets", "retransmitted", "probes", "probeTimeouts", "ecnEchoes", "windowCuts", "cutsUndone",
                 "deferred", "confirms", "reordered")


@dataclass
class RunSettings:
    workload: Workload
    iterations: int = 60
    ordering: str = "wfbp"
    in_flight: int = 4
    job_start_s: float = 1.0
    rto_min_s: float = 0.2  # Linux's default, as the fabric's hosts run
    #: The hosts' probe timer (hosts/pacing.py's RttEstimator, hosts/endpoint.py): 10 ms floor and
    #: 200 ms before the first RTT sample, as the fabric's ranks run them (seconds of the fabric,
    #: which ns-3 simulates at its own port rates: not scaled by the trace job's k).
    dlcp_min_rto_s: float = 0.01
    dlcp_initial_rto_s: float = 0.2
    dlcp_initial_window: float = 10.0
    dlcp_max_window: float = 64.0
    dlcp_chunk: int = 16
    dlcp_reorder_grace_s: float = 0.0  # sprayed fabrics: the last probe waits max(this, SRTT)
    #: The hosts' reorder handling (hosts/endpoint.py's defaults): a packet shown missing is
    #: confirmed lost this long after, at most this many confirmations end a round, allowances
    #: are capped at the RTO's ceiling.
    dlcp_confirm_grace_s: float = 0.005
    dlcp_max_confirms: int = 20
    dlcp_max_rto_s: float = 2.0
    spraying: bool = False
    #: The hosts' pacer (DlcpEndpoint::SetPacing): burst interval (0: none), rate ceiling, and
    #: whether a chunk is charged a whole burst (the hosts' pacer until 2026-11-26).
    pacing_burst_s: float = 0.0
    pacing_max_pps: float = 1e6
    pacing_whole_burst: bool = False
    seed: int = 1
    costs: HostCosts = field(default_factory=HostCosts)  # the emulated fabric's software (none: a real one)
    host_cpu: HostCpu = field(default_factory=HostCpu)  # the ranks' transport CPU (none by default)
    host_cpu_of: dict[str, HostCpu] = field(default_factory=dict)  # hosts whose CPU differs (a server)
    #: Long TCP flows as fast as TCP goes (0, ns-3's BulkSend) or offered at this rate (OnOff over TCP).
    background_tcp_mbps: float = 0.0
    time_limit_s: float = 600.0  # simulated seconds before the run is declared stuck
    #: ns-3 TCP's send and receive buffers (ns-3's default 131,072; Linux autotunes up to MiBs:
    #: host_cpu.linux_tcp_buffers). None: the receive buffer as the send buffer.
    tcp_buffer_bytes: int = 131_072
    tcp_rcv_buffer_bytes: int | None = None
    #: Segments per delayed ACK (ns-3's default 2). With 2, ns-3 3.44's TCP stalls for good once
    #: both data and ACKs are lost (1% each way: a long transfer crawls at one segment per RTO
    #: after ~5 MB); with 1 it does not (scripts in simulator/packet/README.md).
    tcp_delack_count: int = 2
    #: ns-3's congestion control for every TCP socket (``ns3::Tcp<variant>``): NewReno by default;
    #: the fabric's hosts run this kernel's default, BBR (``net.ipv4.tcp_congestion_control``,
    #: inherited by each host's network namespace).
    tcp_variant: str = "NewReno"
    #: The switch class of the jobs' TCP (0: with the background; the trace sweeps' tcp-class: 5).
    tcp_priority: int = 0
    #: Switch-to-switch links that lose packets in both directions, and with which probability.
    lossy_links: tuple[tuple[str, str], ...] = ()
    link_loss: float = 0.0
    progress: Callable[[str], None] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class _Transport:
    """DLCP endpoints and TCP pipes over one network, routing deliveries back to jobs."""

    def __init__(self, net: Network, settings: RunSettings, gloo_hosts: set[str]) -> None:
        self.ns, self.gf = load()
        self.net = net
        self.settings = settings
        self.messages: dict[int, tuple[JobRun, int, int, int, int, int]] = {}
        self.sizes: dict[int, tuple[int, int]] = {}  # message id -> (values, packets)
        self.endpoints: dict[str, Any] = {}
        self.pipes: dict[tuple[str, str], Any] = {}
        self.gloo_hosts = gloo_hosts

        # One callable each for every endpoint and pipe: the bindings wrap a callable once.
        def dlcp_received(src: int, msg: int, values: int, lost: int) -> None:
            self._delivered(msg, lost)

        def tcp_received(msg: int) -> None:
            self._delivered(msg, 0)

        self.dlcp_received, self.tcp_received = dlcp_received, tcp_received

    def endpoint(self, host: str) -> Any:
        if host not in self.endpoints:
            s = self.settings
            ep = self.gf.DlcpEndpoint(self.net.nodes[host], DLCP_PORT, s.dlcp_chunk, s.dlcp_initial_window,
                                      s.dlcp_max_window, s.dlcp_min_rto_s, max(s.dlcp_min_rto_s, s.dlcp_initial_rto_s))
            ep.onReceived = self.dlcp_received
            ep.SetReorder(s.dlcp_confirm_grace_s, s.dlcp_max_confirms, s.dlcp_max_rto_s)
            if s.spraying:
                ep.SetLastGrace(s.dlcp_reorder_grace_s)
            if s.pacing_burst_s > 0:
                ep.SetPacing(s.pacing_burst_s, s.pacing_max_pps, s.pacing_whole_burst)
            self.endpoints[host] = ep
        return self.endpoints[host]

    def pipe(self, src: str, dst: str) -> Any:
        if (src, dst) not in self.pipes:
            port = 20000 + len(self.pipes)
            tos = (self.settings.tcp_priority & 7) << 5
            p = self.gf.TcpPipe(self.net.nodes[src], self.net.nodes[dst], self.net.address(dst), port, tos, 0.0)
            p.onReceived = self.tcp_received
            self.pipes[(src, dst)] = p
        return self.pipes[(src, dst)]

    def prepare(self, job: Any, gloo: bool) -> None:
        """Open what the job's collective uses before it starts (connections take round trips)."""
        n = len(job.hosts)
        pairs = [(job.hosts[r], job.hosts[(r + 1) % n]) for r in range(n)] if job.collective == "ring" else \
            [(h, job.hosts[0]) for h in job.hosts[1:]] + [(job.hosts[0], h) for h in job.hosts[1:]]
        for src, dst in pairs:
            if gloo:
                self.pipe(src, dst)
            else:
                self.endpoint(src)
                self.endpoint(dst)

    def send(self, src: str, dst: str, msg: int, values: int, priority: int, urgency: int, bound: float,
             eligible: float | None = None) -> None:
        """One message; ``eligible`` (default ``bound``) of its packets drop-eligible."""
        packets = -(-values // VALUES_PER_PACKET)
        self.sizes[msg] = (values, packets)
        if src in self.gloo_hosts:
            self.pipe(src, dst).Send(msg, values * 4)
        else:
            self.endpoint(src).Send(msg, self.net.address(dst), values, priority, urgency,
                                    bound if eligible is None else eligible, bound)

    def _delivered(self, msg: int, lost: int) -> None:
        entry = self.messages.pop(msg, None)
        if entry is None:
            return
        job, iteration, b, step, src, dst = entry
        values, packets = self.sizes.pop(msg)
        job.delivered(iteration, b, step, src, dst, values, lost, packets)


def _topology_for(topology: Topology, config: Any) -> Topology:
    """Dropping and ECN at half a queue, as the experiment's policies (the CNN fabric's 32: 16)."""
    port = topology.port
    threshold = max(1, port.queue_packets // 2)
    if config.dropping:
        port = replace(port, drop_threshold=threshold)
    if config.ecn:
        port = replace(port, ecn_threshold=threshold)
    return replace(topology, port=port)


#: Builds one scenario job's runner: (job, transport, schedule, now, messages) -> a JobRun-like object.
JobFactory = Callable[[Any, "_Transport", Callable[[float, Callable[[], None]], None], Callable[[], float],
                       dict[int, Any]], Any]


def _add_link_loss(ns: Any, net: Network, links: tuple[tuple[str, str], ...], probability: float) -> None:
    """Both ends of each named link drop received packets with ``probability`` (ns-3's RateErrorModel)."""
    for a, b in links:
        if (a, b) not in net.devices:
            raise PacketSimulationError(f"{net.topology.name} has no link {a}-{b} to make lossy")
        for me, other in ((a, b), (b, a)):
            model = ns.CreateObject[ns.RateErrorModel]()
            model.SetUnit(ns.RateErrorModel.ERROR_UNIT_PACKET)
            model.SetRate(probability)
            net.devices[(me, other)].SetAttribute("ReceiveErrorModel", ns.PointerValue(model))
            _KEEP.append(model)


def run(topology: Topology, scenario: Scenario, config: Configuration, settings: RunSettings,
        make_job: JobFactory | None = None) -> dict[str, Any]:
    """Simulate ``scenario`` under ``config`` on ``topology`` (module doc); returns the record.
    ``make_job`` builds each job's runner (default: :class:`JobRun` of ``settings.workload``)."""
    ns, gf = load()
    missing = sorted(scenario.hosts - set(topology.hosts))
    if missing:
        raise PacketSimulationError(f"scenario {scenario.name} names hosts {missing} that {topology.name} lacks")
    wall0 = time.monotonic()
    _KEEP.clear()  # the previous run's objects (its simulator is destroyed)
    say = settings.progress or (lambda _msg: None)
    ns.Config.SetDefault("ns3::TcpSocketBase::MinRto", ns.TimeValue(ns.Seconds(settings.rto_min_s)))
    if settings.tcp_variant not in TCP_VARIANTS:
        raise PacketSimulationError(f"TCP variant {settings.tcp_variant!r}: one of {', '.join(TCP_VARIANTS)}")
    variant = getattr(ns, f"Tcp{settings.tcp_variant}")
    ns.Config.SetDefault("ns3::TcpL4Protocol::SocketType", ns.TypeIdValue(variant.GetTypeId()))
    ns.Config.SetDefault("ns3::TcpSocket::SegmentSize", ns.UintegerValue(1448))
    ns.Config.SetDefault("ns3::TcpSocket::SndBufSize", ns.UintegerValue(settings.tcp_buffer_bytes))
    ns.Config.SetDefault("ns3::TcpSocket::RcvBufSize", ns.UintegerValue(settings.tcp_rcv_buffer_bytes or
                                                                        settings.tcp_buffer_bytes))
    ns.Config.SetDefault("ns3::TcpSocket::DelAckCount", ns.UintegerValue(settings.tcp_delack_count))
    ns.RngSeedManager.SetSeed(max(1, settings.seed))
    net = build(_topology_for(topology, config), seed=settings.seed, spray=config.spraying, spray_port=DLCP_PORT,
                costs=settings.costs, host_cpu=settings.host_cpu, host_cpu_of=settings.host_cpu_of)
    gloo = config.comm in ("gloo", "tcp")
    gloo_hosts = {h for j in scenario.jobs for h in j.hosts} if gloo else set()
    if settings.lossy_links and settings.link_loss > 0:
        _add_link_loss(ns, net, settings.lossy_links, settings.link_loss)
    transport = _Transport(net, replace(settings, spraying=config.spraying), gloo_hosts)
    pending: dict[int, Callable[[], None]] = {}
    tokens = itertools.count(1)

    def dispatch(token: int) -> None:
        pending.pop(token)()

    _KEEP.append(dispatch)
    gf.SetDispatcher(dispatch)

    def schedule(delay_s: float, fn: Callable[[], None]) -> None:
        token = next(tokens)
        pending[token] = fn
        gf.ScheduleToken(delay_s, token)

    jobs: list[JobRun] = []
    _KEEP.append(transport)
    for j in scenario.jobs:
        if make_job is not None:
            job = make_job(j, transport, schedule, gf.NowSeconds, transport.messages)
            transport.prepare(job.spec, gloo)
        else:
            spec = JobSpec(j.job_id, j.hosts, "ring" if gloo else j.collective, settings.workload,
                           settings.iterations, grad_bound=config.grad_bound, priorities=config.queues,
                           ordering=settings.ordering, in_flight=1 if gloo else settings.in_flight,
                           start_s=settings.job_start_s, seed=settings.seed)
            transport.prepare(spec, gloo)
            job = JobRun(spec, transport, schedule, gf.NowSeconds, transport.messages)
        job.start()
        jobs.append(job)
    background = _start_background(ns, gf, net, scenario, settings, schedule)

    # Run in slices, to tell progress and to stop once every job is done.
    sim_t, step = 0.0, 0.25
    while not all(j.done for j in jobs):
        if sim_t >= settings.time_limit_s:
            raise PacketSimulationError(f"{scenario.name}/{config.name}: jobs not done after {sim_t:g} simulated s")
        sim_t += step
        ns.Simulator.Stop(ns.Seconds(step))
        ns.Simulator.Run()
        measured = [j for j in jobs if not getattr(j.spec, "bulk", False)]
        done = sum(min(r.iteration, j.spec.iterations) for j in measured for r in j.ranks)
        total = sum(j.spec.iterations * j.n for j in measured)
        say(f"    t = {sim_t:.2f} s simulated, {time.monotonic() - wall0:.0f} s wall, {done}/{total} rank-iterations")
    end_s = gf.NowSeconds()
    seconds = end_s - settings.job_start_s
    record = {"jobs": {}, "background": [b(seconds) for b in background], "switch": {}, "seconds": round(seconds, 4)}
    for job in jobs:
        ranks = {}
        for r in job.ranks:
            ranks[str(r.index)] = {"records": r.records, "totals": {
                "packets": sum(x["packets"] for x in r.records), "lost": r.lost_values,
                "reduced": r.reduced_values, "retransmitted": 0}, "receive": {}}
        record["jobs"][str(job.spec.job_id)] = {"ranks": ranks}
    for host, ep in transport.endpoints.items():
        for job in jobs:
            if host in job.spec.hosts:
                totals = record["jobs"][str(job.spec.job_id)]["ranks"][str(job.spec.hosts.index(host))]["totals"]
                totals["retransmitted"] += int(ep.stats.retransmitted)
    ports = net.queue_totals()
    dlcp = {k: sum(int(getattr(ep.stats, k)) for ep in transport.endpoints.values()) for k in DLCP_COUNTERS}
    record["switch"] = {"magnitude_drops": ports["early_drops"], "ecn_marks": ports["ecn_marks"]}
    record["simulation"] = {"engine": "ns-3 3.44", "topology": topology.name, "hosts": len(topology.hosts),
                            "switches": len(topology.switches), "simulated_s": round(end_s, 4),
                            "wall_s": round(time.monotonic() - wall0, 2), "ports": ports, "dlcp": dlcp,
                            "workload": settings.workload.note, "ordering": settings.ordering,
                            "rto_min_s": settings.rto_min_s, "tcp_buffer_bytes": settings.tcp_buffer_bytes,
                            "tcp_rcv_buffer_bytes": settings.tcp_rcv_buffer_bytes or settings.tcp_buffer_bytes,
                            "tcp_delack_count": settings.tcp_delack_count, "tcp_variant": settings.tcp_variant, "background_tcp_mbps": settings.background_tcp_mbps, "host_costs": asdict(settings.costs),
                            "host_cpu": {**asdict(settings.host_cpu), **net.host_cpu_busy(sorted({h for j in jobs for h in j.spec.hosts})),
                                         **({"of": {h: asdict(c) for h, c in settings.host_cpu_of.items()}}
                                            if settings.host_cpu_of else {})},
                            "pacing": {"burst_s": settings.pacing_burst_s, "max_pps": settings.pacing_max_pps,
                                       "whole_burst": settings.pacing_whole_burst}, **settings.extra}
    ns.Simulator.Destroy()
    return record


def _start_background(ns: Any, gf: Any, net: Network, scenario: Scenario, settings: RunSettings,
                      schedule: Callable[[float, Callable[[], None]], None]) -> list[Callable[[float], dict[str, Any]]]:
    """Start every background flow at t = 0; returns a report maker per flow."""
    reports: list[Callable[[float], dict[str, Any]]] = []
    for i, flow in enumerate(scenario.background):
        port = BG_PORT + i
        src, dst = net.nodes[flow.src], net.nodes[flow.dst]
        name = f"{flow.kind.upper()} {flow.src}->{flow.dst}"
        if flow.kind in ("tcp", "udp"):
            factory = "ns3::TcpSocketFactory" if flow.kind == "tcp" else "ns3::UdpSocketFactory"
            remote = ns.InetSocketAddress(ns.Ipv4Address(net.address(flow.dst)), port).ConvertTo()
            sink_app = ns.PacketSinkHelper(factory, ns.InetSocketAddress(ns.Ipv4Address.GetAny(), port).ConvertTo())
            sinks = sink_app.Install(dst)
            if flow.kind == "tcp" and settings.background_tcp_mbps > 0:
                helper = ns.OnOffHelper(factory, remote)
                helper.SetConstantRate(ns.DataRate(int(settings.background_tcp_mbps * 1e6)), 1448)
            elif flow.kind == "tcp":
                helper = ns.BulkSendHelper(factory, remote)
                helper.SetAttribute("MaxBytes", ns.UintegerValue(0))
                if settings.tcp_buffer_bytes > BULK_WRITE_BYTES:  # 512-byte writes into MiBs crawl
                    helper.SetAttribute("SendSize", ns.UintegerValue(BULK_WRITE_BYTES))
            else:
                helper = ns.OnOffHelper(factory, remote)
                helper.SetConstantRate(ns.DataRate(int(flow.mbps * 1e6)), flow.packet_bytes)
            apps = helper.Install(src)
            apps.Start(ns.Seconds(0.0))
            sink = sinks.Get(0).GetObject[ns.PacketSink]()
            start_rx = {"bytes": 0}

            def mark(sink: Any = sink, start_rx: dict[str, int] = start_rx) -> None:
                start_rx["bytes"] = int(sink.GetTotalRx())

            schedule(settings.job_start_s, mark)

            def report(seconds: float, sink: Any = sink, start_rx: dict[str, int] = start_rx, name: str = name,
                       kind: str = flow.kind, mbps: float = flow.mbps) -> dict[str, Any]:
                rx = int(sink.GetTotalRx()) - start_rx["bytes"]
                goodput = rx * 8 / max(seconds, 1e-9) / 1e6
                loss = max(0.0, 1 - goodput / mbps) if kind == "udp" and mbps else None
                return {"flow": name, "protocol": kind, "seconds": round(seconds, 4), "goodput_mbps": goodput,
                        "loss": loss, "requests": None, "failed": None, "fct_s": [], "error": None}

            reports.append(report)
            _KEEP.append((sinks, apps))
        elif flow.kind == "rr":
            rr = gf.RrFlow(src, dst, net.address(flow.dst), port, 64, flow.packet_bytes, flow.interval_s,
                           settings.job_start_s, 1e9)
            _KEEP.append(rr)

            def report_rr(seconds: float, rr: Any = rr, name: str = name) -> dict[str, Any]:
                fct = [float(x) for x in rr.fct]
                return {"flow": name, "protocol": "rr", "seconds": round(seconds, 4),
                        "goodput_mbps": len(fct) * 8000 * 8 / max(seconds, 1e-9) / 1e6, "loss": None,
                        "requests": int(rr.started), "failed": int(rr.started) - len(fct), "fct_s": fct,
                        "error": None}

            reports.append(report_rr)
        else:
            raise PacketSimulationError(f"background flow kind {flow.kind!r} is not tcp, udp or rr")
    return reports


#: ns-3 objects and callables of the current run that C++ holds by pointer.
_KEEP: list[Any] = []
