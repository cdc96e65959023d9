"""`gradfabric experiment trace`: trace-driven jobs on the 8-host leaf-spine, paired runs.

Plan (:func:`plan_runs`): ``repetitions`` rounds; in round r every scenario runs each of its
configurations once, in an order rotated by r (interleaved), all with seed ``2000 + r`` (the
gradient values and data of a pair are the same; pairs are (scenario, round)). The plan is
written to ``plan.json`` first; ``--resume DIR`` reads it back and skips the runs whose
``runs/<run>.json`` says ok, keeping the interleaving; with more rounds than the plan has
(``--resume DIR --repetitions N``), the plan is extended by rounds of the same order
(:func:`extend_plan`), so a sweep can be made in parts. A DLCP ring's run also writes its loss
masks, ``masks/<run>.txt.gz`` (:mod:`experiments.trace_masks`).

Each run (:func:`run_trace_once`): the configuration's policy, a flow-hash seed per switch and
the scenario's lossy links (:mod:`experiments.trace_links`, both recorded), the scaled
``rto_min`` on the TCP jobs' hosts, counters (:mod:`experiments.trace_site`: switch P4
counters and queue drops, hosts' qdisc drops, ``nstat`` TCP retransmissions and timeouts of
every host, CPU time of every switch process), the
background, the job's ranks (:mod:`experiments.training.trace_worker`) started together,
then the same counters again. Per-process CPU: each rank reports its own share of a core;
the switches' and the bulk ranks' come from ``/proc`` (the process and its descendants); a
run with any process above 0.85 of a core is marked ``cpu_bound``. Each process's wait for a
CPU is the share of wall time its longest-waiting thread was runnable but not running
(:func:`experiments.training.cpu.wait_share`); a run with any process above
``starved_share`` (default 0.5) is marked ``cpu_starved``. How long one wait lasts: the mean
wait per timeslice (ns) of each process's busiest thread
(:func:`experiments.training.cpu.wait_per_slice`; ``switch_wait_per_slice_ns``,
``other_wait_per_slice_ns``, each measured rank's ``cpu_wait_per_slice_ns``). Both marks leave a run out of the
headline figures (:mod:`experiments.trace_report`) while any run is left that is neither.
Records keep the earlier summed figure as ``starvation`` / ``max_starvation``.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from experiments.errors import ExperimentError
from experiments.runner import PlannedRun
from experiments.trace_configs import (QUICK, TOPOLOGY8, TraceConfig, TraceScenario, port_topology, scaled_background,
                                        trace_config, trace_scenario)
from experiments.training.processes import RoleProcess
from experiments.trace_site import (  # noqa: F401  (re-exported: the run's measurements)
    CPU_BOUND, NSTAT_KEYS, TraceSite, _waits, cpu_marks, process_figures, process_sample, queue_drops_by_queue,
    wait_slices)
from experiments.training.trace_worker import TraceJob

SEED_BASE = 2000
NODE_PREFIX = "gt"
#: A process that had a thread waiting for a CPU more than half the wall time (``/proc``
#: schedstat, :func:`experiments.training.cpu.wait_share`) ran on an overloaded machine: its
#: run is marked ``cpu_starved``.
STARVED = 0.5
BULK_ITERATIONS = 100_000


def plan_runs(sweep: dict[str, tuple[str, ...]], repetitions: int) -> list[PlannedRun]:
    """Interleaved, paired runs (module doc)."""
    runs: list[PlannedRun] = []
    for r in range(repetitions):
        for name, configs in sweep.items():
            n = len(configs)
            for k in range(n):
                runs.append(PlannedRun(len(runs), name, configs[(r + k) % n], r, SEED_BASE + r))
    return runs


def extend_plan(runs: list[PlannedRun], sweep: dict[str, tuple[str, ...]], repetitions: int) -> list[PlannedRun]:
    """`runs` (a plan of `sweep`) followed by the runs of its further rounds up to `repetitions`:
    the same as planning `repetitions` rounds at once, checked against the runs recorded."""
    full = plan_runs(sweep, repetitions)
    if repetitions < 1 + max((r.repetition for r in runs), default=-1):
        raise ExperimentError(f"the sweep already has {1 + max(r.repetition for r in runs)} rounds; "
                              f"--repetitions {repetitions} cannot shorten it")
    if full[:len(runs)] != runs:
        raise ExperimentError("the sweep's plan is not the interleaved plan of its settings; it cannot be extended")
    return full


@dataclass
class TraceSettings:
    sweep: dict[str, tuple[str, ...]] = field(default_factory=lambda: dict(QUICK))
    repetitions: int = 3
    job: TraceJob = field(default_factory=lambda: TraceJob(iterations=15))
    out: Path | None = None
    resume: Path | None = None
    topo: Path = TOPOLOGY8
    job_timeout_s: float = 300.0
    command: str = ""
    #: ``cpu_starved`` when a process waited for a CPU above this share of the wall time
    #: (STARVED; 1 never marks). Sweeps before the wait share (recorded runs without
    #: ``max_cpu_wait_share``) applied it to the summed figure, ``max_starvation``.
    starved_share: float = STARVED
    #: with ``resume``: extend the plan to this many rounds (:func:`extend_plan`)
    extend_to: int | None = None
    #: stopping rule: no round starts at or after this time, nor later than the longest round this
    #: invocation has made before ``runs_end_by`` (:func:`round_may_start`)
    no_round_after: datetime | None = None
    runs_end_by: datetime | None = None


def round_may_start(runs: list[PlannedRun], run: PlannedRun, now: datetime, no_round_after: datetime | None,
                    runs_end_by: datetime | None = None, longest_round_s: float = 0.0) -> bool:
    """Whether ``run`` (of the plan ``runs``) may start: the first run of a round does not start
    at or after ``no_round_after``, nor when a round as long as ``longest_round_s`` would end
    after ``runs_end_by``; a round begun is finished."""
    if next(r for r in runs if r.repetition == run.repetition) != run:
        return True
    if no_round_after is not None and now >= no_round_after:
        return False
    return runs_end_by is None or now + timedelta(seconds=longest_round_s) <= runs_end_by


def completed_rounds(runs: list[PlannedRun], ok_ids: set[str]) -> int:
    """Rounds of the plan (from the first) whose every run is recorded ok."""
    rounds = 0
    for r in sorted({run.repetition for run in runs}):
        if not all(run.run_id in ok_ids for run in runs if run.repetition == r):
            break
        rounds += 1
    return rounds


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def release_finished_jobs(roles: list[tuple[int, int, RoleProcess, bool]], released: set[int]) -> None:
    """The jobs' close barrier (experiments.training.trace_worker): once every rank of a job has
    printed its summary (or ended), let them all close; `released` holds the jobs let go."""
    jobs: dict[int, list[RoleProcess]] = {}
    for job_id, _rank, role, _measured in roles:
        jobs.setdefault(job_id, []).append(role)
    for job_id, members in jobs.items():
        if job_id not in released and all(r.process.poll() is not None or r.summarised() for r in members):
            released.add(job_id)
            for role in members:
                role.release()


def _argv(job: TraceJob, rank: int, peers: list[str]) -> list[str]:
    return [sys.executable, "-m", "experiments.training.trace_worker", "--rank", str(rank), "--peers", ",".join(peers),
            "--wait-go", *job.argv()]


def run_trace_once(site: TraceSite, sc: TraceScenario, config: TraceConfig, run: PlannedRun,
                   settings: TraceSettings, logs: Path, policies: Path, say: Callable[[str], None]) -> dict[str, Any]:
    """One run (module doc); raises on failure."""
    from hosts.wire import DLCP_PORT

    t0 = time.monotonic()
    phases: dict[str, float] = {}
    site.base.apply(config, sc.job_ids, policies)
    state = site.switch_state(sc, run)
    job_hosts = sorted({h for p in sc.jobs + sc.bulk for h in p.hosts})
    rto = settings.job.rule.rto_min_s(config.rto_min_real_s) if config.rto_min_real_s is not None else None
    site.set_rto_min(job_hosts, rto)
    roles: list[tuple[int, int, RoleProcess, bool]] = []  # job id, rank, process, measured
    try:
        for placement, measured in [(p, True) for p in sc.jobs] + [(p, False) for p in sc.bulk]:
            job = config.job(settings.job, placement, run.seed)
            if not measured:
                from dataclasses import replace

                job = replace(job, compute_scale=0.0, iterations=BULK_ITERATIONS)
            peers = [f"{site.base.ip(h)}:{DLCP_PORT}" for h in placement.hosts]
            for rank, host in enumerate(placement.hosts):
                roles.append((placement.job_id, rank, RoleProcess(
                    f"job {placement.job_id} rank {rank}", _argv(job, rank, peers), site.base.spawner(host),
                    logs / f"job{placement.job_id}-rank{rank}.log"), measured))
        for _, _, role, _ in roles:
            role.wait_listening(120.0)
        phases["ranks_up"] = round(time.monotonic() - t0, 2)
        with site.base.background(list(scaled_background(sc.background, settings.job))) as traffic:
            time.sleep(1.0)  # queues fill, TCP leaves slow start
            bulk = {f"job{j} rank{k}": role.process.pid for j, k, role, measured in roles if not measured}
            bulk_before = process_sample(bulk)
            before = site.snapshot()
            lost_before = site.link_drops(state["lossy_ports"])
            started = time.monotonic()
            for _, _, role, _ in roles:
                role.go()
            pending = [role for _, _, role, measured in roles if measured]
            deadline = time.monotonic() + settings.job_timeout_s
            released: set[int] = set()
            while pending:
                release_finished_jobs(roles, released)
                for role in list(pending):
                    code = role.process.poll()
                    if code is None:
                        continue
                    if code != 0:
                        raise role.failure()
                    pending.remove(role)
                for _, _, role, measured in roles:
                    if not measured and role.process.poll() not in (None, 0):
                        raise role.failure()
                if time.monotonic() > deadline:
                    raise ExperimentError(f"the run did not finish within {settings.job_timeout_s:.0f} s "
                                          f"(still running: {', '.join(r.name for r in pending)})")
                time.sleep(0.1)
            trained = time.monotonic() - started
            after = site.snapshot()
            bulk_after = process_sample(bulk)
            lost_after = site.link_drops(state["lossy_ports"])
            background = [r.to_dict() for r in traffic.finish()] if traffic is not None else []
    finally:
        for _, _, role, _ in roles:
            role.stop()
        if rto is not None:
            site.set_rto_min(job_hosts, None)
    jobs: dict[str, Any] = {}
    for job_id, rank, role, measured in roles:
        if not measured:
            continue
        done = role.done()
        jobs.setdefault(str(job_id), {"ranks": {}})["ranks"][str(rank)] = {
            "role": done.get("role", "worker"), "cpu_share": done.get("cpu_share"),
            "cpu_wait_share": done.get("cpu_wait_share"), "cpu_wait_per_slice_ns": done.get("cpu_wait_per_slice_ns"),
            "starvation": done.get("starvation"), "totals": done.get("totals", {}),
            "records": [{k: v for k, v in line.items() if k != "event"} for line in role.lines
                        if line.get("event") == "iteration"]}
    figures = site.figures(before, after, sc.job_ids)
    from experiments.trace_links import drops_between

    link_lost = drops_between(lost_before, lost_after)
    figures["link_loss_drops"] = sum(link_lost.values())
    figures["other_cpu"], figures["other_cpu_wait"] = process_figures(bulk_before, bulk_after)
    figures["other_wait_per_slice_ns"] = wait_slices(bulk_before, bulk_after)
    return {"jobs": jobs, "background": background, "switch": figures, "seconds": round(trained, 2),
            "phases": phases, **cpu_marks(jobs, figures, settings.starved_share), "rto_min_s": rto,
            "tcp_default_congestion": {h: site.default_congestion(h) for h in job_hosts},
            "hash_seeds": state["hash_seeds"],
            "link_loss": {"links": [list(x) for x in sc.lossy_links], "probability": sc.link_loss,
                          "drops_by_port": link_lost}}


def run_trace_sweep(settings: TraceSettings, say: Callable[[str], None] | None = None) -> Path:
    """The whole sweep, or the rest of one (``resume``); returns the results folder."""
    from experiments.trace_report import write_trace_report
    from experiments.training.grad_values import load_pool

    say = say or (lambda msg: print(msg, flush=True))
    from experiments import code_version
    from gradfabric.paths import ROOT

    code = code_version.snapshot(ROOT)
    if code.dirty:
        say(f"note: uncommitted changes in {', '.join(code.dirty)} (recorded in plan.json)")
    if settings.resume is not None:
        out = settings.resume
        meta = json.loads((out / "plan.json").read_text())
        began = meta.get("code", {}).get("fingerprint")
        if began is not None and began != code.fingerprint:
            raise code_version.CodeChangedError(
                f"{out}: the source files differ from those the sweep began with (fingerprint {code.fingerprint}, "
                f"plan.json {began}, commit then {meta['code'].get('commit')}); a sweep's runs must all run the "
                f"same code: start a new sweep")
        runs = [PlannedRun(**r) for r in meta["runs"]]
        if settings.extend_to is not None and settings.extend_to != meta["repetitions"]:
            runs = extend_plan(runs, {k: tuple(v) for k, v in meta["sweep"].items()}, settings.extend_to)
            meta.setdefault("extended", []).append({"at": _now(), "from": meta["repetitions"],
                                                    "to": settings.extend_to})
            meta["repetitions"], meta["runs"] = settings.extend_to, [asdict(r) for r in runs]
        settings.job = TraceJob(**meta["job"])
        meta.pop("stopped", None)
        settings.starved_share = float(meta.get("starved_share", STARVED))
        meta.setdefault("resumed", []).append({"at": _now(), "command": settings.command, "load": _load(),
                                               "code": code.to_dict()})
    else:
        out = settings.out or _default_out()
        runs = plan_runs(settings.sweep, settings.repetitions)
        for name, configs in settings.sweep.items():
            trace_scenario(name)
            for c in configs:
                trace_config(c)
        meta = {"command": settings.command, "started": _now(), "load_at_start": _load(), "cpus": os.cpu_count(),
                "sweep": {k: list(v) for k, v in settings.sweep.items()}, "repetitions": settings.repetitions,
                "job": asdict(settings.job), "scale": settings.job.rule.to_dict(),
                "timers": scaled_timers(settings.job), "topology": str(settings.topo),
                "runs": [asdict(r) for r in runs], "cpu_bound_share": CPU_BOUND,
                "starved_share": settings.starved_share, "code": code.to_dict(),
                "tcp_congestion": tcp_congestion_plan(settings.sweep)}
    (out / "runs").mkdir(parents=True, exist_ok=True)
    topo = port_topology(settings.topo, settings.job.port_pps, out)
    meta["topology"] = str(topo)
    (out / "plan.json").write_text(json.dumps(meta, indent=1) + "\n")
    say(settings.job.rule.describe())
    say("timers: " + ", ".join(f"{k} {v * 1e3:g} ms" for k, v in scaled_timers(settings.job).items()))
    load_pool()  # made once here (PyTorch), read by every rank
    from experiments.trace_masks import write_run_masks
    from experiments.training.trace_worker import scaled_model

    tensor_values = [layer.numel for layer in scaled_model(settings.job).layers]
    done_ids = {p.stem for p in (out / "runs").glob("*.json") if json.loads(p.read_text()).get("status") == "ok"}
    todo = [r for r in runs if r.run_id not in done_ids]
    say(f"trace sweep: {len(runs)} runs, {len(runs) - len(todo)} already recorded, {len(todo)} to run, into {out}")
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="gradfabric-trace-") as tmp:
        work = Path(tmp)
        from mininet_topos.launcher import Fabric, LaunchOptions
        from mininet_topos.programming import program_fabric
        from mininet_topos.runner import teardown_on_signals

        options = LaunchOptions(topo=topo, workdir=work, prefix=NODE_PREFIX, policy=None, progress=say)
        with teardown_on_signals(), Fabric(options) as fabric:  # SIGTERM/SIGHUP: fabric removed
            program_fabric(fabric.description_path, None)
            site = TraceSite(fabric)
            longest_round_s, round_began = 0.0, time.monotonic()
            for n, run in enumerate(todo):
                if n and todo[n - 1].repetition != run.repetition:
                    longest_round_s = max(longest_round_s, time.monotonic() - round_began)
                if n == 0 or todo[n - 1].repetition != run.repetition:
                    round_began = time.monotonic()
                if not round_may_start(runs, run, datetime.now(timezone.utc), settings.no_round_after,
                                       settings.runs_end_by, longest_round_s):
                    _stop(out, meta, runs, settings, longest_round_s, say)
                    break
                logs = work / "logs" / run.run_id
                say(f"[{n + 1:>3}/{len(todo)}] {run.run_id} (seed {run.seed}), load {_load()[0]:.2f}")
                code_version.check_unchanged(ROOT, code, f"before run {run.run_id}")
                record: dict[str, Any] = {**asdict(run), "run_id": run.run_id, "load_before": _load(),
                                          "started": _now(), "code": code.fingerprint}
                try:
                    record.update(run_trace_once(site, trace_scenario(run.scenario), trace_config(run.config), run,
                                                 settings, logs, out / "policies", say))
                    record["status"] = "ok"
                except Exception as exc:  # recorded; the sweep goes on
                    record.update(status="failed", error=f"{type(exc).__name__}: {exc}",
                                  traceback=traceback.format_exc(limit=6))
                    if logs.exists():
                        shutil.copytree(logs, out / "logs" / run.run_id, dirs_exist_ok=True)
                record["load_after"] = _load()
                (out / "runs" / f"{run.run_id}.json").write_text(json.dumps(record, indent=1) + "\n")
                if record["status"] == "ok":
                    write_run_masks(out, record, tensor_values)
                say("      " + _outcome(record))
                meta["elapsed_s"] = round(meta.get("elapsed_s", 0) + time.monotonic() - began, 1)
                began = time.monotonic()
                meta["load_at_end"] = _load()
                (out / "plan.json").write_text(json.dumps(meta, indent=1) + "\n")
                write_trace_report(out)
    say(f"trace sweep done: results in {out}")
    return out


def _stop(out: Path, meta: dict[str, Any], runs: list[PlannedRun], settings: TraceSettings,
          longest_round_s: float, say: Callable[[str], None]) -> None:
    """The stopping rule ended the sweep: plan.json and results.md say so and how many rounds ran."""
    from experiments.trace_report import write_trace_report

    ok = {p.stem for p in (out / "runs").glob("*.json") if json.loads(p.read_text()).get("status") == "ok"}
    when = {k: getattr(settings, k).isoformat() for k in ("no_round_after", "runs_end_by") if getattr(settings, k)}
    meta["stopped"] = {"at": _now(), **when, "longest_round_s": round(longest_round_s, 1),
                       "rounds_completed": completed_rounds(runs, ok)}
    (out / "plan.json").write_text(json.dumps(meta, indent=1) + "\n")
    write_trace_report(out)
    say(f"stopping rule ({', '.join(f'{k} {v}' for k, v in when.items())}): "
        f"{meta['stopped']['rounds_completed']} rounds completed")


def scaled_timers(job: TraceJob) -> dict[str, float]:
    """Every time the run sets from k (s): the DLCP endpoint's fixed timers, the tuned TCP
    ``rto_min`` (ddp-tcp-rto) and the request/response period."""
    from experiments.scaling import TUNED_RTO_MIN_S, transport_timers
    from experiments.scenarios import RR_INTERVAL

    from experiments.scaling import time_factor

    return {**transport_timers(job.k), "tuned_rto_min": job.rule.rto_min_s(TUNED_RTO_MIN_S),
            "rr_interval": RR_INTERVAL * time_factor(job.k)}


def tcp_congestion_plan(sweep: dict[str, tuple[str, ...]]) -> dict[str, Any]:
    """What the plan's TCP configurations run: the machine's default congestion control (the
    fabric's hosts inherit it) and each TCP configuration's (its own, or that default)."""
    sysctl = Path("/proc/sys/net/ipv4/tcp_congestion_control")
    default = sysctl.read_text().strip() if sysctl.exists() else "unknown"
    configs = {c: trace_config(c) for names in sweep.values() for c in names}
    return {"host_default": default, "configs": {name: c.congestion or f"host default ({default})"
                                                 for name, c in configs.items() if c.comm == "tcp"}}


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _default_out() -> Path:
    from gradfabric.paths import build_dir

    return build_dir() / "results" / "trace" / datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")


def _outcome(record: dict[str, Any]) -> str:
    from experiments.trace_report import error_line, run_figures

    if record["status"] != "ok":
        return f"FAILED: {error_line(record['error'], 400)}"

    m = run_figures(record)
    return (f"ok in {record['seconds']:.0f} s: iteration p50 {m['p50_s'] * 1e3:.0f} ms, p99 {m['p99_s'] * 1e3:.0f} ms, "
            f"ratio {m['ratio']:.2f}, loss {m['loss_share']:.4f}, max CPU {record['max_cpu_share']:.2f}"
            + (" (CPU-BOUND)" if record["cpu_bound"] else "")
            + (f", max CPU wait {record['max_cpu_wait_share']:.2f}" if record.get("max_cpu_wait_share") is not None
               else "")
            + (" (CPU-STARVED)" if record.get("cpu_starved") else ""))
