"""The training experiment's raw runs as the simulator reads them (``runs/*.json`` of
``gradfabric experiment training`` and ``gradfabric experiment trace``).

One :class:`Run` per ok record: its scenario and configuration, what it records of its
conditions (port rate, the ranks' CPU starvation, the machine's load), the job it trained
(a trace-driven run's H100 model, scaling and scheduler; else the CNN job) and its
iteration times (iteration 0 left out: it sets up).

The configuration tables mirror ``experiments/configs.py`` (CNN job) and
``experiments/trace_configs.py`` (trace-driven job); the simulator does not import the
experiments.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from simulator.errors import SimulatorError


@dataclass(frozen=True)
class Config:
    """What a configuration does, as far as the model needs it."""

    comm: str  # gloo or tcp (kernel TCP), dlcp (the DLCP transport)
    scheduler: str  # window (one tensor per DDP bucket), fusion, p3, dlcp
    overlap: str  # ddp (optimizer after every bucket) or layerwise
    above_background: bool  # the job's queue is above the background's
    bound: float  # gradient loss bound of the reduce stage
    spraying: bool = False
    ecn: bool = False  # the switches mark the job's packets above half a queue
    #: dlcp scheduler: consecutive small layers merged into transfers of this many bytes (real,
    #: divided by b at run time; experiments/training/trace_worker.py MERGE_BYTES); 0: off.
    merge_bytes: int = 0


#: CNN job (experiments/configs.py): DDP with one tensor per bucket, gloo or the DLCP hook.
CNN_CONFIGS: dict[str, Config] = {
    "gloo": Config("gloo", "window", "ddp", False, 0.0), "reliable": Config("dlcp", "window", "ddp", False, 0.0),
    "qos": Config("dlcp", "window", "ddp", True, 0.0), "priority": Config("dlcp", "window", "ddp", True, 0.0),
    "dropping": Config("dlcp", "window", "ddp", False, 0.10),
    "spraying": Config("dlcp", "window", "ddp", False, 0.0, spraying=True),
    "dlcp": Config("dlcp", "window", "ddp", True, 0.10, spraying=True, ecn=True),
}
#: Trace-driven job (experiments/trace_configs.py).
TRACE_CONFIGS: dict[str, Config] = {
    "ddp-tcp": Config("tcp", "fusion", "ddp", False, 0.0), "ddp-tcp-qos": Config("tcp", "fusion", "ddp", True, 0.0),
    "ddp-tcp-rto": Config("tcp", "fusion", "ddp", False, 0.0), "p3-tcp": Config("tcp", "p3", "layerwise", False, 0.0),
    # CUBIC on the job's sockets instead of the hosts' default (BBR): the model has no term for
    # the congestion control, so it predicts this as ddp-tcp.
    "ddp-tcp-cubic": Config("tcp", "fusion", "ddp", False, 0.0),
    "transport": Config("dlcp", "fusion", "ddp", False, 0.0), "transport-qos": Config("dlcp", "fusion", "ddp", True, 0.0),
    "priority": Config("dlcp", "dlcp", "layerwise", True, 0.0),
    "dropping": Config("dlcp", "fusion", "ddp", False, 0.10),
    "spraying": Config("dlcp", "fusion", "ddp", False, 0.0, spraying=True),
    "dlcp": Config("dlcp", "dlcp", "layerwise", True, 0.10, spraying=True, ecn=True),
    "commodity": Config("dlcp", "dlcp", "layerwise", True, 0.10, ecn=True),
    "dlcp-merged": Config("dlcp", "dlcp", "layerwise", True, 0.10, spraying=True, ecn=True, merge_bytes=2 * 2**20),
    # Full DLCP minus one mechanism (the ablation at 5,000 packets/s).
    "dlcp-no-priority": Config("dlcp", "fusion", "ddp", True, 0.10, spraying=True, ecn=True),
    "dlcp-no-dropping": Config("dlcp", "dlcp", "layerwise", True, 0.0, spraying=True, ecn=True),
    "dlcp-no-spraying": Config("dlcp", "dlcp", "layerwise", True, 0.10, ecn=True),
}
#: Port rate of CNN sweeps without one in their records (experiments/README.md, "port rate").
SLOW_SWEEPS_BEFORE, SLOW_PPS, FAST_PPS = "2026-11-24", 1_000.0, 20_000.0
#: Queue depths (packets per priority): the CNN fabric's and the trace fabric's (trace_configs.py).
CNN_QUEUE_PACKETS, TRACE_QUEUE_PACKETS = 32, 51
#: Versions of the DLCP transport as the trace ranks ran it, by the time they took effect (UTC,
#: from the project's history): commit 2602e95 made the ranks pass the port rate to their
#: endpoint (pacing from the least RTT, an answer waking only its sender: cd2c647, e74d54d);
#: commit b076da8 sent UDP with GSO towards the fabric's veths (the sender's CPU per packet
#: 40-44% less through a switch, hosts/README.md), before a4d1aaa made a tensor sent in parts
#: always complete. Runs started after each move packets another way, so they are their own
#: host-cost family and their own scenario rows.
TRANSPORT_EPOCHS: tuple[tuple[str, str], ...] = (("2026-11-26 11:55:22", "port-rate"), ("2026-11-26 14:05:08", "gso"))
#: Kernel TCP's payload per segment, to count the segments a TCP rank's bytes took.
TCP_SEGMENT_BYTES = 1448
#: Full-sized segments a Linux receiver takes per ACK in a long flow (delayed ACK, RFC 1122
#: 4.2.3.2 and RFC 5681 4.2: an ACK at least every second full-sized segment; the fabric's
#: veths have no GRO, so segments arrive one by one): a background TCP flow's ACKs are packets
#: the software switches forward too, half as many as its data packets.
DELAYED_ACK_SEGMENTS = 2
#: Versions of the hosts' code whose DLCP receive path answers probes in C (commit 424f238 and
#: later, hosts/README.md "Probes answered in C"): runs that record ``probes_answered_in_c`` in a
#: rank's totals (since commit 384eedb), and the runs made before that record at the code they
#: name (the 20 ``c-answers-after-N`` sweeps, experiments/README.md). Label ``c-answers``.
C_ANSWERS_CODE = ("a6129ae0a860d949",)
#: Label of the hosts' code whose DLCP sender defers its window cuts on a path seen to reorder
#: (commit 1e343e0 and later, hosts/README.md): runs that record ``window_cuts_deferred`` in a
#: rank's totals (every run of commit ed5d007 and later, the first to record the window's cuts;
#: no run was made at 1e343e0 alone). Its DLCP runs are their own host-cost family and, with the
#: runs of the same sweep and code, their own scenario rows: a changed transport is not fitted
#: together with the old one.
REORDER_DEFER = "reorder-defer"
#: The sweep folder beside ``runs/`` that holds timing logs (``GRADFABRIC_TRACE_TIMING``,
#: experiments/README.md): runs made with them on are a changed measurement (the logs take
#: the ranks' CPU per packet and message), diagnostics the table does not validate against.
TIMING_LOGS = "timing"


def transport_epoch(started: str) -> str:
    """The transport version a run started at ``started`` (``YYYY-MM-DD HH:MM:SS``) used: the
    label of the last :data:`TRANSPORT_EPOCHS` entry at or before it, ``""`` before the first."""
    label = ""
    for since, name in TRANSPORT_EPOCHS:
        if started[:19] >= since:
            label = name
    return label


@dataclass
class Run:
    """One ok run record."""

    sweep: str
    run_id: str
    scenario: str
    config: str
    port_pps: float
    queue_packets: int
    iterations: list[float]
    exposed: list[float] = field(default_factory=list)
    compute: list[float] = field(default_factory=list)
    #: Share of its runnable time the busiest host's rank waited for a CPU, summed over its
    #: threads (the earlier figure, which overstates for many threads; a star's server; a ring's
    #: ranks are alike: their mean), None when not recorded.
    starvation: float | None = None
    #: The machine's 1-minute load average, mean of before and after the run (None: not recorded).
    load: float | None = None
    job: dict[str, Any] | None = None  # a trace-driven run's job (model, precision, k, b, ...)
    ranks: int = 2  # of the (first) job: a ring's members, or a star's server and workers
    #: Packets the DLCP transport retransmitted per data packet it sent (None: kernel TCP, not counted).
    loss_rate: float | None = None
    #: Packets a lossy link lost (``link_loss_drops``) per data packet the job sent, when the
    #: scenario has a lossy link (None: none).
    link_loss_rate: float | None = None
    #: The kernel's ``rto_min`` the run set on its ranks' routes (None: Linux's 200 ms).
    rto_min_s: float | None = None
    started: str = ""
    #: Median completion time of the scenario's request/response flow in this run (a small
    #: request and an 8,000-byte answer across the fabric): the round trip the run's hosts and
    #: switches gave a short exchange. None: not recorded.
    rr_s: float | None = None
    #: The background's long flows' recorded goodput, in 1,448-byte data packets a second.
    background_pps: float = 0.0
    #: The ACKs of the background's long TCP flows, in packets a second: its TCP data packets
    #: over :data:`DELAYED_ACK_SEGMENTS` (the record counts no ACKs; UDP flows have none).
    background_ack_pps: float = 0.0
    #: Jobs of the run, measured or not (multitenant: two alike; hotspot: the job and a bulk
    #: job of the same configuration that only sends), all through the same leaf switches.
    tenants: int = 1
    #: The measured jobs' share of the switches' packet budget among all the run's jobs, by their
    #: ranks' recorded CPU use (:func:`tenant_share`); None: not recorded (then 1 / tenants).
    tenant_share: float | None = None
    #: The busiest host's rank as recorded since the per-process figures (commit c828d8c):
    #: CPU use as a share of a core and CPU wait as a share of wall time (a star's server; a
    #: ring's ranks: their means). None: not recorded.
    cpu_use: float | None = None
    cpu_wait: float | None = None
    #: The software switches' (CPU use, CPU wait) as shares of wall time, by switch; empty: not recorded.
    switch_cpu: dict[str, tuple[float, float]] = field(default_factory=dict)
    #: A star's server's CPU per packet over a worker's (:func:`server_cost`); None: not a star
    #: or not recorded.
    server_cost: float | None = None
    #: The hosts' code the run recorded (a commit id) and the probes its DLCP ranks answered in C
    #: (None: not recorded).
    code: str = ""
    answered_in_c: int | None = None
    #: Whether a run of the same sweep and code answered probes in C (kernel TCP's runs of that
    #: code answer none, but ran on it: they are its scenario's rows too).
    code_answers_in_c: bool = False
    #: The window cuts the run's DLCP ranks deferred on reordering (None: not recorded) and
    #: whether a run of the same sweep and code recorded them (:data:`REORDER_DEFER`).
    deferred_cuts: int | None = None
    code_defers_cuts: bool = False

    @property
    def host_code(self) -> str:
        """``c-answers`` where the run's DLCP receive path answered probes in C (recorded, or by
        its code, :data:`C_ANSWERS_CODE`), else ``""``."""
        if self.answered_in_c or self.code_answers_in_c or any(self.code.startswith(c) for c in C_ANSWERS_CODE):
            return "c-answers"
        return ""

    @property
    def transport_code(self) -> str:
        """:data:`REORDER_DEFER` where the run's hosts' code defers window cuts on reordering
        (recorded by the run, or by a run of the same sweep and code), else ``""``."""
        return REORDER_DEFER if self.deferred_cuts is not None or self.code_defers_cuts else ""

    @property
    def epoch(self) -> str:
        """The DLCP transport's version for a trace-driven run (:func:`transport_epoch`), else ``""``."""
        return transport_epoch(self.started) if self.job else ""

    @property
    def scenario_label(self) -> str:
        """The scenario, with the transport version where it is not the first, the hosts'
        code where it answers probes in C (:attr:`host_code`) and where it defers window cuts
        on reordering (:attr:`transport_code`)."""
        tags = ", ".join(t for t in (self.epoch, self.host_code, self.transport_code) if t)
        return f"{self.scenario} ({tags})" if tags else self.scenario

    @property
    def kind(self) -> str:
        """``trace`` (an H100 model) or ``cnn``."""
        return "trace" if self.job else "cnn"

    @property
    def spec(self) -> Config:
        table = TRACE_CONFIGS if self.job else CNN_CONFIGS
        if self.config not in table:
            raise SimulatorError(f"{self.sweep}/{self.run_id}: unknown {self.kind} configuration {self.config!r}")
        return table[self.config]

    @property
    def family(self) -> str:
        """Runs whose hosts move packets the same way share one calibrated host cost: the
        job, and kernel TCP or the DLCP transport, whose rate control also answers ECN marks
        where a configuration has the switches mark (not the scheduler: per packet the
        transport works alike for DDP's buckets and DLCP's layers), and the DLCP transport's
        version (:data:`TRANSPORT_EPOCHS`, :data:`REORDER_DEFER`)."""
        spec = self.spec
        if spec.comm in ("gloo", "tcp"):
            return f"{self.kind}/tcp"
        tags = ", ".join(t for t in (self.epoch, self.transport_code) if t)
        return f"{self.kind}/dlcp" + ("+ecn" if spec.ecn else "") + (f" ({tags})" if tags else "")

    @property
    def p50_s(self) -> float:
        return statistics.median(self.iterations)


