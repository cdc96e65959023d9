"""The model of one run of the training experiment (``sim validate``, ``sim port-predict``): its
iteration times predicted from its scenario and what its record says of its conditions:


* **The job**: a trace-driven run's H100 model scaled by its ``b`` and ``k``, its
  parameters merged per layer as the trace worker does, and its scheduler (DDP's buckets,
  P3's or DLCP's partitions of 4 MB / b); a CNN run takes the job trace given
  (``--job-trace``) and sends one tensor per DDP bucket (gloo two at a time, its process
  group's two worker threads; the DLCP hook four). With ``--baseline`` a CNN run's host time is drawn from loopback runs of the same
  configuration (the hosts' own time without the fabric).
* **The fabric** (:mod:`simulator.fabric_model`): port rate and queue depth, the background
  and collective of the scenario, whether the job's queue is above the background's.
* **The hosts** (:mod:`simulator.host_model`): a packet-rate ceiling ``(1 - s) / c``, ``1 - s``
  the CPU share of the slower of the busiest host's rank and the switches: by default, for the
  DLCP transport's runs that record it per process (use over use and wait; their cost ``c``
  calibrated apart, :func:`cost_family`), else the rank's summed starvation and the load;
  less the background's recorded packets (its data, and its TCP flows' ACKs, one per two data
  packets: delayed ACK), shared by the jobs that cross the same switches
  (multitenant's two, hotspot's job and bulk job) by their ranks' recorded CPU use, else
  equally; a star's DLCP server handles its
  packets at its recorded CPU per packet relative to a worker's; added to each
  message's time on the wire, with the DLCP transport's measured CPU per message
  (:data:`DLCP_MESSAGE_CPU_S`, the GSO transport's runs) at the same CPU share, and a cost per packet ``c`` of
  its family (job, transport, scheduler) **calibrated leave-one-sweep-out**: the cost with
  the smallest median p50 error over the family's runs in the other sweeps, never on the
  sweep predicted. A family no other sweep ran is left
  uncalibrated and out of the table's error.
* **Tails**: packets are lost with the rate the run recorded (the DLCP transport counts its
  retransmissions per packet sent; a lossy link's drops per data packet for kernel TCP),
  else the port model's (kernel TCP: Mathis). Every round of retransmissions that still
  misses a packet of a reliable message costs a timeout (the DLCP transport's 10 ms, or two
  round trips; TCP's ``rto_min``, 200 ms unless the run set one), but kernel TCP only for
  its last three segments (earlier losses are repaired by fast retransmit), and its first
  round there costs Linux's tail loss probe (2 SRTT + 2 ms, then a round trip to repair;
  SRTT from the run's recorded request/response time, else the port model's); a bounded-loss
  stage does not wait. Timers run on the wall clock: the scaling rule stretches compute
  (x k), not them. p50 and p99 come from seeded draws, a trace-driven run's multiplied by
  the spread of iterations about their median that the same configuration's runs in the
  other sweeps recorded (:func:`simulator.validate.iteration_spread`).
* **Transport versions**: trace-driven runs are grouped, and DLCP families calibrated, per
  version of the DLCP transport they ran (:data:`simulator.fabric_runs.TRANSPORT_EPOCHS`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from hosts.schedulers import AlphaBeta, Scheduler, Transfer, create
from simulator.engine import simulate
from simulator.errors import SimulatorError
from simulator.fabric_model import (DLCP_PAYLOAD_BYTES, TCP_PAYLOAD_BYTES, CollectiveLink, WindowScheduler, busiest_of,
                                    port_model, split_fifo, with_own_acks)
from simulator.fabric_runs import DELAYED_ACK_SEGMENTS, Run
from simulator.host_model import CALIBRATED_APART, DEFAULT_CPU_MEASURE, MAX_MIN_FLOOR, host_pps, run_available
from simulator.traces import ModelTrace, load_trace

#: Background and collective per scenario (experiments/scenarios.py, trace_configs.py).
SCENARIOS: dict[str, tuple[str, str]] = {
    "tcp": ("tcp", "ring"), "udp": ("udp", "ring"), "incast": ("tcp", "star"), "multitenant": ("none", "ring"),
    "lossy-0.1": ("none", "ring"), "lossy-1": ("none", "ring"), "hotspot": ("none", "ring"),
    "lossy-0": ("none", "ring"),  # the lossy-link fabric with the link's loss at 0 (a control)
}
#: Model terms ``sim validate --without`` can leave out, to measure what each adds: a star's
#: DLCP server's recorded CPU per packet relative to a worker's, the background's packets
#: off the switches' budget, the recorded spread of iterations about their median, and the
#: jobs' shares of the switches' budget by their ranks' recorded CPU use (else equal), a star's
#: kernel-TCP pushes as one flow per worker, and the DLCP transport's CPU per message.
#: ``background-acks``: the background TCP flows' ACKs among the packets the switches forward.
#: ``tcp-acks``: a kernel-TCP ring's own ACKs among its port's packets (:func:`simulator.fabric_model.with_own_acks`).
#: ``p3-threads``: a P3 ring's kernel-TCP host cost calibrated apart (:data:`P3_RING_FAMILY`).
#: ``star-pulls``: a star's pulls over the server's leaf's uplinks, beside the next pushes
#: (:class:`simulator.fabric_model.CollectiveLink`'s ``pull_flows``).
TERMS = ("server-cost", "background", "spread", "tenant-use", "incast-flows", "message-cost", "background-acks",
         "host-code", "paced", "tcp-acks", "p3-threads", "star-pulls")
#: The server's leaf's uplinks, which a star's pulls leave over (every worker on the other leaf).
LEAF_UPLINKS = 2
#: CPU per message of the DLCP transport, sender's and receiver's together (experiments/README.md,
#: "Where a DLCP rank's time goes": 20-23 us per packet for both sides sending one 42-packet
#: message at a time between two endpoints on loopback, about 0.9 ms a message, in Python per
#: message rather than per packet); a figure measured apart from the fabric's runs.
DLCP_MESSAGE_CPU_S = 0.9e-3
#: Transport versions (:data:`simulator.fabric_runs.TRANSPORT_EPOCHS`) the figure was measured on:
#: the GSO transport; the earlier ones moved messages another way and are not covered by it.
MESSAGE_COST_EPOCHS = ("gso",)
#: The DLCP transport's host CPU (per packet and per message) by the hosts' code
#: (:attr:`simulator.fabric_runs.Run.host_code`), over the code before it, as the runs recorded
#: it: with probes answered in C a DLCP rank's CPU per packet sent (its CPU share x the run's
#: seconds / its packets sent) fell to 0.88 of the code before's, the median over the 20
#: interleaved pairs of ``c-answers-before/after-N`` sweeps and both DLCP configurations (per
#: pair 0.62-1.05, below 1 in 38 of 40). Not a clock: across scenarios the 10-pair sweep's DLCP
#: ranks spent 101-102 us a packet in hotspot and lossy-0.1, whose p50s differ 1.6x. (Both
#: sides' CPU per message on loopback, window 22, fell to 0.96x, hosts/README.md "Probes
#: answered in C": tried, it follows the pairs' measured gain less, validation notes.md.)
HOST_CODE_CPU: dict[str, float] = {"c-answers": 0.88}
#: Transport versions whose DLCP ranks pace their sends at the port's rate from their least RTT
#: and cut it on marks (commit 2602e95 on; ``paced``): at the switches' CPU such a job claims no
#: max-min half against the background's window-based TCP flows but takes what they leave
#: (:data:`simulator.host_model.MAX_MIN_FLOOR` applies to window-based jobs: kernel TCP, and
#: the DLCP transport before it paced). Only where the run's CPU share is read per process: on
#: the summed figure's scale the background's packets exceed the budget (the port-rate tcp
#: sweep: 17,600 a second against 14,400 at 9 us and 0.13 of a CPU), and the floor stays.
PACED_EPOCHS = ("port-rate", "gso")
#: Scenarios whose second job (multitenant's, hotspot's bulk sender) crosses the same leaf uplinks.
SHARED_UPLINKS = ("multitenant", "hotspot")
#: Multitenant: per-flow hashing puts the two jobs on the same leaf uplink with this probability.
COLLISION_P = 0.5
LINUX_RTO_MIN_S, DLCP_MIN_RTO_S = 0.200, 0.010
#: Segments at a TCP message's end whose loss no duplicate ACKs report (fast retransmit needs 3).
TCP_DUPACKS = 3
#: Linux's tail loss probe (RACK-TLP, RFC 8985; ``net.ipv4.tcp_early_retrans`` = 3 on the
#: fabric's kernel): a tail left unanswered is probed after 2 SRTT + TCP_TIMEOUT_MIN (2 ms),
#: and the probe's answer repairs it within one more round trip; only a lost repair waits
#: for the retransmission timeout.
TLP_SRTTS, TLP_MIN_S = 2.0, 0.002
#: Retransmission rounds drawn at most per message.
MAX_ROUNDS = 8
DLCP_IN_FLIGHT = 4
#: Collectives gloo runs at once: its process group's worker threads (ProcessGroupGloo.hpp,
#: ``Options::threads{2}``; the CNN job keeps the default).
GLOO_THREADS = 2
DRAWS_PER_RUN = 2_000
FRAME_BYTES = 1500
#: The trace worker's caps (experiments/training/trace_worker.py), divided by b at run time.
DDP_BUCKET_BYTES, DDP_FIRST_BUCKET_BYTES, PARTITION_BYTES = 25 * 2**20, 1 * 2**20, 4 * 2**20
@dataclass(frozen=True)
class RunPrediction:
    draws: np.ndarray  # iteration times, seconds
    exposed_s: float  # the model's iteration time beyond the job's compute
    note: str


def _b(job: dict[str, Any]) -> float:
    if job.get("b"):
        return float(job["b"])
    # experiments/scaling.py: b * k = real capacity / the port's (full 1,500-byte frames)
    return float(job["real_gbps"]) * 1e9 / (float(job["port_pps"]) * FRAME_BYTES * 8) / float(job["k"])


def scaled_trace(job: dict[str, Any], traces: Path) -> ModelTrace:
    """A trace-driven run's job: the H100 trace with sizes / b and times x k."""
    try:
        k, b = float(job["k"]), _b(job)
        trace = load_trace(traces / "h100_pytorch_layer_traces.csv", model=job["model"], precision=job["precision"])
    except KeyError as exc:
        raise SimulatorError(f"a trace-driven run's record lacks {exc}") from None
    layers = tuple(replace(l, numel=max(1, math.ceil(l.numel / b)), forward_s=l.forward_s * k,
                           backward_s=l.backward_s * k) for l in trace.layers)
    return replace(trace, layers=layers, backward_tail_s=trace.backward_tail_s * k, optimizer_s=trace.optimizer_s * k)


