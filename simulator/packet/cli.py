"""`gradfabric sim packet`: the training experiment's scenarios on ns-3 (needs the ns3 extra).

This module only declares the command; ns-3 is loaded when it runs. Results go to ``--out``
(``runs/<run>.json`` in the fabric's raw-run format, ``results.md`` and ``results.json``)
and the table to stdout; ``--compare`` adds the fabric's figures from its result folders
(and, with ``--out``, ``validation.md``/``.csv``/``.png`` in ``sim validate``'s form).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from datetime import datetime, timezone
from dataclasses import replace
from pathlib import Path
from typing import Any

from gradfabric import paths

EXPERIMENT_TOPOLOGY = paths.ROOT / "experiments" / "topologies" / "leafspine_training.yaml"


def _names(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def add_packet_command(simsub: argparse._SubParsersAction) -> None:
    p = simsub.add_parser("packet", help="the experiment's scenarios on ns-3 (needs pip install '.[ns3]')")
    p.add_argument("--topo", default="experiment",
                   help="experiment (the fabric's leaf-spine file), a topology YAML, leafspine:L,S,H "
                        "(leaves, spines, hosts per leaf) or fattree:K (K even, 4..16)")
    p.add_argument("--scenarios", type=_names, default=["tcp"], help="comma-separated (tcp, udp, multitenant, incast)")
    p.add_argument("--configs", type=_names, default=["gloo", "qos", "dlcp"],
                   help="comma-separated (gloo, reliable, qos, priority, dropping, spraying, dlcp)")
    p.add_argument("--tile", action="store_true",
                   help="repeat each scenario over every group of six hosts of the topology")
    p.add_argument("--repetitions", type=int, default=1, help="runs per configuration (seed 1000 + r)")
    p.add_argument("--iterations", type=int, default=60, help="iterations per run")
    p.add_argument("--compute-ms", type=float, default=2.3,
                   help="CNN compute per iteration (the default workload; 2.3 ms: its CPU profile, "
                        "experiments/results/simulation/validation/cnn_digits.passes.json)")
    p.add_argument("--baseline", type=Path, default=None,
                   help="loopback runs of the same job (`experiment training --loopback`): each iteration "
                        "replays one of their iteration times as the hosts' own time (gloo's for gloo, the "
                        "DLCP hook's for the others)")
    p.add_argument("--trace", type=Path, default=None, help="a model trace instead of the CNN (H100 traces: with --model)")
    p.add_argument("--model", default=None, help="model of a pytorch-format trace (e.g. resnet50)")
    p.add_argument("--precision", default=None, help="precision of a pytorch-format trace (fp32 or bf16)")
    p.add_argument("--real-gbps", type=float, default=25.0, help="trace: the real link the scaling rule maps")
    p.add_argument("--k", type=float, default=None, help="trace: time multiplier (default: bytes divisor 1000)")
    p.add_argument("--bucket-mb", type=float, default=25.0, help="trace: DDP bucket size (real MiB)")
    p.add_argument("--ordering", choices=("wfbp", "p3", "dlcp"), default="wfbp",
                   help="host sending order of DLCP jobs (wfbp: as handed out, the fabric's hook)")
    p.add_argument("--warmup-ms", type=float, default=1000.0,
                   help="background alone before the jobs start (the fabric's runner: 1 s)")
    p.add_argument("--rto-min-ms", type=float, default=200.0, help="ns-3 TCP's minimum RTO (Linux: 200)")
    p.add_argument("--switch-cost-us", type=float, default=0.0,
                   help="the emulated fabric's software switch: time to forward one packet, one at a time ahead "
                        "of the egress queues (0: none, a hardware switch)")
    p.add_argument("--switch-backlog", type=int, default=1000, help="packets that may wait for --switch-cost-us")
    p.add_argument("--pacing-ms", type=float, default=0.0,
                   help="DLCP hosts pace in bursts this far apart at 2 (slow start) or 1.25 x cwnd / SRTT, as "
                        "the fabric's hosts do (0: no pacing)")
    p.add_argument("--pacing-whole-burst", action="store_true",
                   help="charge every chunk a whole pacing burst (the fabric's hosts until 2026-11-26)")
    p.add_argument("--background-tcp-mbps", type=float, default=0.0,
                   help="offer each long TCP flow at this rate (OnOff over TCP) instead of as fast as TCP goes "
                        "(0; the fabric's flows reached about 90 Mbit/s, bound by its hosts)")
    p.add_argument("--deliver-latency-us", type=float, default=0.0,
                   help="the emulated fabric's hosts: each packet delivered to a host arrives this much later")
    p.add_argument("--seed", type=int, default=1000, help="seed of the first repetition")
    p.add_argument("--compare", type=Path, action="append", default=None,
                   help="fabric result folder(s) (runs/*.json) to compare with; repeatable")
    p.add_argument("--out", type=Path, default=None, help="folder for runs/, results.md and results.json")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.add_argument("--no-pch", action="store_true",
                   help="do not build ns-3's precompiled header when it is missing (a cached one is still "
                        "used; GRADFABRIC_NS3_PCH=0 turns it off)")
    p.set_defaults(handler=_packet)
    from simulator.packet.trace_cli import add_trace_command

    add_trace_command(simsub)


def _topology(spec: str, yaml_default: Path):  # type: ignore[no-untyped-def]
    from simulator.packet.topology import from_spec

    return from_spec(spec, yaml_default)


def _workload(args: argparse.Namespace, port_bps: float):  # type: ignore[no-untyped-def]
    from gradfabric.traces import load_trace
    from simulator.packet.workload import Scale, cnn_workload, trace_workload

    if args.trace is None:
        return cnn_workload(args.compute_ms * 1e-3)
    trace = load_trace(args.trace, model=args.model, precision=args.precision)
    ratio = args.real_gbps * 1e9 / port_bps
    k = args.k if args.k is not None else ratio / 1000
    return trace_workload(trace, Scale(args.real_gbps, port_bps, k), args.bucket_mb)


def _baseline(folder: Path) -> dict[str, list[float]]:
    """Iteration times (every rank, the first iteration left out) of loopback runs, by transport."""
    from simulator.packet.report import load_runs
    from simulator.packet.scenarios import configuration

    samples: dict[str, list[float]] = {}
    for record in load_runs([folder]):
        comm = configuration(record["config"]).comm
        for job in record["jobs"].values():
            for rank in job["ranks"].values():
                samples.setdefault(comm, []).extend(float(r["iteration_s"]) for r in rank["records"][1:])
    return samples


def _packet(args: argparse.Namespace) -> int:
    from simulator.packet.report import comparison_markdown, keep_run, load_runs, summarise
    from simulator.packet.network import HostCosts
    from simulator.packet.run import RunSettings, run
    from simulator.packet.runtime import PacketSimulationError, load
    from simulator.packet.scenarios import configuration, scenario, tiled

    say = (lambda _m: None) if args.quiet else (lambda m: print(m, flush=True))
    topo = _topology(args.topo, EXPERIMENT_TOPOLOGY)
    workload = _workload(args, topo.port.rate_bps)
    host_time = _baseline(args.baseline) if args.baseline is not None else None
    costs = HostCosts(args.switch_cost_us * 1e-6, args.switch_backlog, args.deliver_latency_us * 1e-6)
    scenarios = [scenario(s) for s in args.scenarios]
    configs = [configuration(c) for c in args.configs]
    if args.tile:
        scenarios = [tiled(s, topo.hosts) for s in scenarios]
    t0 = time.monotonic()
    started = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    load_at_start = [round(x, 2) for x in os.getloadavg()]
    say(f"loading ns-3 ({workload.note}; topology {topo.name}: {len(topo.hosts)} hosts, "
        f"{len(topo.switches)} switches)")
    load(build_pch=not args.no_pch, say=say)
    say(f"ns-3 loaded in {time.monotonic() - t0:.1f} s")
    out = args.out
    if out is not None:
        (out / "runs").mkdir(parents=True, exist_ok=True)
    runs: list[dict[str, Any]] = []
    index = 0
    for sc in scenarios:
        for r in range(args.repetitions):
            n = len(configs)
            for j in range(n):
                config = configs[(r + j) % n]
                run_id = f"{index:03d}-{sc.name}-{config.name}-r{r}"
                say(f"[{index + 1}/{len(scenarios) * args.repetitions * n}] {run_id}")
                wl = workload
                if host_time is not None:
                    samples = host_time.get(config.comm)
                    if not samples:
                        raise PacketSimulationError(f"--baseline {args.baseline}: no runs of a {config.comm} "
                                                    f"configuration to replay for {config.name}")
                    wl = replace(workload, host_samples=tuple(samples))
                settings = RunSettings(wl, iterations=args.iterations, ordering=args.ordering, costs=costs,
                                       pacing_burst_s=args.pacing_ms * 1e-3, pacing_whole_burst=args.pacing_whole_burst,
                                       background_tcp_mbps=args.background_tcp_mbps,
                                       rto_min_s=args.rto_min_ms * 1e-3, seed=args.seed + r,
                                       job_start_s=args.warmup_ms * 1e-3,
                                       progress=None if args.quiet else (lambda m: print(m, flush=True)))
                record: dict[str, Any] = {"index": index, "scenario": sc.name, "config": config.name,
                                          "repetition": r, "seed": args.seed + r, "run_id": run_id}
                record.update(run(topo, sc, config, settings))
                keep_run(record, runs, out, say)
                index += 1
    simulated = summarise(runs)
    fabric = summarise(load_runs(args.compare)) if args.compare else None
    table = comparison_markdown(simulated, fabric)
    print(table, end="")
    if out is not None:
        command = "gradfabric sim packet " + " ".join(shlex.quote(a) for a in sys.argv[3:])
        stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        head = (f"# Packet simulation (ns-3) of the training experiment\n\nMade by `{command}` on {stamp}, "
                f"{(time.monotonic() - t0) / 60:.1f} min wall. Topology {topo.name} ({len(topo.hosts)} hosts); "
                f"workload: {workload.note}"
                f"{'' if args.baseline is None else f', host time replayed from {args.baseline}'}; host order {args.ordering}; TCP rto_min {args.rto_min_ms:g} ms; "
                f"switch forwarding {args.switch_cost_us:g} us per packet (backlog {args.switch_backlog}), "
                f"delivery latency {args.deliver_latency_us:g} us; pacing {args.pacing_ms:g} ms bursts"
                f"{' (a whole burst per chunk)' if args.pacing_whole_burst else ''}.\n\n")
        (out / "results.md").write_text(head + table)
        # "meta" as the experiment's sweeps write it, so `gradfabric experiment report` reads the folder.
        meta = {"command": command, "started": started, "load_at_start": load_at_start,
                "load_at_end": [round(x, 2) for x in os.getloadavg()], "cpus": os.cpu_count(),
                "site": f"ns-3 3.44, {topo.name}", "elapsed_s": round(time.monotonic() - t0, 1),
                "job": {"iterations": args.iterations, "batch_size": 32, "lr": 0.01}, "target_accuracy": 0.85,
                "repetitions": args.repetitions, "background": True,
                "sweep": {sc.name: [c.name for c in configs] for sc in scenarios},
                "scenarios": {sc.name: sc.description for sc in scenarios},
                "configurations": {c.name: f"{c.comm}, queues {c.queues}" for c in configs}}
        (out / "results.json").write_text(json.dumps(
            {"meta": meta, "command": command, "topology": topo.name, "hosts": len(topo.hosts),
             "simulated": {f"{k[0]}/{k[1]}": v for k, v in simulated.items()},
             "fabric": None if fabric is None else {f"{k[0]}/{k[1]}": v for k, v in fabric.items()}}, indent=1) + "\n")
        if args.compare:  # sim validate's table: every rank pooled, the ranking, a plot
            from simulator.packet.validation import write as write_validation

            write_validation(out, command, args.compare, [("ns-3", out)])
        print(f"wrote {out}", file=sys.stderr)
    return 0
