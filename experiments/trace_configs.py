"""Scenarios and configurations of the trace-driven experiment (`gradfabric experiment trace`).

Fabric ``topologies/leafspine8_training.yaml``: leaves l1 (h1-h4) and l2 (h5-h8), spines s1
and s2, four host ports over two uplinks per leaf (2:1 oversubscribed); 20,000 packets/s
per port, 51-packet queues (a 1 MB buffer under the scaling rule, k = 8).

Scenarios (every job a ResNet-50 trace, :mod:`experiments.training.trace_worker`):

* ``tcp`` (control, where isolation should be enough): a ring h1-h5, long TCP h2->h5 and
  h6->h1 into both ranks' ports, request/response h3 asks h7;
* ``incast``: a parameter server on h1 and four workers h5-h8; long TCP h2->h1 into the
  server's port, request/response h3 asks h1;
* ``multitenant``: two rings of the same configuration crossing the spines, job 1 h1-h5,
  job 2 h2-h6, and request/response h3 asks h7 (ECMP collisions depend on the flows'
  hashes: TCP source ports differ per run; DLCP's fixed ports do not);
* ``hotspot``: the ring h1-h5 and a second DLCP job of the same class (bulk, a ring h2-h6
  that only sends) on the same leaves;
* ``lossy-0.1`` and ``lossy-1``: the ring h1-h5 and request/response h3 asks h7 (no
  congestion), the spine link s1-l2 losing 0.1% or 1% of the packets in each direction. This
  kernel has no netem, tc ``gact`` or iptables: the switches lose them (``link_loss`` in
  p4src/dlcp.p4, :mod:`experiments.trace_links`). Which of the job's flows cross s1 depends on
  the run's flow-hash seeds (TCP's ports, DLCP's per-packet spraying); the run records what
  the link lost.

Every run draws a flow-hash seed per switch (the same for the configurations of a pair), so
ECMP collisions of DLCP's fixed ports vary between rounds (``multitenant`` above all).

Configurations: ``comm`` (tcp or dlcp), ``scheduler`` (fusion = DDP buckets, p3, dlcp),
``overlap`` (ddp or layerwise), queues (fifo, tcp class by DSCP, job class, per layer),
and the switch mechanisms; ``ps`` scenarios use the same configuration through a
parameter server.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from experiments.background import Flow
from experiments.configs import MAG_THRESHOLD
from experiments.errors import ExperimentError
from experiments.scenarios import RR_INTERVAL, RR_RESPONSE, JobPlacement
from experiments.training.trace_job import COMMODITY_DSCP, MERGE_BYTES, TraceJob
from gradfabric.paths import ROOT

TOPOLOGY8 = ROOT / "experiments" / "topologies" / "leafspine8_training.yaml"
QUEUE_PACKETS = 51
THRESHOLD = QUEUE_PACKETS // 2  # dropping and ECN at half a queue, as in configs.py
JOB_DSCP = 18  # AF21: what the TCP job marks on its sockets in the "tcp class" configuration
GRAD_BOUND = 0.10
NUM_LAYERS = 54  # ResNet-50's layers (convolutions with their norms, and fc; rules split in thirds)


def _layer_rules(queues: str) -> list[dict[str, Any]]:
    third = NUM_LAYERS // 3
    if queues == "layer":
        return [{"tensors": f"0..{third - 1}", "priority": 7}, {"tensors": f"{third}..{2 * third - 1}", "priority": 6},
                {"tensors": f"{2 * third}..65535", "priority": 5}]
    if queues == "job":
        return [{"tensors": "0..65535", "priority": 5}]
    return [{"tensors": "0..65535", "priority": 0}]


@dataclass(frozen=True)
class TraceConfig:
    name: str
    description: str
    comm: str
    scheduler: str
    overlap: str
    queues: str = "fifo"  # fifo, tcp-class, job, layer
    dropping: bool = False
    spraying: bool = False
    ecn: bool = False
    rto_min_real_s: float | None = None  # TCP: rto_min of the job's routes (scaled by k); None: Linux default
    #: dlcp: the P4 mechanisms; commodity: the switches act as a DSCP/WRED-ECN switch (class from
    #: DSCP only, Not-ECT dropped and ECT marked above a queue's threshold, no magnitude classes,
    #: no spraying) and the hosts mark DSCP per class and Not-ECT on drop-eligible packets
    profile: str = "dlcp"
    merge: bool = False  # dlcp scheduler: small layers merged (MERGE_BYTES, hosts/schedulers/dlcp.py)
    congestion: str = ""  # TCP: congestion control set on every socket of the job; "": the host's default

    @property
    def grad_bound(self) -> float:
        return GRAD_BOUND if self.dropping else 0.0

    def job(self, base: TraceJob, placement: JobPlacement, seed: int) -> TraceJob:
        return replace(base, comm=self.comm, scheduler=self.scheduler, overlap=self.overlap,
                       collective="ps" if placement.collective == "star" else "ring", grad_bound=self.grad_bound,
                       job_id=placement.job_id, seed=seed, dscp=JOB_DSCP if self.queues == "tcp-class" else 0,
                       marking="commodity" if self.profile == "commodity" else "p4",
                       merge_bytes=MERGE_BYTES if self.merge else 0, congestion=self.congestion)

    def policy(self, job_ids: Sequence[int]) -> dict[str, Any]:
        jobs = []
        for job_id in job_ids:
            job: dict[str, Any] = {"id": job_id, "name": f"trace-{job_id}-{self.name}", "workers": [],
                                   "spraying": "random" if self.spraying else "off",
                                   "layers": copy.deepcopy(_layer_rules(self.queues))}
            if self.profile == "commodity":  # the DSCP the hosts mark is what the switches class by
                for rule in job["layers"]:
                    rule["dscp"] = COMMODITY_DSCP[rule["priority"]]
            if self.dropping:
                job["dropping"] = {"classes": [{"mag_class": f"0..{MAG_THRESHOLD - 1}", "queue_threshold": THRESHOLD}]}
            if self.ecn:
                job["ecn"] = {"queue_threshold": THRESHOLD}
            jobs.append(job)
        out: dict[str, Any] = {"version": 1, "default_priority": 0, "jobs": jobs}
        if self.profile != "dlcp":
            out["profile"] = self.profile
        if self.queues == "tcp-class":
            out["traffic_classes"] = [{"name": "job-tcp", "dscp": JOB_DSCP, "protocol": "tcp", "priority": 5}]
        return out

    def write_policy(self, folder: Path, job_ids: Sequence[int]) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"trace-{self.name}.yaml"
        path.write_text(f"# Policy of '{self.name}' (gradfabric experiment trace): {self.description}\n"
                        + yaml.safe_dump(self.policy(job_ids), sort_keys=False))
        return path


TRACE_CONFIGS: tuple[TraceConfig, ...] = (
    TraceConfig("ddp-tcp", "DDP-style: 25 MB buckets (/b), ring (or PS) over TCP, one FIFO with the background",
                "tcp", "fusion", "ddp"),
    TraceConfig("ddp-tcp-cubic", "the same with CUBIC (Linux's default) set on each of the job's sockets; "
                "the background keeps the host's default", "tcp", "fusion", "ddp", congestion="cubic"),
    TraceConfig("ddp-tcp-qos", "the same, the job's TCP marked DSCP 18 and put one class above the background",
                "tcp", "fusion", "ddp", queues="tcp-class"),
    TraceConfig("ddp-tcp-rto", "DDP-style over TCP with a tuned rto_min (1 ms real, x k)", "tcp", "fusion", "ddp",
                rto_min_real_s=0.001),
    TraceConfig("p3-tcp", "P3/ByteScheduler: 4 MB partitions (/b), front layers first, layer-wise overlap, over TCP",
                "tcp", "p3", "layerwise"),
    TraceConfig("transport", "the DLCP transport alone: DDP buckets over UDP, loss bound 0, FIFO, per-flow ECMP",
                "dlcp", "fusion", "ddp"),
    TraceConfig("transport-qos", "the DLCP transport with DDP buckets, the whole job one class above the background",
                "dlcp", "fusion", "ddp", queues="job"),
    TraceConfig("priority", "+ per-layer priority: DLCP scheduler, layer-wise overlap, layer queues (7/6/5)",
                "dlcp", "dlcp", "layerwise", queues="layer"),
    TraceConfig("dropping", "+ magnitude dropping: DLCP transport with a 10% gradient bound, drops at half a queue",
                "dlcp", "fusion", "ddp", dropping=True),
    TraceConfig("spraying", "+ per-packet spraying only", "dlcp", "fusion", "ddp", spraying=True),
    TraceConfig("dlcp", "full DLCP: scheduler, layer-wise overlap, layer queues, dropping, ECN, spraying",
                "dlcp", "dlcp", "layerwise", queues="layer", dropping=True, spraying=True, ecn=True),
    # Full DLCP minus one mechanism (the ablation at 5,000 packets/s): what each adds to the others.
    TraceConfig("dlcp-no-priority", "full DLCP without per-layer priority: DDP buckets and DDP overlap, the whole "
                "job one class above the background; dropping, ECN, spraying", "dlcp", "fusion", "ddp", queues="job",
                dropping=True, spraying=True, ecn=True),
    TraceConfig("dlcp-no-dropping", "full DLCP without magnitude dropping: loss bound 0 (every value resent), "
                "ECN kept", "dlcp", "dlcp", "layerwise", queues="layer", spraying=True, ecn=True),
    TraceConfig("dlcp-no-spraying", "full DLCP without per-packet spraying (ECMP per flow)",
                "dlcp", "dlcp", "layerwise", queues="layer", dropping=True, ecn=True),
    TraceConfig("commodity", "DLCP as deployable on commodity switches: the full DLCP hosts (scheduler, layer-wise "
                "overlap, 10% bound) marking DSCP per layer class and Not-ECT on drop-eligible packets; switches "
                "class by DSCP, drop Not-ECT and mark ECT above half a queue, hash per flow",
                "dlcp", "dlcp", "layerwise", queues="layer", dropping=True, ecn=True, profile="commodity"),
    TraceConfig("dlcp-merged", "full DLCP with small layers merged as MG-WFBP does: consecutive layers below 2 MB "
                "(/b) grouped into one transfer up to that size (84 messages per rank and iteration instead of 136)",
                "dlcp", "dlcp", "layerwise", queues="layer", dropping=True, spraying=True, ecn=True, merge=True),
)


@dataclass(frozen=True)
class TraceScenario:
    name: str
    description: str
    jobs: tuple[JobPlacement, ...]
    background: tuple[Flow, ...] = field(default_factory=tuple)
    #: Jobs that only make traffic in the measured job's class (bulk), not measured.
    bulk: tuple[JobPlacement, ...] = ()
    #: Switch-to-switch links that lose packets (both directions), and with which probability.
    lossy_links: tuple[tuple[str, str], ...] = ()
    link_loss: float = 0.0

    @property
    def job_ids(self) -> list[int]:
        return [j.job_id for j in self.jobs + self.bulk]


def _rr(client: str, server: str) -> Flow:
    return Flow(client, server, "rr", packet_bytes=RR_RESPONSE, interval_s=RR_INTERVAL)


TRACE_SCENARIOS: dict[str, TraceScenario] = {s.name: s for s in (
    TraceScenario("tcp", "ring h1-h5; long TCP h2->h5 and h6->h1; request/response h3 asks h7",
                  (JobPlacement(1, ("h1", "h5")),), (Flow("h2", "h5", "tcp"), Flow("h6", "h1", "tcp"), _rr("h3", "h7"))),
    TraceScenario("incast", "parameter server h1, workers h5-h8; long TCP h2->h1; request/response h3 asks h1",
                  (JobPlacement(1, ("h1", "h5", "h6", "h7", "h8"), collective="star"),),
                  (Flow("h2", "h1", "tcp"), _rr("h3", "h1"))),
    TraceScenario("multitenant", "two rings of the same configuration, h1-h5 and h2-h6; request/response h3 asks h7",
                  (JobPlacement(1, ("h1", "h5")), JobPlacement(2, ("h2", "h6"))), (_rr("h3", "h7"),)),
    TraceScenario("hotspot", "ring h1-h5; a second job of the same class h2-h6 on the same leaves; "
                  "request/response h3 asks h7",
                  (JobPlacement(1, ("h1", "h5")),), (_rr("h3", "h7"),), bulk=(JobPlacement(2, ("h2", "h6")),)),
    *(TraceScenario(f"lossy-{pct:g}", f"ring h1-h5; the spine link s1-l2 loses {pct:g}% each way; "
                    "request/response h3 asks h7", (JobPlacement(1, ("h1", "h5")),), (_rr("h3", "h7"),),
                    lossy_links=(("s1", "l2"),), link_loss=pct / 100) for pct in (0.0, 0.1, 1.0)),
)}

QUICK: dict[str, tuple[str, ...]] = {"tcp": ("ddp-tcp", "p3-tcp", "dlcp"), "incast": ("ddp-tcp", "p3-tcp", "dlcp"),
                                     "multitenant": ("ddp-tcp", "p3-tcp", "dlcp")}
#: Under random loss: TCP with Linux's and a tuned rto_min, P3, the DLCP transport reliable, with a
#: loss bound, sprayed, full DLCP and its commodity form (no queue mechanism acts without congestion).
LOSSY_CONFIGS = ("ddp-tcp", "ddp-tcp-rto", "p3-tcp", "transport", "dropping", "spraying", "dlcp", "commodity")
ALL_MECHANISMS = ("ddp-tcp", "ddp-tcp-qos", "p3-tcp", "transport", "transport-qos", "priority", "dropping",
                  "spraying", "dlcp", "commodity")
FULL: dict[str, tuple[str, ...]] = {
    "tcp": ALL_MECHANISMS, "multitenant": ALL_MECHANISMS, "hotspot": ALL_MECHANISMS,
    "incast": ("ddp-tcp", "ddp-tcp-rto", "ddp-tcp-qos", "p3-tcp", "transport", "priority", "dropping", "dlcp",
               "commodity"),
    **{name: LOSSY_CONFIGS for name in ("lossy-0.1", "lossy-1")},
}


def scaled_background(flows: Sequence[Flow], job: TraceJob) -> tuple[Flow, ...]:
    """The background at the job's port rate and k: request/response periods times k over the
    reference k, UDP rates in proportion to the port rate (experiments.scaling)."""
    from experiments.scaling import REFERENCE_PORT_PPS, time_factor

    out = []
    for f in flows:
        if f.protocol == "rr":
            f = replace(f, interval_s=f.interval_s * time_factor(job.k))
        elif f.protocol == "udp" and f.mbps:
            f = replace(f, mbps=f.mbps * job.port_pps / REFERENCE_PORT_PPS)
        out.append(f)
    return tuple(out)


def port_topology(topo: Path, port_pps: float, folder: Path) -> Path:
    """`topo` itself when its ports forward `port_pps`; else a copy in `folder` that does."""
    spec = yaml.safe_load(topo.read_text())
    switch = spec.setdefault("defaults", {}).setdefault("switch", {})
    if float(switch.get("egress_rate_pps", 0)) == port_pps and not any("egress_rate_pps" in sw for sw in
                                                                      spec.get("switches", [])):
        return topo
    if port_pps != int(port_pps):
        raise ExperimentError(f"--port-pps {port_pps:g}: the switches take whole packets per second")
    switch["egress_rate_pps"] = int(port_pps)
    for sw in spec.get("switches", []):
        sw.pop("egress_rate_pps", None)
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / "topology.yaml"
    out.write_text(f"# {topo.name} with every switch port forwarding {int(port_pps)} packets/s "
                   "(gradfabric experiment trace --port-pps)\n" + yaml.safe_dump(spec, sort_keys=False))
    return out


def trace_config(name: str) -> TraceConfig:
    known = {c.name: c for c in TRACE_CONFIGS}
    if name not in known:
        raise ExperimentError(f"unknown configuration {name!r}; choose from {', '.join(known)}")
    return known[name]


def trace_scenario(name: str) -> TraceScenario:
    if name not in TRACE_SCENARIOS:
        raise ExperimentError(f"unknown scenario {name!r}; choose from {', '.join(TRACE_SCENARIOS)}")
    return TRACE_SCENARIOS[name]