def _meta(sweep: Path) -> dict[str, Any]:
    try:
        meta = json.loads((sweep / "results.json").read_text()).get("meta", {})
    except (OSError, ValueError):
        meta = {}
    if not meta.get("job"):
        try:
            plan = json.loads((sweep / "plan.json").read_text())
            meta = {**meta, "job": plan.get("job"), "scale": plan.get("scale")}
        except (OSError, ValueError):
            pass
    return meta if isinstance(meta, dict) else {}


def _port_pps(run: dict[str, Any], meta: dict[str, Any], job: dict[str, Any] | None) -> float:
    for source in (run, run.get("rates") or {}, run.get("scale") or {}, job or {}, meta.get("scale") or {}, meta):
        if isinstance(source, dict) and source.get("port_pps"):
            return float(source["port_pps"])
    started = str(meta.get("started", ""))
    return SLOW_PPS if started and started < SLOW_SWEEPS_BEFORE else FAST_PPS


def _trace_job(run: dict[str, Any], meta: dict[str, Any]) -> dict[str, Any] | None:
    spec = run.get("trace_job") or run.get("job") or meta.get("job")
    if not isinstance(spec, dict) or not spec.get("model"):
        return None
    job = dict(spec)
    scale = meta.get("scale") or {}
    if scale.get("b") and not job.get("b"):
        job["b"] = scale["b"]
    config = TRACE_CONFIGS.get(str(run.get("config")))
    if config is not None:  # the sweep's job is the base; the configuration sets these
        job.update(comm=config.comm, scheduler=config.scheduler, overlap=config.overlap,
                   merge_bytes=config.merge_bytes)
    return job


