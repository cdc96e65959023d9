"""`gradfabric experiment training`: the sweep of scenarios x configurations x repetitions.

Plan (:func:`plan`): for each scenario, `repetitions` rounds; round r runs every
configuration once, the order rotated by r (interleaved, not one configuration after
another), with data-order seed ``1000 + r`` (the same seed for every configuration of a
round, a different one per round). Each run (:func:`run_once`): push the configuration's
policy, read the switch counters, start the background traffic, start every job's ranks
(:mod:`experiments.training.ddp_worker`), wait until all are up, start them together, wait
for the end, stop the traffic, read the counters again. A run that fails is recorded as
failed with its error and its ranks' logs (``logs/<run>/``), and the sweep goes on.

Every run is written to ``runs/<run>.json`` as it ends, and the summary (``results.md``,
``results.json``, plots) is rewritten after each run, into a new timestamped folder under
``build/results/training/`` (the command's default) unless ``--out`` names one. Progress lines go to stdout
(flushed, so they show when piped).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from experiments.configs import Configuration, select
from experiments.errors import ExperimentError
from experiments.scenarios import JobPlacement, Scenario, scenario
from experiments.sites import FabricSite, LoopbackSite, Site
from experiments.training.ddp_worker import DdpJob
from experiments.training.processes import RoleProcess
from gradfabric.paths import ROOT

RESULTS = ROOT / "experiments" / "results" / "training"
TOPOLOGY = ROOT / "experiments" / "topologies" / "leafspine_training.yaml"
NODE_PREFIX = "gx"  # node names of the experiment's fabric, apart from a `make run` fabric
SEED_BASE = 1000
TARGET = 0.85

#: What `--quick` runs: the TCP-background scenario, the reference, QoS isolation and full
#: DLCP, 5 repetitions each (about 12 minutes on 2 cores).
QUICK: dict[str, tuple[str, ...]] = {"tcp": ("gloo", "qos", "dlcp")}
#: The full sweep: every configuration where it has something to show.
FULL: dict[str, tuple[str, ...]] = {
    "tcp": ("gloo", "reliable", "qos", "priority", "dropping", "spraying", "dlcp"),
    "udp": ("gloo", "qos", "dlcp"),
    "multitenant": ("gloo", "qos", "spraying", "dlcp"),
    "incast": ("gloo", "qos", "dropping", "dlcp"),
}


@dataclass(frozen=True)
class PlannedRun:
    index: int
    scenario: str
    config: str
    repetition: int
    seed: int

    @property
    def run_id(self) -> str:
        return f"{self.index:03d}-{self.scenario}-{self.config}-r{self.repetition}"


def plan(sweep: dict[str, Sequence[str]], repetitions: int) -> list[PlannedRun]:
    """Interleaved runs (module doc): round r starts at configuration r mod n."""
    runs: list[PlannedRun] = []
    for name, configs in sweep.items():
        n = len(configs)
        for r in range(repetitions):
            for k in range(n):
                runs.append(PlannedRun(len(runs), name, configs[(r + k) % n], r, SEED_BASE + r))
    return runs


@dataclass
class SweepSettings:
    sweep: dict[str, tuple[str, ...]] = field(default_factory=lambda: dict(QUICK))
    repetitions: int = 5
    job: DdpJob = field(default_factory=DdpJob)
    target: float = TARGET
    out: Path | None = None
    topo: str | Path = TOPOLOGY
    loopback: bool = False
    background: bool = True
    job_timeout_s: float = 600.0
    command: str = ""

    def output_folder(self) -> Path:
        if self.out is not None:
            return self.out
        stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
        return RESULTS / stamp


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _job_argv(job: DdpJob, rank: int, world: int, master: str, bind: str, dlcp_port: int) -> list[str]:
    return [sys.executable, "-m", "experiments.training.ddp_worker", "--rank", str(rank), "--world", str(world),
            "--master", master, "--bind", bind, "--dlcp-port", str(dlcp_port), "--wait-go", *job.argv()]


def _job_for(settings: SweepSettings, config: Configuration, placement: JobPlacement, seed: int) -> DdpJob:
    return replace(settings.job, comm=config.comm, collective=placement.collective, grad_bound=config.grad_bound,
                   job_id=placement.job_id, data_seed=seed)


def run_once(site: Site, sc: Scenario, config: Configuration, run: PlannedRun, settings: SweepSettings,
             logs: Path, policies: Path, say: Callable[[str], None]) -> dict[str, Any]:
    """One run (module doc); raises on failure (the caller records it)."""
    t0 = time.monotonic()
    phases: dict[str, float] = {}

    def mark(name: str) -> None:
        phases[name] = round(time.monotonic() - t0, 2)

    site.apply(config, sc.job_ids, policies)
    before = site.counters()
    mark("policy_and_counters")
    roles: list[tuple[int, int, RoleProcess]] = []  # (job id, rank, process)
    progress = {"next": 50}

    def on_line(line: dict[str, Any]) -> None:
        if line.get("event") == "iteration" and line["iteration"] + 1 >= progress["next"]:
            progress["next"] += 50
            acc = line.get("accuracy")
            say(f"      iteration {line['iteration'] + 1}/{settings.job.iterations} at {line['wall_s']:.1f} s"
                + (f", accuracy {acc:.3f}" if acc is not None else ""))

    background: list[dict[str, Any]] = []
    started = time.monotonic()
    with site.background(list(sc.background) if settings.background else []) as traffic:
        try:
            if traffic is not None:
                time.sleep(1.0)  # queues fill, TCP flows leave slow start
            for placement in sc.jobs:
                job = _job_for(settings, config, placement, run.seed)
                world = len(placement.hosts)
                master = f"{site.ip(placement.hosts[0])}:{site.rendezvous_port(placement.job_id)}"
                for rank, host in enumerate(placement.hosts):
                    argv = _job_argv(job, rank, world, master, site.ip(host), site.dlcp_port)
                    watch = on_line if (placement.job_id == sc.jobs[0].job_id and rank == 0) else None
                    roles.append((placement.job_id, rank, RoleProcess(
                        f"job {placement.job_id} rank {rank}", argv, site.spawner(host),
                        logs / f"job{placement.job_id}-rank{rank}.log", on_line=watch)))
            for _, _, role in roles:
                role.wait_listening(180.0)
            mark("ranks_up")
            for _, _, role in roles:
                role.go()
            deadline = time.monotonic() + settings.job_timeout_s
            pending = [role for _, _, role in roles]
            while pending:
                for role in list(pending):
                    code = role.process.poll()
                    if code is None:
                        continue
                    if code != 0:
                        raise role.failure()
                    pending.remove(role)
                if time.monotonic() > deadline:
                    raise ExperimentError(f"the run did not finish within {settings.job_timeout_s:.0f} s "
                                          f"(still running: {', '.join(r.name for r in pending)})")
                time.sleep(0.1)
            mark("trained")
            if traffic is not None:
                background = [r.to_dict() for r in traffic.finish()]
        finally:
            for _, _, role in roles:
                role.stop()
    after = site.counters()
    mark("done")
    jobs: dict[str, Any] = {}
    for job_id, rank, role in roles:
        entry = jobs.setdefault(str(job_id), {"ranks": {}})
        done = role.done()
        entry["ranks"][str(rank)] = {
            "records": [{k: v for k, v in line.items() if k != "event"} for line in role.lines
                        if line.get("event") == "iteration"],
            "totals": done.get("totals", {}), "receive": done.get("receive", {})}
    return {"jobs": jobs, "background": background, "switch": site.switch_figures(before, after, sc.job_ids),
            "seconds": round(time.monotonic() - started, 2), "phases": phases}


def run_sweep(settings: SweepSettings, say: Callable[[str], None] | None = None) -> Path:
    """Run the whole sweep (module doc); returns the results folder."""
    from experiments.sweep_report import write_report

    say = say or (lambda msg: print(msg, flush=True))
    out = settings.output_folder()
    (out / "runs").mkdir(parents=True, exist_ok=True)
    runs = plan(settings.sweep, settings.repetitions)
    for name, configs in settings.sweep.items():
        scenario(name)
        select(list(configs))
    meta: dict[str, Any] = {
        "command": settings.command, "started": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "load_at_start": _load(), "cpus": os.cpu_count(), "sweep": {k: list(v) for k, v in settings.sweep.items()},
        "repetitions": settings.repetitions, "job": asdict(settings.job), "target_accuracy": settings.target,
        "site": "loopback" if settings.loopback else str(settings.topo), "background": settings.background,
        "scenarios": {n: scenario(n).description for n in settings.sweep},
        "configurations": {c.name: c.description for c in select(sorted({c for v in settings.sweep.values()
                                                                            for c in v}))},
    }
    say(f"sweep: {len(runs)} runs ({', '.join(f'{k}: {len(v)} configurations' for k, v in settings.sweep.items())}"
        f", {settings.repetitions} repetitions) into {out}")
    results: list[dict[str, Any]] = []
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="gradfabric-experiment-") as tmp:
        work = Path(tmp)
        if settings.loopback:
            _sweep(LoopbackSite(), runs, settings, out, work, meta, results, began, say, write_report)
        else:
            from mininet_topos.launcher import Fabric, LaunchOptions
            from mininet_topos.programming import program_fabric
            from mininet_topos.runner import teardown_on_signals

            options = LaunchOptions(topo=settings.topo, workdir=work, prefix=NODE_PREFIX, policy=None, progress=say)
            with teardown_on_signals(), Fabric(options) as fabric:  # SIGTERM/SIGHUP: fabric removed
                program_fabric(fabric.description_path, None)
                _sweep(FabricSite(fabric), runs, settings, out, work, meta, results, began, say, write_report)
    failed = sum(1 for r in results if r["status"] != "ok")
    say(f"sweep done in {(time.monotonic() - began) / 60:.1f} min: {len(results) - failed} ok, {failed} failed; "
        f"results in {out}")
    return out


def _sweep(site: Site, runs: list[PlannedRun], settings: SweepSettings, out: Path, work: Path,
           meta: dict[str, Any], results: list[dict[str, Any]], began: float, say: Callable[[str], None],
           write_report: Callable[..., None]) -> None:
    import json

    for run in runs:
        config = select([run.config])[0]
        sc = scenario(run.scenario)
        logs = work / "logs" / run.run_id
        say(f"[{run.index + 1:>3}/{len(runs)}] {run.scenario}/{run.config} repetition {run.repetition} "
            f"(seed {run.seed}), load {_load()[0]:.2f}")
        record: dict[str, Any] = {**asdict(run), "run_id": run.run_id, "load_before": _load(),
                                  "started": datetime.now(timezone.utc).strftime("%H:%M:%S")}
        try:
            record.update(run_once(site, sc, config, run, settings, logs, out / "policies", say))
            record["status"] = "ok"
        except Exception as exc:  # recorded, the sweep goes on
            record["status"] = "failed"
            record["error"] = f"{type(exc).__name__}: {exc}"
            record["traceback"] = traceback.format_exc(limit=6)
            kept = out / "logs" / run.run_id
            if logs.exists():
                shutil.copytree(logs, kept, dirs_exist_ok=True)
            record["logs"] = str(kept.relative_to(out))
        record["load_after"] = _load()
        (out / "runs" / f"{run.run_id}.json").write_text(json.dumps(record, indent=1) + "\n")
        results.append(record)
        say("      " + _outcome(record, settings.target))
        meta["elapsed_s"] = round(time.monotonic() - began, 1)
        meta["load_at_end"] = _load()
        write_report(results, meta, out)


def _outcome(record: dict[str, Any], target: float) -> str:
    if record["status"] != "ok":
        return f"FAILED: {record['error'].splitlines()[0][:200]} (logs in {record['logs']})"
    from experiments.stats import run_metrics

    m = run_metrics(record, target)
    tta = "target not reached" if m["time_to_target_s"] is None else f"target at {m['time_to_target_s']:.1f} s"
    return (f"ok in {record['seconds']:.0f} s: {tta}, iteration p50 {m['iteration_p50_s'] * 1e3:.0f} ms, "
            f"final accuracy {m['final_accuracy']:.3f}")
