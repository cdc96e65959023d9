"""`gradfabric experiment training`: one fabric, every configuration, one results folder.

Boots the fabric once (routes only), then for each configuration: pushes its policy,
starts the background traffic, runs the training job (parameter server on h1, workers on
h3 and h4, the DLCP port 19600 on every host so the switches see every job packet as
DLCP), stops the traffic and reads the switch counters. Finally writes
``results.md``, ``results.json``, ``accuracy.png``, ``iteration_cdf.png`` and the policies
used under the results folder.

Placement on the leaf-spine fabric (h1, h2 on leaf l1; h3, h4 on leaf l2; two spines)::

    PS h1 <- gradients -- workers h3, h4   (across the spines; incast on l1's port to h1)
    background: UDP h2 -> h1 (same egress port as the gradients) and TCP h2 -> h3
                (across one spine: shares a leaf uplink with the parameters when their
                flow hashes onto the same spine, and h3's port with worker 0's parameters)
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from rich.progress import TaskID

from experiments.background import BackgroundTraffic, Flow
from experiments.configs import JOB_ID, Configuration, select
from experiments.errors import ExperimentError
from experiments.metrics import RunMetrics, summarize
from experiments.progress import TrainingProgress
from experiments.report import markdown_table, plot, print_summary, speedups, write_json
from experiments.training.loop import TrainConfig
from experiments.training.processes import Placement, Spawner, run_job
from gradfabric.paths import ROOT
from hosts.wire import DLCP_PORT

RESULTS = ROOT / "experiments" / "results" / "training"
TOPOLOGY = ROOT / "experiments" / "topologies" / "leafspine_training.yaml"
PS_HOST = "h1"
WORKER_HOSTS = ("h3", "h4")
BACKGROUND_SOURCE = "h2"
NODE_PREFIX = "gx"  # node names of the experiment's fabric, apart from a `make run` fabric


@dataclass
class ExperimentSettings:
    topo: str | Path = TOPOLOGY
    configs: list[Configuration] = field(default_factory=lambda: select(None))
    workers: int = 2
    train: TrainConfig = field(default_factory=TrainConfig)
    target: float = 0.93
    background: list[Flow] = field(default_factory=list)
    out: Path = RESULTS
    workdir: Path | None = None
    timeout_s: float = 30.0
    command: str = ""

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> ExperimentSettings:
        if not 1 <= args.workers <= len(WORKER_HOSTS):
            raise ExperimentError(f"--workers must be 1..{len(WORKER_HOSTS)} on this placement")
        udp = args.background_udp_mbps if args.background_udp_mbps is not None else DEFAULT_UDP_MBPS
        return cls(topo=args.topo or TOPOLOGY, configs=select(args.configs), workers=args.workers,
                   train=TrainConfig(**({"iterations": args.iterations} if args.iterations else {})),
                   target=args.target,
                   background=[] if args.no_background else background_flows(udp),
                   out=args.out or RESULTS, workdir=args.workdir,
                   command=shlex.join(["gradfabric", *sys.argv[1:]]) if sys.argv[1:] else "gradfabric experiment training")


#: Rate of the UDP background flow: 256-byte datagrams at 2.2 Mbit/s are about 1,070
#: packets/s, a little more than a port of the experiment's fabric forwards (1,000
#: packets/s): that queue stays full.
DEFAULT_UDP_MBPS = 2.2
UDP_PACKET_BYTES = 256


def background_flows(udp_mbps: float) -> list[Flow]:
    return [Flow(BACKGROUND_SOURCE, PS_HOST, "udp", udp_mbps, UDP_PACKET_BYTES),
            Flow(BACKGROUND_SOURCE, WORKER_HOSTS[0], "tcp")]


class FabricHosts:
    """The fabric's Mininet hosts as spawners (training roles) and :class:`Hosts` (iperf3)."""

    def __init__(self, fabric: Any) -> None:
        self.fabric = fabric

    def popen(self, host: str, argv: list[str]) -> subprocess.Popen:
        return self.fabric.node(host).popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                            stdin=subprocess.DEVNULL, text=True)

    def ip(self, host: str) -> str:
        return str(self.fabric.node(host).IP())

    def spawner(self, host: str) -> Spawner:
        node = self.fabric.node(host)
        return lambda argv, stderr: node.popen(argv, stdout=subprocess.PIPE, stderr=stderr, stdin=subprocess.PIPE)


def apply_policy(description: Path, policy: Path) -> None:
    from gradfabric import cli

    code = cli.main(["policy", "apply", str(policy), "--fabric", str(description), "--timeout", "20"])
    if code != 0:
        raise ExperimentError(f"`gradfabric policy apply {policy}` failed (exit {code}); its message is above")


