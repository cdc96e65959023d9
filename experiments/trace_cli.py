"""`gradfabric experiment trace`: the trace-driven sweep's command line (experiments/README.md)."""

from __future__ import annotations

import argparse
from datetime import datetime
from pathlib import Path

from experiments.errors import ExperimentError

#: Iterations per run of `--quick` (the full sweep: 15).
QUICK_ITERATIONS = 8


def add_trace_command(kinds: argparse._SubParsersAction) -> None:
    p = kinds.add_parser("trace", help="H100-traced jobs (ResNet-50) at a real link's scale: DDP/TCP, P3, "
                                       "each DLCP mechanism and full DLCP, paired runs on the 8-host leaf-spine")
    p.add_argument("--quick", action="store_true", help="the documented subset (under 20 min on an idle machine)")
    p.add_argument("--scenarios", default=None, help="comma-separated scenarios (default: the full sweep's)")
    p.add_argument("--configs", default=None, help="comma-separated configurations for every chosen scenario")
    p.add_argument("--repetitions", type=int, default=None, help="rounds of paired runs (default 3 quick, 10 full)")
    p.add_argument("--iterations", type=int, default=None, help="iterations per run (default 15)")
    p.add_argument("--real-gbps", type=float, default=None, help="the real link rate the run stands for (25 or 100)")
    p.add_argument("--k", type=float, default=None,
                   help="time multiplier of the scaling rule (default 8 at 20,000 packets/s; with --port-pps, the k "
                        "that keeps b at 20,000 packets/s' b)")
    p.add_argument("--port-pps", type=float, default=None,
                   help="every switch port's rate, packets/s (default 20,000); the DLCP ranks pace at it")
    p.add_argument("--model", default=None, help="trace model (default resnet50)")
    p.add_argument("--out", type=Path, default=None,
                   help="results folder (default: a new build/results/trace/<UTC time>/)")
    p.add_argument("--resume", type=Path, default=None,
                   help="a sweep folder to complete (its plan, its settings); with --repetitions N, extend its "
                        "plan to N rounds")
    p.add_argument("--starved-share", type=float, default=None,
                   help="mark a run cpu_starved (left out of the headline) when a process had a thread waiting "
                        "for a CPU more than this share of the wall time (default 0.5; 1: never)")
    p.add_argument("--no-round-after", default=None,
                   help="stopping rule: no new round starts at or after this time (ISO 8601 with a zone, e.g. "
                        "2026-11-27T18:30Z); the sweep ends with the rounds it completed (plan.json: stopped)")
    p.add_argument("--runs-end-by", default=None,
                   help="stopping rule: no new round starts unless a round as long as the longest so far ends by "
                        "this time (ISO 8601 with a zone)")
    p.set_defaults(handler=_experiment_trace)
    side = kinds.add_parser("trace-summary", help="one table and plot of the paired speed-ups of several trace "
                                                  "sweep folders (each folder's own figures)")
    side.add_argument("folders", type=Path, nargs="+",
                      help="folders of `experiment trace` (results.json, plan.json); A+B pools a sweep's parts run "
                           "in distinct rounds (their runs/*.json)")
    side.add_argument("--out", type=Path, default=None,
                      help="folder for summary.md and summary.png (default: a new build/results/trace/summary-<UTC "
                           "time>/)")
    side.add_argument("--against", default="",
                      help="comma-separated configurations: a paired p50 speed-up column over each (from the "
                           "folders' run records), e.g. the configurations of an ablation")
    side.set_defaults(handler=_experiment_trace_summary)


def _experiment_trace(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from experiments.trace_configs import FULL, QUICK, trace_config, trace_scenario
    from experiments.trace_sweep import TraceSettings, run_trace_sweep

    settings = TraceSettings(command=args.command_line, no_round_after=_utc_time(args.no_round_after, "--no-round-after"),
                             runs_end_by=_utc_time(args.runs_end_by, "--runs-end-by"))
    if args.resume is not None:
        settings.resume = args.resume
        if args.repetitions is not None:
            if args.repetitions < 1:
                raise ExperimentError("--repetitions must be at least 1")
            settings.extend_to = args.repetitions
        run_trace_sweep(settings)
        return 0
    base = QUICK if args.quick else FULL
    names = [n.strip() for n in args.scenarios.split(",")] if args.scenarios else list(base)
    configs = tuple(trace_config(c.strip()).name for c in args.configs.split(",")) if args.configs else None
    settings.sweep = {trace_scenario(n).name: configs or base.get(n, FULL[n]) for n in names}
    settings.repetitions = args.repetitions or (3 if args.quick else 10)
    if settings.repetitions < 1:
        raise ExperimentError("--repetitions must be at least 1")
    job = settings.job
    if args.quick and args.iterations is None:
        job = replace(job, iterations=QUICK_ITERATIONS)
    for name in ("iterations", "real_gbps", "k", "model"):
        if getattr(args, name) is not None:
            job = replace(job, **{name: getattr(args, name)})
    if args.port_pps is not None:
        from experiments.scaling import port_rule

        if args.port_pps <= 0:
            raise ExperimentError("--port-pps must be positive")
        rule = port_rule(job.real_gbps, args.port_pps, args.k)
        job = replace(job, port_pps=rule.port_pps, rate_pps=rule.port_pps, k=rule.k)
    settings.job = job
    settings.out = args.out
    if args.starved_share is not None:
        if not 0 < args.starved_share <= 1:
            raise ExperimentError("--starved-share must be in (0, 1]")
        settings.starved_share = args.starved_share
    run_trace_sweep(settings)
    return 0


def _utc_time(text: str | None, option: str) -> datetime | None:
    if text is None:
        return None
    try:
        when = datetime.fromisoformat(text)
    except ValueError as exc:
        raise ExperimentError(f"{option} {text!r}: not an ISO 8601 time ({exc})") from exc
    if when.tzinfo is None:
        raise ExperimentError(f"{option} {text!r}: give a zone (e.g. {text}Z)")
    return when


def _experiment_trace_summary(args: argparse.Namespace) -> int:
    from datetime import datetime, timezone

    from experiments.trace_summary import write_summary
    from gradfabric.paths import build_dir

    out = args.out or build_dir() / "results" / "trace" / f"summary-{datetime.now(timezone.utc):%Y%m%d-%H%M%S}"
    from experiments.trace_configs import trace_config

    against = tuple(trace_config(c).name for c in args.against.split(",") if c)  # an unknown name is refused
    rows = write_summary(list(args.folders), out, command=args.command_line, against=against)
    print(f"{len(rows)} rows from {len(args.folders)} folder(s): {out / 'summary.md'}, {out / 'summary.png'}")
    return 0
