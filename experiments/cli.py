"""`gradfabric train` (a training job over DLCP) and `gradfabric experiment training`."""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from experiments.errors import ExperimentError

if TYPE_CHECKING:
    from experiments.training.loop import TrainConfig
    from experiments.training.options import TransportOptions

DEFAULT_TARGET = 0.93


def default_out(prefix: str) -> Path:
    """Where results go without ``--out``: a new folder under build/ (untracked), never into
    the committed ``experiments/results/``."""
    from datetime import datetime, timezone

    from gradfabric.paths import build_dir

    return build_dir() / "results" / "training" / (prefix + datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S"))


def add_commands(sub: argparse._SubParsersAction) -> None:
    train = sub.add_parser("train", help="data-parallel training (PyTorch, digits) through the DLCP host agents")
    train.add_argument("--role", choices=("all", "ps", "worker"), default="all",
                       help="all: a parameter server and --workers workers on loopback (default); "
                            "ps or worker: one role of a job spread over hosts")
    train.add_argument("--workers", type=int, default=2, help="number of workers of the job")
    train.add_argument("--bind", default="127.0.0.1:0", help="IP:PORT this role's DLCP socket binds")
    train.add_argument("--ps", help="worker: IP:PORT of the parameter server")
    train.add_argument("--rank", type=int, help="worker: its rank 0..workers-1")
    train.add_argument("--wait-go", action="store_true",
                       help="worker: wait for a line on stdin before the first iteration")
    train.add_argument("--threads", action="store_true", help="all: roles as threads of this process")
    train.add_argument("--target", type=float, default=DEFAULT_TARGET, help="test accuracy to time (default 0.93)")
    train.add_argument("--json", type=Path, default=None, help="all: write the run's figures to this file")
    train.add_argument("--logs", type=Path, default=None, help="all: folder for the roles' logs (default: a temp dir)")
    add_job_args(train)
    add_transport_args(train)
    train.set_defaults(handler=_train)

    experiment = sub.add_parser("experiment", help="experiments on the emulated fabric")
    kinds = experiment.add_subparsers(dest="experiment_command", metavar="EXPERIMENT")
    kinds.required = True
    training = kinds.add_parser(
        "training", help="DDP/gloo, QoS isolation, each DLCP mechanism and full DLCP under contention, repeated")
    training.add_argument("--quick", action="store_true",
                          help="the documented subset: scenario tcp, configurations gloo, qos, dlcp (about 12 min)")
    training.add_argument("--scenarios", default=None,
                          help="comma-separated scenarios (default: all of the full sweep; see experiments/README.md)")
    training.add_argument("--configs", default=None,
                          help="comma-separated configurations for every chosen scenario (default: the sweep's)")
    training.add_argument("--repetitions", type=int, default=5, help="runs per configuration (default 5)")
    training.add_argument("--iterations", type=int, default=None, help="iterations per run (default 60)")
    training.add_argument("--target", type=float, default=None, help="test accuracy to time (default 0.85)")
    training.add_argument("--topo", default=None,
                          help="topology name or YAML file (default experiments/topologies/leafspine_training.yaml)")
    training.add_argument("--loopback", action="store_true",
                          help="run the jobs on loopback, without fabric, policies or background (a smoke test)")
    training.add_argument("--no-background", action="store_true", help="run without background traffic")
    training.add_argument("--out", type=Path, default=None,
                          help="results folder (default: a new build/results/training/<UTC time>/; "
                               "committing results is a step of its own)")
    training.set_defaults(handler=_experiment_training)
    pooled = kinds.add_parser("report", help="one report over the runs of several sweep folders (pooled repetitions)")
    pooled.add_argument("folders", type=Path, nargs="+", help="results folders of `experiment training`")
    pooled.add_argument("--out", type=Path, default=None,
                        help="folder for the pooled results.md, results.json, plots "
                             "(default: a new build/results/training/pooled-<UTC time>/)")
    pooled.set_defaults(handler=_experiment_report)
    from experiments.trace_cli import add_trace_command

    add_trace_command(kinds)
    from experiments.accuracy.cli import add_parser as add_accuracy_command

    add_accuracy_command(kinds)


def add_job_args(p: argparse.ArgumentParser) -> None:
    from experiments.training.loop import TrainConfig

    d = TrainConfig()
    p.add_argument("--iterations", type=int, default=d.iterations, help="training iterations")
    p.add_argument("--batch-size", type=int, default=d.batch_size, help="samples per worker and iteration")
    p.add_argument("--lr", type=float, default=d.lr, help="SGD learning rate (applied by the server)")
    p.add_argument("--seed", type=int, default=d.seed, help="seed of the model and data order")
    p.add_argument("--hidden", default=",".join(map(str, d.hidden)), help="hidden layer widths, comma-separated")
    p.add_argument("--eval-every", type=int, default=d.eval_every, help="iterations between test evaluations")


def add_transport_args(p: argparse.ArgumentParser) -> None:
    from experiments.training.options import TransportOptions

    d = TransportOptions()
    p.add_argument("--scheduler", default=d.scheduler, help="gradient scheduler: dlcp, wfbp, ... (default dlcp)")
    p.add_argument("--grad-bound", type=float, default=d.grad_bound, help="tolerated loss of a gradient message")
    p.add_argument("--param-bound", type=float, default=d.param_bound, help="tolerated loss of a parameter message")
    p.add_argument("--front-loss-bound", type=float, default=d.front_loss_bound,
                   help="share of a front layer's gradient the network may lose")
    p.add_argument("--back-loss-bound", type=float, default=d.back_loss_bound,
                   help="share of a back layer's gradient the network may lose")
    p.add_argument("--job", type=int, default=d.job_id, help="DLCP job id")
    p.add_argument("--rate", type=float, default=d.rate_pps,
                   help="ceiling of each host's pacing rate (packets/s); the congestion window finds the rate below it")
    p.add_argument("--timeout", type=float, default=d.timeout_s, help="seconds to wait for a message")


def job_config(args: argparse.Namespace) -> TrainConfig:
    from experiments.training.loop import TrainConfig

    try:
        hidden = tuple(int(h) for h in args.hidden.split(",") if h.strip())
    except ValueError:
        raise ExperimentError(f"--hidden must be comma-separated integers, got {args.hidden!r}") from None
    if args.iterations < 1 or args.batch_size < 1 or args.eval_every < 1:
        raise ExperimentError("--iterations, --batch-size and --eval-every must be positive")
    return TrainConfig(iterations=args.iterations, batch_size=args.batch_size, lr=args.lr, seed=args.seed,
                       hidden=hidden, eval_every=args.eval_every)


def transport_options(args: argparse.Namespace) -> TransportOptions:
    from experiments.training.options import TransportOptions
    from hosts.schedulers import available

    if args.scheduler not in available():
        raise ExperimentError(f"unknown scheduler {args.scheduler!r}; choose one of {', '.join(available())}")
    for name in ("grad_bound", "param_bound", "front_loss_bound", "back_loss_bound"):
        if not 0.0 <= getattr(args, name) < 1.0:
            raise ExperimentError(f"--{name.replace('_', '-')} must be in [0, 1)")
    return TransportOptions(scheduler=args.scheduler, grad_bound=args.grad_bound, param_bound=args.param_bound,
                            front_loss_bound=args.front_loss_bound, back_loss_bound=args.back_loss_bound,
                            job_id=args.job, rate_pps=args.rate, timeout_s=args.timeout)


def _train(args: argparse.Namespace) -> int:
    from hosts.cli import parse_address

    config, options = job_config(args), transport_options(args)
    if args.workers < 1:
        raise ExperimentError("--workers must be at least 1")
    bind = parse_address(args.bind, default_port=0)
    if args.role == "ps":
        from experiments.training.roles import json_lines, run_server

        run_server(bind, args.workers, config, options, json_lines())
        return 0
    if args.role == "worker":
        from experiments.training.roles import json_lines, run_worker

        if args.ps is None or args.rank is None:
            raise ExperimentError("--role worker needs --ps IP:PORT and --rank")
        if not 0 <= args.rank < args.workers:
            raise ExperimentError(f"--rank {args.rank} is not in 0..{args.workers - 1}")
        import sys

        run_worker(bind, parse_address(args.ps), args.rank, args.workers, config, options, json_lines(),
                   wait_go=sys.stdin if args.wait_go else None)
        return 0
    return _train_all(args, config, options)


def _train_all(args: argparse.Namespace, config: TrainConfig, options: TransportOptions) -> int:
    from experiments.metrics import summarize
    from experiments.progress import TrainingProgress
    from experiments.report import print_summary

    with TrainingProgress(config.iterations) as progress:
        task = progress.add("train", f"{args.workers} workers, {options.scheduler}")
        if args.threads:
            from experiments.training.loopback import run_loopback

            outcome = run_loopback(config, options, args.workers).outcome()
            progress.advance(task, config.iterations, None)
        else:
            from experiments.training.processes import Placement, local_spawner, run_job

            placement = Placement(ps=(local_spawner, "127.0.0.1"),
                                  workers=[(local_spawner, "127.0.0.1")] * args.workers)
            with tempfile.TemporaryDirectory(prefix="gradfabric-train-") as tmp:
                logs = args.logs or Path(tmp)
                outcome = run_job(config, options, placement, logs,
                                  on_record=lambda r: progress.advance(task, 1, r.get("accuracy")))
    metrics = summarize("train", outcome, args.target)
    print_summary([metrics])
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(metrics.to_dict(), indent=2) + "\n")
    return 0