def run_training_experiment(settings: ExperimentSettings) -> int:
    """Run every configuration (module doc); returns the exit code."""
    from mininet_topos.launcher import Fabric, LaunchOptions
    from mininet_topos.programming import program_fabric

    from experiments import switch_counters

    out = settings.out
    out.mkdir(parents=True, exist_ok=True)
    policies = out / "policies"
    started = time.monotonic()
    metrics: list[RunMetrics] = []
    extras: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="gradfabric-experiment-") as tmp:
        workdir = settings.workdir or Path(tmp)
        logs = workdir / "logs" / "training"
        with TrainingProgress(settings.train.iterations) as progress:
            tasks = {c.name: progress.add(c.name, "waiting") for c in settings.configs}
            options = LaunchOptions(topo=settings.topo, workdir=workdir, prefix=NODE_PREFIX, policy=None,
                                    progress=progress.log)
            with Fabric(options) as fabric:
                program_fabric(fabric.description_path, None)
                hosts = FabricHosts(fabric)
                for config in settings.configs:
                    task = tasks[config.name]
                    progress.note(task, "policy")
                    apply_policy(fabric.description_path, config.write_policy(policies))
                    before = switch_counters.snapshot(fabric.description_path)
                    placement = Placement(
                        ps=(hosts.spawner(PS_HOST), hosts.ip(PS_HOST)),
                        workers=[(hosts.spawner(h), hosts.ip(h)) for h in WORKER_HOSTS[:settings.workers]],
                        ps_port=DLCP_PORT, worker_port=DLCP_PORT)
                    progress.note(task, "starting")
                    with ExitStack() as traffic:

                        def start_background(t: TaskID = task) -> None:
                            if settings.background:
                                progress.note(t, "background traffic")
                                traffic.enter_context(BackgroundTraffic(hosts, settings.background))
                                time.sleep(1.0)  # queues fill
                            progress.note(t, "training")

                        outcome = run_job(settings.train, config.transport(settings.timeout_s), placement,
                                          logs / config.name, on_ready=start_background,
                                          on_record=lambda r, t=task: progress.advance(t, 1, r.get("accuracy")))
                    after = switch_counters.snapshot(fabric.description_path)
                    figures = switch_counters.difference(before, after, JOB_ID)
                    run = summarize(config.name, outcome, settings.target)
                    metrics.append(run)
                    extras[config.name] = {"switch": asdict(figures), "server": outcome.server.get("server", {}),
                                           "transport": config.transport(settings.timeout_s).to_dict(),
                                           "description": config.description}
                    progress.note(task, f"done, {_tta(run)}")
                    write_results(settings, metrics, extras, time.monotonic() - started)
    print_summary(metrics)
    print(f"results in {out}", flush=True)
    return 0


def _shown(topo: str | Path) -> str:
    """A topology name, or its file relative to the repository when it is inside it."""
    if isinstance(topo, Path):
        try:
            return str(topo.resolve().relative_to(ROOT))
        except ValueError:
            return str(topo)
    return topo


def _tta(run: RunMetrics) -> str:
    return "target not reached" if run.time_to_target_s is None else f"target at {run.time_to_target_s:.1f} s"


def write_results(settings: ExperimentSettings, metrics: list[RunMetrics], extras: dict[str, dict[str, Any]],
                  seconds: float) -> None:
    out = settings.out
    meta = {
        "command": settings.command, "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "topology": _shown(settings.topo), "workers": settings.workers, "target_accuracy": settings.target,
        "train": asdict(settings.train), "background": [f.describe() for f in settings.background],
        "placement": {"ps": PS_HOST, "workers": list(WORKER_HOSTS[:settings.workers])},
        "duration_s": round(seconds, 1), "per_configuration": extras,
    }
    write_json(metrics, out / "results.json", meta)
    plot(metrics, out)
    ratios = speedups(metrics, "baseline")
    switch_rows = "\n".join(
        f"| {m.name} | {extras[m.name]['switch']['magnitude_drops']} | {extras[m.name]['switch']['ecn_marks']} | "
        f"{'-' if ratios.get(m.name) is None else f'{ratios[m.name]:.2f}x'} | "
        f"{m.final_accuracy - next((b.final_accuracy for b in metrics if b.name == 'baseline'), m.final_accuracy):+.3f} |"
        for m in metrics)
    text = f"""# Training over the fabric: time to accuracy with and without DLCP

Made by `{settings.command}` on {meta['date']} ({seconds / 60:.1f} min).
Topology `{meta['topology']}`; parameter server on {PS_HOST}, workers on {', '.join(WORKER_HOSTS[:settings.workers])};
MLP {settings.train.hidden} on the digits data, {settings.train.iterations} iterations, batch {settings.train.batch_size}
per worker, learning rate {settings.train.lr}; target test accuracy {settings.target}.
Background traffic: {'; '.join(meta['background']) or 'none'}.

{markdown_table(metrics)}

| configuration | magnitude drops (switch) | ECN marks (switch) | speed-up to target vs baseline | final accuracy vs baseline |
|---|---:|---:|---:|---:|
{switch_rows}

Iteration times leave out the first iteration (warm-up). Packets are DLCP data packets
(pushes and pulls); *dropped* counts those no receiver got (queue overflow and magnitude
drops), *retransmitted* those sent again after a probe. Plots: `accuracy.png` (test
accuracy against wall time), `iteration_cdf.png`. Policies pushed: `policies/`. What the
figures show and why: `experiments/README.md`, section Results.
"""
    (out / "results.md").write_text(text)