def _mean_load(run: dict[str, Any]) -> float | None:
    loads = [float(x[0]) for x in (run.get("load_before"), run.get("load_after")) if isinstance(x, list) and x]
    return sum(loads) / len(loads) if loads else None


def _process_figures(jobs: list[dict[str, Any]]) -> tuple[float | None, float | None]:
    """The busiest host's rank's recorded CPU use and CPU wait share (a star's server, else
    the mean over the jobs' ranks); (None, None) when a rank lacks either."""
    ranks = [r for j in jobs for r in (j.get("ranks") or {}).values()]
    servers = [r for r in ranks if r.get("role") == "server"]
    busiest = servers or ranks
    if not busiest or any(r.get("cpu_share") is None or r.get("cpu_wait_share") is None for r in busiest):
        return None, None
    return (statistics.mean(float(r["cpu_share"]) for r in busiest),
            statistics.mean(float(r["cpu_wait_share"]) for r in busiest))


def server_cost(jobs: list[dict[str, Any]]) -> float | None:
    """A star's server's CPU per packet over its workers' mean, from their recorded CPU use
    over the same run: the server handles every worker's push and pull, ``W`` times the
    packets of one worker, so the ratio is ``use(server) / mean use(worker) / W``. None for a
    ring or when a rank's use is not recorded."""
    ranks = list((jobs[0].get("ranks") or {}).values()) if jobs else []
    servers = [r for r in ranks if r.get("role") == "server"]
    workers = [r for r in ranks if r.get("role") != "server"]
    if len(servers) != 1 or not workers or any(r.get("cpu_share") is None for r in ranks):
        return None
    worker = statistics.mean(float(r["cpu_share"]) for r in workers)
    return float(servers[0]["cpu_share"]) / worker / len(workers) if worker > 0 else None


