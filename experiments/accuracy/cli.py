"""`gradfabric experiment accuracy`: the loss-mask replay sweep and its report."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_parser(kinds: argparse._SubParsersAction) -> None:
    from experiments.accuracy.sweep import SEEDS, SETTINGS, SYNTHETIC, TARGET_BPB

    p = kinds.add_parser(
        "accuracy", help="replay loss masks (synthetic or recorded) into data-parallel training of a byte model")
    p.add_argument("--conditions", default=",".join(SYNTHETIC),
                   help="comma-separated: none, random-P, smallest-P (P percent of packets), recorded-NAME "
                        f"(default: {','.join(SYNTHETIC)})")
    p.add_argument("--masks", action="append", default=[], metavar="NAME=FILE",
                   help="a recorded loss-mask file (experiments/README.md); adds condition recorded-NAME")
    p.add_argument("--trace", type=Path, default=None, metavar="DIR",
                   help="a trace sweep's folder (gradfabric experiment trace): adds condition counts-RUN for each "
                        "scenario's lossiest run (its per-layer zero-filled counts as smallest-magnitude packet "
                        "losses of one worker), with the run's iteration p50 as its iteration time")
    p.add_argument("--seeds", default=str(SEEDS),
                   help=f"N (seeds 0..N-1), A-B or a list; paired across conditions (default {SEEDS}); parts of "
                        "one sweep may run at once into the same folder with --resume")
    p.add_argument("--steps", type=int, default=SETTINGS.steps, help=f"iterations per run (default {SETTINGS.steps})")
    p.add_argument("--target", type=float, default=TARGET_BPB,
                   help=f"validation bits/byte to count iterations to (default {TARGET_BPB}, fixed before the sweep)")
    p.add_argument("--iteration-time", action="append", default=[], metavar="[CONDITION=]SECONDS",
                   help="measured iteration time for time to accuracy (from the training experiment's runs); "
                        "SECONDS alone applies to every condition")
    p.add_argument("--quick", action="store_true",
                   help="a smoke test: seeds 0 and 1, none/random-10/smallest-10, 60 iterations (no claims)")
    p.add_argument("--out", type=Path, default=None,
                   help="results folder (default: a new build/results/accuracy/<UTC time>/)")
    p.add_argument("--resume", type=Path, default=None, help="continue the sweep in this folder (skips finished runs)")
    p.add_argument("--report", type=Path, default=None,
                   help="only write the report of this folder (with --iteration-time: those times)")
    p.set_defaults(handler=run)


def default_out() -> Path:
    from datetime import datetime, timezone

    from gradfabric.paths import build_dir

    return build_dir() / "results" / "accuracy" / datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")


def run(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from experiments.accuracy.report import write_report
    from experiments.accuracy.sweep import (SETTINGS, SweepPlan, parse_iteration_times, parse_masks_args, parse_seeds,
                                            run_sweep)
    from experiments.errors import ExperimentError

    if args.report is not None:
        out = write_report(args.report, parse_iteration_times(args.iteration_time),
                           args.command_line)
        print(f"report in {out}", flush=True)
        return 0
    masks = parse_masks_args(args.masks)
    conditions = [c.strip() for c in args.conditions.split(",") if c.strip()]
    times = parse_iteration_times(args.iteration_time)
    if args.trace is not None:
        from experiments.accuracy.trace import lossiest_runs

        runs, run_times = lossiest_runs(args.trace)
        if not runs:
            raise ExperimentError(f"{args.trace}: no finished run zero-filled any value; nothing to replay")
        masks.update(runs)
        times = {**run_times, **times}
    conditions += [m for m in masks if m not in conditions]
    seeds, steps = parse_seeds(args.seeds), args.steps
    if args.quick:
        conditions = ["none", "random-10", "smallest-10"] + list(masks)
        seeds, steps = (0, 1), 60
    if "none" not in conditions:
        conditions.insert(0, "none")
    if steps < 1:
        raise ExperimentError("--steps must be positive")
    if args.resume is not None and args.out is not None and args.resume != args.out:
        raise ExperimentError("give --resume DIR or --out DIR, not both")
    out = args.resume or args.out or default_out()
    plan = SweepPlan(out=out, conditions=tuple(dict.fromkeys(conditions)), seeds=seeds,
                     settings=replace(SETTINGS, steps=steps), target=args.target, masks=masks,
                     iteration_time=times,
                     command=args.command_line)
    run_sweep(plan, resume=args.resume is not None)
    print(f"report in {write_report(out)}", flush=True)
    return 0