def _scheduler(run: Run, link: CollectiveLink) -> Scheduler:
    spec = run.spec
    if spec.scheduler == "window":
        return WindowScheduler(GLOO_THREADS if spec.comm == "gloo" else DLCP_IN_FLIGHT)
    assert run.job is not None
    b = _b(run.job)
    if spec.scheduler == "fusion":
        return create("fusion", bucket_bytes=max(4, int(DDP_BUCKET_BYTES / b)),
                      first_bucket_bytes=max(4, int(DDP_FIRST_BUCKET_BYTES / b)))
    options: dict[str, Any] = {"partition_bytes": max(4, int(PARTITION_BYTES / b)),
                               "cost": AlphaBeta(link.round_trip_s(_PROBE), 1.0 / link.port.bytes_per_s)}
    if spec.scheduler == "dlcp":
        options.update(front_loss_bound=spec.bound, back_loss_bound=spec.bound / 2,
                       merge_numel=max(0, int(spec.merge_bytes / b) // 4))  # as the trace worker merges
    elif link.collective == "ring":
        options["credit_bytes"] = 1 << 40  # the trace worker's ring P3 has no credit
    return create(spec.scheduler, **options)


_PROBE = Transfer(segments=(), nbytes=0)


def recovery_rounds(packets: int, p: float, comm: str, rng: np.random.Generator, draws: int) -> np.ndarray:
    """Timeouts a reliable message of ``packets`` waits, per draw: every round of
    retransmissions that still misses a packet costs one (the retransmitted packets are lost
    with the same ``p``). Kernel TCP: only its last three segments are exposed (fast
    retransmit repairs the others within a round trip)."""
    missing = np.full(draws, min(packets, TCP_DUPACKS) if comm in ("gloo", "tcp") else packets, dtype=np.int64)
    rounds = np.zeros(draws)
    for _ in range(MAX_ROUNDS):
        missing = rng.binomial(missing, p)
        if not missing.any():
            break
        rounds += missing > 0
    return rounds


def tail_repair_s(srtt_s: float, rto_s: float) -> float:
    """What kernel TCP's first loss at a message's tail costs: the tail loss probe after
    ``2 SRTT + 2 ms`` (never later than the timeout) and the round trip that repairs it."""
    return min(TLP_SRTTS * srtt_s + TLP_MIN_S, rto_s) + srtt_s


def predict_run(run: Run, job: ModelTrace, cost_s: float, *, host_iterations: Sequence[float] | None = None,
                baseline_available: float = 1.0, draws: int = DRAWS_PER_RUN, seed: int = 0,
                cpu_measure: str = DEFAULT_CPU_MEASURE, without: frozenset[str] = frozenset()) -> RunPrediction:
    """The model's iteration times for ``run`` with a host cost of ``cost_s`` per packet (module
    doc), its CPU share taken by ``cpu_measure`` (:data:`simulator.host_model.CPU_MEASURES`),
    the :data:`TERMS` named in ``without`` left out."""
    if not without <= set(TERMS):
        raise SimulatorError(f"unknown model terms {sorted(without - set(TERMS))}; known: {', '.join(TERMS)}")
    if run.scenario not in SCENARIOS:
        raise SimulatorError(f"scenario {run.scenario!r} is not modelled (known: {', '.join(SCENARIOS)})")
    spec = run.spec
    background, collective = SCENARIOS[run.scenario]
    tcp = spec.comm in ("gloo", "tcp")
    if run.compute and job.compute_s > 0:  # a replay of the compute the run recorded
        f = statistics.median(run.compute) / job.compute_s
        job = replace(job, layers=tuple(replace(l, forward_s=l.forward_s * f, backward_s=l.backward_s * f)
                                        for l in job.layers),
                      backward_tail_s=job.backward_tail_s * f, optimizer_s=job.optimizer_s * f)
    cpu, cpu_source = run_available(run, cpu_measure)
    shares = [1.0]
    if run.scenario in SHARED_UPLINKS and not spec.spraying:
        shares = [1.0, 0.5]  # apart, or on the same uplink
    rng = np.random.default_rng(seed)
    results = []
    for share in shares:
        port = port_model(port_pps=run.port_pps, queue_packets=run.queue_packets, background=background,
                          job_above_background=spec.above_background,
                          payload_bytes=TCP_PAYLOAD_BYTES if tcp else DLCP_PAYLOAD_BYTES)
        if collective == "star" and tcp and "incast-flows" not in without:
            port = split_fifo(port, run.ranks - 1)  # every worker's push into the server's port at once
        if collective == "ring" and tcp and "tcp-acks" not in without:
            port = with_own_acks(port, DELAYED_ACK_SEGMENTS)
        port = replace(port, share=port.share * share)
        tenants = run.tenant_share if run.tenant_share and "tenant-use" not in without else 1 / run.tenants
        background_pps = 0.0 if "background" in without else \
            run.background_pps + (0.0 if "background-acks" in without else run.background_ack_pps)
        code = 1.0 if tcp or "host-code" in without else HOST_CODE_CPU.get(run.host_code, 1.0)
        paced = not tcp and run.epoch in PACED_EPOCHS and "paced" not in without and cpu_source == "per process"
        pps = host_pps(cost_s * code, cpu, background_pps, 0.0 if paced else MAX_MIN_FLOOR) * tenants
        if collective == "star" and run.server_cost and not tcp and "server-cost" not in without:
            # The server's packets at its own recorded CPU per packet (the DLCP transport's
            # packet work runs in the process; kernel TCP's mostly in softirq, not charged to it).
            pps /= run.server_cost
        message_s = DLCP_MESSAGE_CPU_S * code / cpu if not tcp and run.epoch in MESSAGE_COST_EPOCHS \
            and "message-cost" not in without else 0.0
        if collective == "star" and run.server_cost and not tcp and "server-cost" not in without:
            message_s *= run.server_cost
        pulls = None if collective != "star" or "star-pulls" in without else \
            (run.ranks - 1) / LEAF_UPLINKS if spec.spraying else busiest_of(run.ranks - 1, LEAF_UPLINKS)
        link = CollectiveLink(port, run.ranks, collective, pps, pull_share=share if collective == "star" else None,
                              message_s=message_s, pull_flows=pulls, credit_on_send=tcp)
        result = simulate(job.layers, _scheduler(run, link), link, overlap_forward=spec.overlap == "layerwise",
                          forward_order=job.forward_order, backward_tail_s=job.backward_tail_s,
                          optimizer_s=job.optimizer_s)
        results.append((result, link))
    pick = rng.random(draws) < COLLISION_P if len(results) > 1 else np.zeros(draws, dtype=bool)
    base = np.where(pick, results[-1][0].iteration_s, results[0][0].iteration_s)
    exposed = max(0.0, results[0][0].iteration_s - job.compute_s)
    if host_iterations:  # the CNN's own time, replayed and stretched by the CPU it got here
        host = rng.choice(np.asarray(host_iterations, dtype=float), draws) * (baseline_available / cpu)
        base = host + (base - job.compute_s).clip(min=0.0)
    result, link = results[0]
    port = link.port
    # Timers run on the wall clock: the scaling rule stretches the job's compute, not them.
    rto = (run.rto_min_s or LINUX_RTO_MIN_S) if tcp else max(DLCP_MIN_RTO_S, 2 * link.round_trip_s(_PROBE))
    srtt = run.rr_s if run.rr_s is not None else 2 * port.step_latency_s
    first = tail_repair_s(srtt, rto) if tcp else rto
    share_reliable = 1.0 if spec.bound == 0 else 0.5  # the reduce stage does not wait
    recorded = run.loss_rate is not None and not tcp
    loss = run.loss_rate if recorded and run.loss_rate is not None else port.loss_rate
    if tcp and run.link_loss_rate is not None:  # a lossy link's drops per data packet, as recorded
        loss, recorded = max(loss, run.link_loss_rate), True
    extra = np.zeros(draws)
    if loss > 0:
        for rec in result.steady.transfers:
            n = max(1, round(link.packets(rec.transfer.nbytes) * share_reliable))
            rounds = recovery_rounds(n, loss, spec.comm, rng, draws)
            extra += np.where(rounds > 0, first + rto * (rounds - 1), 0.0)
    note = [f"s {1 - cpu:.2f}", f"host {cost_s * 1e6:,.0f} us/pkt" if cost_s else "host cost 0"]
    if loss > 0:
        source = "recorded" if recorded else "Mathis"
        probe = f", tail probe {first * 1e3:.0f} ms" if tcp else ""
        note.append(f"loss {loss:.2%}/pkt ({source}){probe}, timeout {rto * 1e3:.0f} ms")
    return RunPrediction(base + extra, exposed, "; ".join(note))


#: ``p3-threads``: a P3 ring's kernel-TCP ranks run a thread per partition in flight, and their
#: summed starvation (waits over runnable time, summed over threads) counts waits that do not hold
#: up packets moved in softirq: in the 10-pair sweep's ring scenarios 0.83-0.86 against DDP-style
#: TCP's 0.60-0.66 beside it, while their longest-waiting thread got 0.66-0.76 of a CPU against
#: DDP's 0.60-0.68 (medians per configuration). Their cost per packet on that scale is calibrated
#: apart (this family suffix), leave one sweep out as every family; a star's P3 (the server's
#: figure, 0.64 as DDP's) stays with kernel TCP.
P3_RING_FAMILY = " (p3 ring)"


def cost_family(run: Run, cpu_measure: str, without: frozenset[str] = frozenset()) -> str:
    """The host-cost family ``run`` is calibrated in: its :attr:`Run.family`, and with a CPU
    measure of :data:`simulator.host_model.CALIBRATED_APART`, whether its CPU share is the
    per-process record (a cost per packet on that scale is fitted only on runs that carry it);
    a P3 ring's kernel TCP on the summed figure apart (:data:`P3_RING_FAMILY`) unless
    ``p3-threads`` is in ``without``."""
    if cpu_measure in CALIBRATED_APART and run_available(run, cpu_measure)[1] == "per process":
        return f"{run.family} [per process]"
    if "p3-threads" not in without and run.spec.comm == "tcp" and run.spec.scheduler == "p3" \
            and SCENARIOS.get(run.scenario, ("", ""))[1] == "ring" and run_available(run, cpu_measure)[1] != "per process":
        return run.family + P3_RING_FAMILY
    return run.family


__all__ = ["DLCP_MESSAGE_CPU_S", "HOST_CODE_CPU", "LEAF_UPLINKS", "P3_RING_FAMILY", "PACED_EPOCHS", "SCENARIOS", "TERMS",
           "RunPrediction", "cost_family", "predict_run", "recovery_rounds", "scaled_trace", "tail_repair_s"]
