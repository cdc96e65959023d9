"""The training experiment's scenarios and configurations, as the packet simulation runs them.

The same table as ``experiments/scenarios.py`` and ``experiments/configs.py`` (the simulator
does not import ``experiments``; ``tests/test_sim_packet_jobs.py`` checks the two agree):
where the jobs run and what background runs beside them, and per configuration how the job
communicates (gloo's TCP or the DLCP transport), its switch queues, dropping, spraying, ECN.

At more hosts, :func:`tiled` repeats a scenario over consecutive groups of six hosts (the
experiment fabric's h1..h6), job ids 1, 2, ... per copy.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from simulator.packet.runtime import PacketSimulationError

#: The experiment fabric's port (full frames/s) and its request/response and UDP flows.
PORT_PPS = 20_000
UDP_DATAGRAM = 1200
UDP_MBPS = PORT_PPS * 0.5 * UDP_DATAGRAM * 8 / 1e6
RR_RESPONSE = 8000
RR_INTERVAL = 0.05
GRAD_BOUND = 0.10
QUEUE_THRESHOLD = 16


@dataclass(frozen=True)
class Flow:
    src: str
    dst: str
    kind: str  # "tcp" (long), "udp" (constant rate), "rr" (request/response)
    mbps: float = 0.0
    packet_bytes: int = 0
    interval_s: float = 0.0


@dataclass(frozen=True)
class Job:
    job_id: int
    hosts: tuple[str, ...]  # rank order
    collective: str = "ring"  # "ring" or "star" (parameter server on rank 0)


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    jobs: tuple[Job, ...]
    background: tuple[Flow, ...] = field(default_factory=tuple)

    @property
    def hosts(self) -> set[str]:
        return {h for j in self.jobs for h in j.hosts} | {h for f in self.background for h in (f.src, f.dst)}


def _rr(client: str, server: str) -> Flow:
    return Flow(client, server, "rr", packet_bytes=RR_RESPONSE, interval_s=RR_INTERVAL)


SCENARIOS: dict[str, Scenario] = {s.name: s for s in (
    Scenario("tcp", "2-rank ring h1-h4; long TCP h2->h4 and h5->h1; request/response h3 asks h6",
             (Job(1, ("h1", "h4")),), (Flow("h2", "h4", "tcp"), Flow("h5", "h1", "tcp"), _rr("h3", "h6"))),
    Scenario("udp", f"2-rank ring h1-h4; UDP {UDP_MBPS:g} Mbit/s h2->h4 and h5->h1; request/response h3 asks h6",
             (Job(1, ("h1", "h4")),),
             (Flow("h2", "h4", "udp", UDP_MBPS, UDP_DATAGRAM), Flow("h5", "h1", "udp", UDP_MBPS, UDP_DATAGRAM),
              _rr("h3", "h6"))),
    Scenario("multitenant", "two 2-rank rings, job 1 h1-h4 and job 2 h2-h5; request/response h3 asks h6",
             (Job(1, ("h1", "h4")), Job(2, ("h2", "h5"))), (_rr("h3", "h6"),)),
    Scenario("incast", "parameter server h1 (rank 0 of a star), workers h4, h5, h6; long TCP h2->h1; "
             "request/response h3 asks h1",
             (Job(1, ("h1", "h4", "h5", "h6"), collective="star"),), (Flow("h2", "h1", "tcp"), _rr("h3", "h1"))),
)}


@dataclass(frozen=True)
class Configuration:
    name: str
    comm: str  # "gloo" (TCP) or "dlcp"
    queues: str  # "fifo", "job" (one class, 5) or "layer" (7, 6, 5)
    dropping: bool = False
    spraying: bool = False
    ecn: bool = False

    @property
    def grad_bound(self) -> float:
        return GRAD_BOUND if self.dropping else 0.0


CONFIGURATIONS: dict[str, Configuration] = {c.name: c for c in (
    Configuration("gloo", "gloo", "fifo"),
    Configuration("reliable", "dlcp", "fifo"),
    Configuration("qos", "dlcp", "job"),
    Configuration("priority", "dlcp", "layer"),
    Configuration("dropping", "dlcp", "fifo", dropping=True),
    Configuration("spraying", "dlcp", "fifo", spraying=True),
    Configuration("dlcp", "dlcp", "layer", dropping=True, spraying=True, ecn=True),
)}


def scenario(name: str) -> Scenario:
    if name not in SCENARIOS:
        raise PacketSimulationError(f"unknown scenario {name!r}; choose from {', '.join(SCENARIOS)}")
    return SCENARIOS[name]


def configuration(name: str) -> Configuration:
    if name not in CONFIGURATIONS:
        raise PacketSimulationError(f"unknown configuration {name!r}; choose from {', '.join(CONFIGURATIONS)}")
    return CONFIGURATIONS[name]


def tiled(sc: Scenario, hosts: list[str], group: int = 6) -> Scenario:
    """``sc`` repeated over consecutive groups of ``group`` of ``hosts`` (module doc; the trace
    fabric's scenarios name eight hosts)."""
    copies = len(hosts) // group
    if copies < 1:
        raise PacketSimulationError(f"scenario {sc.name} needs {group} hosts, the topology has {len(hosts)}")
    jobs: list[Job] = []
    flows: list[Flow] = []
    for c in range(copies):
        name = {f"h{i + 1}": hosts[group * c + i] for i in range(group)}
        for job in sc.jobs:
            jobs.append(replace(job, job_id=len(jobs) + 1, hosts=tuple(name[h] for h in job.hosts)))
        flows.extend(replace(f, src=name[f.src], dst=name[f.dst]) for f in sc.background)
    return Scenario(sc.name if copies == 1 else f"{sc.name}x{copies}", sc.description, tuple(jobs), tuple(flows))