def tenant_share(jobs: list[dict[str, Any]], other_cpu: dict[str, Any]) -> float | None:
    """What a measured job moves of all the run's jobs' packets through the shared switches,
    by CPU use: its ranks' mean recorded use over the sum of every job's (the measured ones and
    the bulk jobs ``other_cpu`` lists as ``jobN rankM``), the same transport doing alike work
    per packet. Measured jobs alike (multitenant's two) give 1 / jobs. None when a use is missing."""
    per_job: list[float] = []
    for j in jobs:
        uses = [r.get("cpu_share") for r in (j.get("ranks") or {}).values()]
        if not uses or any(u is None for u in uses):
            return None
        per_job.append(statistics.mean(float(u) for u in uses))
    bulk: dict[str, list[float]] = {}
    for name, use in other_cpu.items():
        if str(name).startswith("job"):
            if use is None:
                return None
            bulk.setdefault(str(name).split()[0], []).append(float(use))
    total = sum(per_job) + sum(statistics.mean(u) for u in bulk.values())
    return statistics.mean(per_job) / total if per_job and total > 0 else None


#: A sweep folder whose README.md starts so is marked as no result of the project's code
#: (it ran on uncommitted edits, experiments/README.md): its runs are not validated against.
NOT_A_RESULT = "# Not a result"