def _experiment_training(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from experiments.configs import select
    from experiments.runner import FULL, QUICK, TARGET, SweepSettings, run_sweep
    from experiments.scenarios import scenario

    base = QUICK if args.quick else FULL
    names = [n.strip() for n in args.scenarios.split(",")] if args.scenarios else list(base)
    for n in names:
        scenario(n)
    configs = tuple(c.name for c in select(args.configs)) if args.configs else None
    sweep = {n: configs or base.get(n, FULL.get(n, ())) for n in names}
    if args.repetitions < 1:
        raise ExperimentError("--repetitions must be at least 1")
    settings = SweepSettings(sweep=sweep, repetitions=args.repetitions, out=args.out or default_out(""),
                             target=args.target if args.target is not None else TARGET,
                             loopback=args.loopback, background=not args.no_background,
                             command=args.command_line)
    if args.iterations:
        settings.job = replace(settings.job, iterations=args.iterations)
    if args.topo:
        settings.topo = Path(args.topo) if args.topo.endswith((".yaml", ".yml")) else args.topo
    run_sweep(settings)
    return 0


def _experiment_report(args: argparse.Namespace) -> int:
    from experiments.sweep_report import pool

    out = pool(args.folders, args.out or default_out("pooled-"), args.command_line)
    print(f"pooled report in {out}", flush=True)
    return 0
