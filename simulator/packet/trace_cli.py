"""`gradfabric sim packet-trace`: the trace-driven experiment's scenarios on ns-3.

The job is the one a fabric sweep recorded (``--like DIR``: its model, precision, scaling and
iterations, read by :mod:`simulator.fabric_runs`); each run writes ``runs/<run>.json`` in the
fabric's raw-run format with the job as ``trace_job``, so ``sim validate`` and the packet
validation read ns-3's folder as a trace sweep; ``--compare`` (default: ``--like``) writes
``validation.md``/``.csv``/``.png`` in ``sim validate``'s form.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from dataclasses import asdict, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any


#: The trace runs' TCP ACKs every segment (RunSettings.tcp_delack_count: ns-3's delayed ACKs
#: stall under the lossy link). Its buffers stay ns-3's 128 KiB: with 4 MiB, a BulkSend flow's
#: 512-byte writes slow the simulation about tenfold.
TCP_DELACK_COUNT = 1
#: A bulk job's iterations: more than a run lasts (it stops with the measured jobs).
BULK_ITERATIONS = 1_000_000


def _names(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def add_trace_command(simsub: argparse._SubParsersAction) -> None:
    p = simsub.add_parser("packet-trace", help="the trace-driven experiment's scenarios on ns-3 (needs the ns3 extra)")
    p.add_argument("--like", type=Path, required=True,
                   help="a fabric trace sweep (runs/*.json, plan.json): the job to simulate")
    p.add_argument("--topo", default="experiment",
                   help="experiment (leafspine8_training.yaml), a topology YAML, or leafspine:L,S,H")
    p.add_argument("--scenarios", type=_names, default=["tcp"], help="comma-separated (tcp, incast, multitenant, hotspot, lossy-0.1, lossy-1)")
    p.add_argument("--configs", type=_names, default=["ddp-tcp", "ddp-tcp-qos", "p3-tcp", "dlcp"],
                   help="comma-separated trace configurations (ddp-tcp, ddp-tcp-qos, ddp-tcp-rto, p3-tcp, transport, "
                        "transport-qos, priority, dropping, spraying, dlcp)")
    p.add_argument("--tile", action="store_true", help="repeat each scenario over every group of eight hosts")
    p.add_argument("--repetitions", type=int, default=1, help="runs per configuration (seed + r)")
    p.add_argument("--iterations", type=int, default=None, help="iterations per run (default: the sweep's)")
    p.add_argument("--deliver-latency-us", type=float, default=0.0,
                   help="the emulated fabric's hosts: each packet delivered to a host arrives this much later")
    p.add_argument("--host-cpu", choices=("none", "bench", "run"), default="none",
                   help="the ranks' transport CPU per packet: none, the benchmarks' (hosts/README.md) or the "
                        "fabric runs' own record (simulator/packet/host_cpu.py)")
    p.add_argument("--host-cpu-from", type=Path, default=None,
                   help="the fabric sweep whose runs give the ranks' CPU and its availability (default: --like)")
    p.add_argument("--availability-from", type=Path, default=None,
                   help="a sweep whose runs record cpu_wait_share, for one whose runs do not")
    p.add_argument("--switch-cpu", choices=("none", "run", "each-run"), default="none",
                   help="the software switches' CPU: none, on/off as the fabric runs recorded their CPU and CPU "
                        "wait (run: the configuration's median; each-run: every switch its own, repetition r from "
                        "the configuration's r-th fabric run; simulator/packet/host_cpu.py)")
    p.add_argument("--switch-off-us", type=float, default=None,
                   help="how long a switch waits when off (default: the kernel's 1,500 us slice on 2 cores)")
    p.add_argument("--switch-off-wall", action="store_true",
                   help="with each-run: each switch off the share of the wall its busiest thread waited (1 - wait), "
                        "not of its runnable time (CPU / (CPU + wait))")
    p.add_argument("--switch-off-recorded", action="store_true",
                   help="with each-run: each switch off for its run's recorded mean wait per timeslice where "
                        "recorded (measured far shorter than the delay a switch adds: simulator/README.md)")
    p.add_argument("--switch-port-clock", action="store_true",
                   help="the switch ports paced as p4switch's traffic manager: a packet leaves at max(its enqueue "
                        "time, the port's free time), what fell due while the switch was off in a burst")
    p.add_argument("--tcp-buffers", choices=("ns3", "linux"), default="ns3",
                   help="ns-3 TCP's buffers: its 128 KiB, or this kernel's tcp_wmem/tcp_rmem maxima")
    p.add_argument("--tcp-variant", choices=("NewReno", "Cubic", "Bbr"), default="NewReno",
                   help="ns-3's TCP congestion control for every TCP socket (the fabric's hosts run BBR)")
    p.add_argument("--background-tcp-mbps", type=float, default=0.0,
                   help="offer each long TCP flow at this rate instead of as fast as ns-3's TCP goes (0)")
    p.add_argument("--port-pps", type=float, default=None,
                   help="the switch ports at this many full frames per second (default: the topology's); the job's "
                        "b kept, k = real / emulated capacity / b, and the timers the fabric scales by k "
                        "(DLCP's first probe timeout and reorder allowance) scaled by k over the sweep's k")
    p.add_argument("--rr-interval-ms", type=float, default=None,
                   help="request/response period (default: the experiment's 50 ms)")
    p.add_argument("--warmup-ms", type=float, default=1000.0, help="background alone before the job starts")
    p.add_argument("--seed", type=int, default=2000, help="seed of the first repetition")
    p.add_argument("--compare", type=Path, action="append", default=None,
                   help="fabric sweep folder(s) for the validation table (default: --like; none with --port-pps)")
    p.add_argument("--out", type=Path, default=None, help="folder for runs/, results.md/.json and validation.*")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.set_defaults(handler=_packet_trace)


def recorded_job(folder: Path) -> dict[str, Any]:
    """The trace job of a fabric sweep (its first ok run's, through the simulator's reader)."""
    from simulator.fabric_runs import load_runs
    from simulator.packet.runtime import PacketSimulationError

    for run in load_runs(folder):
        if run.job:
            return dict(run.job)
    raise PacketSimulationError(f"{folder}: no trace-driven run (a record with a job's model)")


def run_trace(topo: Any, scenario_name: str, config_name: str, job: dict[str, Any], *, iterations: int, seed: int,
              tile: bool = False, deliver_latency_s: float = 0.0, warmup_s: float = 1.0,
              background_tcp_mbps: float = 0.0, host_cpu: Any = None, switch: tuple[float, float] = (0.0, 0.0),
              switch_each: dict[str, tuple[float, float, float]] | None = None,
              tcp_buffers: tuple[int, int] | None = None, server_cpu: Any = None,
              timer_scale: float = 1.0, rr_interval_s: float | None = None, tcp_variant: str = "NewReno",
              port_clock: bool = False, progress: Any = None) -> dict[str, Any]:
    """One ns-3 run of a trace scenario and configuration; the raw-run record (without ids).
    ``switch``: the switches' (on, off) seconds (0: always on), ``switch_each`` named switches' own
    (on, off, availability); ``tcp_buffers``: TCP's (send,
    receive) bytes (None: ns-3's); ``server_cpu``: a parameter server's host CPU (None: the ranks');
    ``timer_scale``: the DLCP timers the fabric scales by k (first probe timeout, reorder allowance)
    times this; ``rr_interval_s``: the request/response period (None: the scenario's); ``port_clock``:
    the switch ports paced as p4switch's traffic manager (``HostCosts.switch_port_clock``)."""
    from simulator.packet.host_cpu import SWITCH_FORWARD_S, HostCpu
    from simulator.packet.network import HostCosts
    from simulator.packet.run import RunSettings, run
    from simulator.packet.runtime import PacketSimulationError
    from simulator.packet.scenarios import tiled
    from simulator.packet.trace_jobs import TraceJobRun, TraceJobSpec
    from simulator.packet.trace_scenarios import make_scheduler, scale_b, scaled_job, trace_configuration, trace_scenario
    from simulator.packet.workload import cnn_workload

    ts, config = trace_scenario(scenario_name), trace_configuration(config_name)
    scenario = tiled(ts.scenario, topo.hosts, group=8) if tile else ts.scenario
    if rr_interval_s is not None:
        scenario = replace(scenario, background=tuple(replace(f, interval_s=rr_interval_s) if f.kind == "rr" else f
                                                      for f in scenario.background))
    lossy = ts.lossy_links
    if tile and lossy:  # every copy's spine link towards its second leaf: s1 to the leaves of h5's
        lossy = tuple(sorted({("s1", _leaf_of(topo, j.hosts[1])) for j in scenario.jobs}))
    trace, b, k = scaled_job(job), scale_b(job), float(job["k"])
    factory = make_scheduler(config, b)
    settings = RunSettings(cnn_workload(), iterations=iterations, seed=seed, job_start_s=warmup_s,
                           rto_min_s=config.rto_min_s(k),
                           dlcp_initial_rto_s=RunSettings.dlcp_initial_rto_s * timer_scale,
                           dlcp_confirm_grace_s=RunSettings.dlcp_confirm_grace_s * timer_scale,
                           costs=HostCosts(deliver_latency_s=deliver_latency_s,
                                           switch_forward_s=SWITCH_FORWARD_S if switch[1] > 0 or any(
                                               w[1] > 0 for w in (switch_each or {}).values()) else 0.0,
                                           switch_on_s=switch[0], switch_off_s=switch[1],
                                           switch_each=tuple((n, w[0], w[1]) for n, w in (switch_each or {}).items()),
                                           switch_port_clock=port_clock),
                           **({"tcp_buffer_bytes": tcp_buffers[0], "tcp_rcv_buffer_bytes": tcp_buffers[1]}
                              if tcp_buffers else {}),
                           tcp_priority=5 if config.queues == "tcp-class" else 0, lossy_links=lossy,
                           link_loss=ts.link_loss, progress=progress, tcp_delack_count=TCP_DELACK_COUNT,
                           tcp_variant=tcp_variant,
                           background_tcp_mbps=background_tcp_mbps, host_cpu=host_cpu or HostCpu(),
                           host_cpu_of={j.hosts[0]: server_cpu for j in scenario.jobs
                                        if j.collective == "star" and server_cpu is not None},
                           extra={"job": f"{trace.name} {trace.precision}, {len(trace.layers)} layers, "
                                         f"{trace.numel:,} values, b = {b:.2f}, k = {k:g}",
                                  "scheduler": config.scheduler, "overlap": config.overlap})

    bulk_ids = set(ts.bulk_jobs) if not tile else set()
    if ts.bulk_jobs and tile:
        raise PacketSimulationError(f"scenario {scenario_name}'s bulk job is not tiled")
    bulk_trace = scaled_job({**job, "compute_scale": 0.0})

    def make_job(j: Any, transport: Any, schedule: Any, now: Any, messages: Any) -> TraceJobRun:
        bulk = j.job_id in bulk_ids
        spec = TraceJobSpec(j.job_id, j.hosts, bulk_trace if bulk else trace, factory, config.overlap,
                            BULK_ITERATIONS if bulk else iterations, grad_bound=config.grad_bound,
                            queues=config.queues, start_s=warmup_s, collective=j.collective, bulk=bulk)
        return TraceJobRun(spec, transport, schedule, now, messages)

    record = run(topo, scenario, config, settings, make_job=make_job)  # type: ignore[arg-type]
    for job_id in bulk_ids:  # as the fabric's records: the bulk job's ranks are not measured
        record["jobs"].pop(str(job_id), None)
    record["trace_job"] = {**job, "iterations": iterations, "comm": config.comm, "scheduler": config.scheduler,
                           "overlap": config.overlap, "b": b}
    record["rto_min_s"] = config.rto_min_s(k)
    if switch_each:
        record["switch_cpu_model"] = {n: {"on_s": w[0], "off_s": w[1], "availability": round(w[2], 4)}
                                      for n, w in switch_each.items()}
    record["link_loss"] = {"links": [list(x) for x in lossy], "probability": ts.link_loss}
    return record


def at_port_pps(job: dict[str, Any], port_pps: float) -> tuple[dict[str, Any], float]:
    """A recorded job moved to ports of ``port_pps`` full frames per second with its ``b`` kept
    (the same bytes per rank): ``k`` = real / emulated capacity / b; and the factor the
    fabric's k-scaled timers grow by (new k over the job's)."""
    from simulator.packet.runtime import PacketSimulationError
    from simulator.packet.trace_scenarios import FRAME_BYTES, scale_b

    b, k_before = scale_b(job), float(job["k"])
    try:
        real_bps = float(job["real_gbps"]) * 1e9
    except (KeyError, TypeError, ValueError):
        raise PacketSimulationError(f"a trace job's record lacks real_gbps: {job}") from None
    if port_pps <= 0:
        raise PacketSimulationError(f"--port-pps must be positive (got {port_pps})")
    k = round(real_bps / (port_pps * FRAME_BYTES * 8) / b, 9)
    return {**job, "port_pps": float(port_pps), "k": k, "b": b}, k / k_before


def _leaf_of(topo: Any, host: str) -> str:
    for link in topo.links:
        if host in (link.a, link.b):
            return link.b if link.a == host else link.a
    raise ValueError(host)


def _packet_trace(args: argparse.Namespace) -> int:
    from simulator.packet.report import comparison_markdown, keep_run, summarise
    from simulator.packet.report import load_runs as load_records
    from simulator.packet.runtime import load
    from simulator.packet.host_cpu import (SWITCH_OFF_S, host_cpu, linux_tcp_buffers, server_cpu, switch_run_schedules,
                                           switch_schedule)
    from simulator.packet.topology import at_port_pps as at_topology_pps
    from simulator.packet.topology import from_spec
    from simulator.packet.trace_scenarios import TOPOLOGY8, trace_configuration

    say = (lambda _m: None) if args.quiet else (lambda m: print(m, flush=True))
    topo = from_spec(args.topo, TOPOLOGY8)
    job = recorded_job(args.like)
    timer_scale = 1.0
    if args.port_pps is not None:
        job, timer_scale = at_port_pps(job, args.port_pps)
        topo = at_topology_pps(topo, args.port_pps)
        say(f"ports at {args.port_pps:g} packets/s: k = {job['k']:g}, b = {job['b']:.2f}, timers x {timer_scale:g}")
    cpus = {c: host_cpu(args.host_cpu, c, trace_configuration(c).comm, args.host_cpu_from or args.like,
                        args.availability_from) for c in args.configs}
    for c, cpu in cpus.items():
        if cpu.active:
            tx, rx, _, _ = cpu.wall_costs()
            say(f"host CPU of {c} ({cpu.source}): {cpu.tx_packet_s * 1e6:.2f} / {cpu.rx_packet_s * 1e6:.2f} us per "
                f"packet sent / received, availability {cpu.availability:.2f}: {tx * 1e6:.2f} / {rx * 1e6:.2f} us of wall")
    off_s = SWITCH_OFF_S if args.switch_off_us is None else args.switch_off_us * 1e-6
    if args.switch_cpu == "each-run" and args.tile:
        from simulator.packet.runtime import PacketSimulationError

        raise PacketSimulationError("--switch-cpu each-run matches the fabric's own switches: not with --tile")
    switches = {c: switch_schedule(c, args.host_cpu_from or args.like, off_s, args.availability_from) if args.switch_cpu == "run"
                else (0.0, 0.0, 1.0) for c in args.configs}
    for c, (on, off, a) in switches.items():
        if off > 0:
            say(f"switch CPU of {c}: availability {a:.2f}, on {on * 1e6:.0f} us / off {off * 1e6:.0f} us")
    servers = {c: server_cpu(args.host_cpu_from or args.like, c) if args.host_cpu == "run" else None
               for c in args.configs}
    for c, cpu in servers.items():
        if cpu is not None:
            say(f"parameter server of {c}: {cpu.tx_packet_s * 1e6:.2f} us per packet, availability {cpu.availability:.2f}")
    tcp_buffers = linux_tcp_buffers() if args.tcp_buffers == "linux" else None
    if tcp_buffers:
        say(f"TCP buffers: {tcp_buffers[0]:,} / {tcp_buffers[1]:,} bytes (send / receive, this kernel's maxima)")
    iterations = args.iterations or int(job.get("iterations") or 15)
    t0 = time.monotonic()
    started = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    load_at_start = [round(x, 2) for x in os.getloadavg()]
    say(f"loading ns-3 (job {job.get('model')} {job.get('precision')} of {args.like}; topology {topo.name}: "
        f"{len(topo.hosts)} hosts)")
    load(build_pch=True, say=say)
    out = args.out
    if out is not None:
        (out / "runs").mkdir(parents=True, exist_ok=True)
    runs: list[dict[str, Any]] = []
    total = len(args.scenarios) * args.repetitions * len(args.configs)
    index = 0
    for name in args.scenarios:
        for r in range(args.repetitions):
            for j in range(len(args.configs)):
                config = args.configs[(r + j) % len(args.configs)]
                run_id = f"{index:03d}-{name}-{config}-r{r}"
                say(f"[{index + 1}/{total}] {run_id}")
                record: dict[str, Any] = {"index": index, "scenario": name, "config": config, "repetition": r,
                                          "seed": args.seed + r, "run_id": run_id}
                record.update(run_trace(topo, name, config, job, iterations=iterations, seed=args.seed + r,
                                        tile=args.tile, deliver_latency_s=args.deliver_latency_us * 1e-6,
                                        warmup_s=args.warmup_ms * 1e-3,
                                        background_tcp_mbps=args.background_tcp_mbps, host_cpu=cpus[config],
                                        switch=switches[config][:2], tcp_buffers=tcp_buffers,
                                        switch_each=switch_run_schedules(
                                            config, args.host_cpu_from or args.like, r, topo.switches, off_s,
                                            recorded_off=args.switch_off_recorded, scenario=name,
                                            wall=args.switch_off_wall)
                                        if args.switch_cpu == "each-run" else None,
                                        server_cpu=servers[config], timer_scale=timer_scale,
                                        tcp_variant=args.tcp_variant, port_clock=args.switch_port_clock,
                                        rr_interval_s=None if args.rr_interval_ms is None else args.rr_interval_ms * 1e-3,
                                        progress=None if args.quiet else say))
                keep_run(record, runs, out, say)
                index += 1
    # At another port rate than --like's, nothing of the sweep's is comparable unless --compare names it.
    compare = args.compare or ([args.like] if args.port_pps is None else [])
    table = comparison_markdown(summarise(runs), summarise(load_records(compare)) if compare else None)
    print(table, end="")
    if out is not None:
        command = "gradfabric sim packet-trace " + " ".join(shlex.quote(a) for a in sys.argv[3:])
        minutes = (time.monotonic() - t0) / 60
        off_text = (f"its run's recorded mean wait per timeslice where recorded, else {off_s * 1e6:.0f} us"
                    if args.switch_off_recorded else f"{off_s * 1e6:.0f} us")
        head = (f"# Packet simulation (ns-3) of the trace-driven experiment\n\nMade by `{command}` on "
                f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M UTC}, {minutes:.1f} min wall. Topology {topo.name} "
                f"({len(topo.hosts)} hosts); job {runs[0]['simulation']['job'] if runs else '-'}, {iterations} "
                f"iterations; delivery latency {args.deliver_latency_us:g} us; long TCP flows "
                f"{f'offered at {args.background_tcp_mbps:g} Mbit/s' if args.background_tcp_mbps else 'greedy'}; ranks' "
                f"host CPU {args.host_cpu}"
                + "".join(f"; {c}: {x.tx_packet_s * 1e6:.2f} / {x.rx_packet_s * 1e6:.2f} us per packet sent / received, "
                          f"availability {x.availability:.2f}"
                          f" ({x.source})" for c, x in cpus.items() if x.active)
                + "".join(f"; {c}'s switches on {w[0] * 1e6:.0f} / off {w[1] * 1e6:.0f} us (availability {w[2]:.2f})"
                          for c, w in switches.items() if w[1] > 0)
                + (f"; each switch off {off_text} at a time, on as its own availability in the fabric "
                   f"run of the same repetition (each run's switch_cpu_model)" if args.switch_cpu == "each-run" else "")
                + (f"; TCP buffers {tcp_buffers[0]:,} / {tcp_buffers[1]:,} bytes" if tcp_buffers else "")
                + ("; switch ports on p4switch's clock (a backlog due while off leaves in a burst)"
                   if args.switch_port_clock else "")
                + f"; ns-3's TCP {args.tcp_variant}.\n\n")
        (out / "results.md").write_text(head + table)
        meta = {"command": command, "started": started, "load_at_start": load_at_start,
                "load_at_end": [round(x, 2) for x in os.getloadavg()], "cpus": os.cpu_count(),
                "site": f"ns-3 3.44, {topo.name}", "elapsed_s": round(time.monotonic() - t0, 1), "job": job,
                "repetitions": args.repetitions, "sweep": {s: list(args.configs) for s in args.scenarios},
                "host_cpu": {c: asdict(x) for c, x in cpus.items()},
                "switch_cpu": {c: {"on_s": w[0], "off_s": w[1], "availability": w[2]} for c, w in switches.items()},
                "tcp_buffers": list(tcp_buffers) if tcp_buffers else None,
                "server_cpu": {c: asdict(x) for c, x in servers.items() if x is not None}}
        (out / "results.json").write_text(json.dumps({"meta": meta, "hosts": len(topo.hosts)}, indent=1) + "\n")
        if not args.tile and compare:
            from simulator.packet.validation import write as write_validation

            write_validation(out, command, compare, [("ns-3", out)])
        print(f"wrote {out}", file=sys.stderr)
    return 0