def not_results(results: Path) -> list[str]:
    """Sweep folders under ``results`` marked :data:`NOT_A_RESULT`, by name."""
    return sorted({f.parent.parent.name for f in results.rglob("runs/*.json") if _not_a_result(f.parent.parent)})


def _not_a_result(sweep: Path) -> bool:
    try:
        return (sweep / "README.md").read_text().startswith(NOT_A_RESULT)
    except OSError:
        return False


def load_runs(results: Path) -> list[Run]:
    """Every ok run under ``results`` (a sweep folder or a folder of them), but those of sweeps
    marked :data:`NOT_A_RESULT` or holding timing logs (:func:`timing_logged`)."""
    marked, timed = not_results(results), timing_logged(results)
    files = sorted(f for f in results.rglob("runs/*.json") if f.parent.parent.name not in {*marked, *timed})
    if not files:
        raise SimulatorError(f"{results}: no raw runs (runs/*.json) under it"
                             + (f" but those of sweeps marked not results: {', '.join(marked)}" if marked else "")
                             + (f" but those of timing-logged sweeps: {', '.join(timed)}" if timed else ""))
    metas: dict[Path, dict[str, Any]] = {}
    runs = []
    for f in files:
        sweep = f.parent.parent
        if sweep not in metas:
            metas[sweep] = _meta(sweep)
        try:
            record = json.loads(f.read_text())
        except (OSError, ValueError) as exc:
            raise SimulatorError(f"{f}: not a run record: {exc}") from None
        if record.get("status") != "ok":
            continue
        job = _trace_job(record, metas[sweep])
        run = Run(sweep.name, str(record.get("run_id") or f.stem), str(record.get("scenario")),
                  str(record.get("config")), _port_pps(record, metas[sweep], job),
                  TRACE_QUEUE_PACKETS if job else CNN_QUEUE_PACKETS, [], load=_mean_load(record), job=job)
        starved, served = [], []
        jobs = list((record.get("jobs") or {}).values())
        run.ranks = max(2, len(jobs[0].get("ranks") or {})) if jobs else 2
        bulk = {str(name).split()[0] for name in ((record.get("switch") or {}).get("other_cpu") or {})
                if str(name).startswith("job")}  # "job2 rank0": the hotspot's bulk job's ranks
        run.tenants = max(1, len(jobs) + len(bulk))
        run.tenant_share = tenant_share(jobs, (record.get("switch") or {}).get("other_cpu") or {})
        for j in jobs:
            for rank in (j.get("ranks") or {}).values():
                if rank.get("starvation") is not None:
                    (served if rank.get("role") == "server" else starved).append(float(rank["starvation"]))
                for rec in (rank.get("records") or [])[1:]:
                    run.iterations.append(float(rec["iteration_s"]))
                    if rec.get("compute_s") is not None:
                        run.compute.append(float(rec["compute_s"]))
                    if rec.get("forward_wait_s") is not None:
                        run.exposed.append(float(rec["forward_wait_s"]))
        totals = [rank.get("totals") or {} for j in jobs for rank in (j.get("ranks") or {}).values()]
        sent = sum(int(t.get("packets") or 0) for t in totals)
        if sent:
            run.loss_rate = sum(int(t.get("retransmitted") or 0) for t in totals) / sent
        run.started = str(record.get("started") or "")
        code = record.get("code")
        run.code = str((code.get("commit") if isinstance(code, dict) else code) or "")
        answered = [int(t["probes_answered_in_c"]) for t in totals if t.get("probes_answered_in_c") is not None]
        run.answered_in_c = sum(answered) if answered else None
        deferred = [int(t["window_cuts_deferred"]) for t in totals if t.get("window_cuts_deferred") is not None]
        run.deferred_cuts = sum(deferred) if deferred else None
        fcts = [float(t) for flow in record.get("background") or [] if flow.get("protocol") == "rr"
                for t in flow.get("fct_s") or []]
        run.rr_s = statistics.median(fcts) if fcts else None
        run.background_pps = sum(float(flow.get("goodput_mbps") or 0.0) * 1e6 / 8 / TCP_SEGMENT_BYTES
                                 for flow in record.get("background") or [] if flow.get("protocol") in ("tcp", "udp"))
        run.background_ack_pps = sum(float(flow.get("goodput_mbps") or 0.0) * 1e6 / 8 / TCP_SEGMENT_BYTES
                                     for flow in record.get("background") or []
                                     if flow.get("protocol") == "tcp") / DELAYED_ACK_SEGMENTS
        if record.get("rto_min_s"):
            run.rto_min_s = float(record["rto_min_s"])
        link = record.get("link_loss") or {}
        if link.get("links"):
            data = sent or sum(int(t.get("bytes") or 0) for t in totals) / TCP_SEGMENT_BYTES
            dropped = int((record.get("switch") or {}).get("link_loss_drops") or 0)
            run.link_loss_rate = dropped / data if data else None
        busiest = served or starved
        run.starvation = statistics.mean(busiest) if busiest else None
        run.cpu_use, run.cpu_wait = _process_figures(jobs)
        run.server_cost = server_cost(jobs)
        switch = record.get("switch") or {}
        uses, waits = switch.get("switch_cpu") or {}, switch.get("switch_cpu_wait") or {}
        run.switch_cpu = {name: (float(uses[name]), float(waits[name])) for name in sorted(uses)
                          if uses[name] is not None and waits.get(name) is not None}
        if run.iterations:
            runs.append(run)
    in_c = {(run.sweep, run.code) for run in runs if run.answered_in_c}
    defers = {(run.sweep, run.code) for run in runs if run.deferred_cuts is not None}
    for run in runs:
        run.code_answers_in_c = (run.sweep, run.code) in in_c
        run.code_defers_cuts = (run.sweep, run.code) in defers
    return runs


def timing_logged(results: Path) -> list[str]:
    """Sweep folders under ``results`` with timing logs beside their runs (:data:`TIMING_LOGS`),
    by name: their runs are not validated against."""
    return sorted({f.parent.parent.name for f in results.rglob("runs/*.json") if (f.parent.parent / TIMING_LOGS).is_dir()})


__all__ = ["CNN_CONFIGS", "C_ANSWERS_CODE", "DELAYED_ACK_SEGMENTS", "REORDER_DEFER", "TIMING_LOGS", "TRACE_CONFIGS",
           "TRANSPORT_EPOCHS", "Config", "Run", "load_runs", "not_results", "server_cost", "tenant_share",
           "timing_logged", "transport_epoch"]
