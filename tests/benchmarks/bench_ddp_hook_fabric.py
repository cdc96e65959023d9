"""DDP with the DLCP hook (bound 0, ring) against DDP over gloo on the training fabric, no background.

The trace experiment's fabric (``experiments/topologies/leafspine8_training.yaml``: two
leaves, two spines, native ``p4switch`` processes, ports of 20,000 packets/s, 51-packet
queues) boots in Mininet with its routes and the policy of the experiment's full DLCP
configuration (``trace_config("dlcp")``: layer priorities, magnitude dropping, ECN marks,
per-packet spraying) for job 1, the hook's job. Three ranks of ``ddp_hook_worker.py`` (the
loopback benchmark's worker), one process per Mininet host: rank 0 on h1 and rank 2 on h2
(leaf l1), rank 1 on h5 (leaf l2), so the ring's hops h1 -> h5 and h5 -> h2 cross the spines
(with two leaves, one hop of a three-rank ring stays on a leaf). Torch's gloo process group
rendezvouses at h1's address over each host's interface (``GLOO_SOCKET_IFNAME``); the hook's
``connect()`` advertises the address of that interface, never loopback, binds the DLCP port
(``hosts.wire.DLCP_PORT``: the switches parse DLCP only on it, so on any other port the
policy would see plain UDP), and its senders keep to the ports' 20,000 packets/s
(``port_rate``), as the trace experiment's DLCP ranks do.

Each run starts the three ranks anew; within it plain DDP (gloo) and DDP with the hook train
the same MLP, iterations interleaved. Each run's ratio of p50 iteration times (hook / gloo)
is printed with their median and range; the figures are the run of median ratio. CPU: rank 0's
process per iteration (both sides, from the worker); each rank's process over its timed iterations (CPU
over wall time, both sides together); each switch's busiest window of about 2 s (share of a
core and share of time waiting for one, ``/proc``). A switch above 0.85 of a core is
CPU-bound and its run's figure not the network's (printed).

``python -m tests.benchmarks.bench_ddp_hook_fabric --runs 3`` (root; takes
``/tmp/gradfabric-netns.lock`` unless a parent process holds it, e.g. ``flock``).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.benchmarks.figure import Figure

RANK_HOSTS = ("h1", "h5", "h2")  # rank order: the ring h1 -> h5 -> h2 -> h1
MB = 25.0
ITERATIONS = 6
WARMUP = 2
RUNS = 3
PORT_PPS = 20_000.0
JOB = 1  # the hook's job id (connect()'s default), the policy's job
RENDEZVOUS_PORT = 29_610
CPU_BOUND = 0.85
SAMPLE_S = 2.0  # seconds between the switches' CPU samples
LOCK = Path("/tmp/gradfabric-netns.lock")


def _ancestors() -> set[int]:
    pids, pid = set(), os.getpid()
    while pid > 1:
        pids.add(pid)
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return pids


def _held_by_parent(path: Path) -> bool:
    """Whether a process this one descends from holds a flock on `path` (``/proc/locks``)."""
    inode = path.stat().st_ino
    mine = _ancestors()
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5].rsplit(":", 1)[-1] == str(inode):
            if int(fields[4]) in mine:
                return True
    return False


@contextmanager
def netns_lock() -> Iterator[None]:
    """The namespace lock, unless a parent (``flock /tmp/gradfabric-netns.lock ...``) holds it."""
    LOCK.touch(exist_ok=True)
    if _held_by_parent(LOCK):
        yield
        return
    with open(LOCK) as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


@contextmanager
def training_fabric(work: Path, say: Any = print) -> Iterator[Any]:
    """The trace experiment's fabric, routed, with full DLCP's policy for job `JOB`; no background."""
    from experiments.trace_configs import TOPOLOGY8, trace_config
    from mininet_topos.launcher import Fabric, LaunchOptions
    from mininet_topos.programming import program_fabric

    policy = trace_config("dlcp").write_policy(work / "policies", [JOB])
    options = LaunchOptions(topo=TOPOLOGY8, workdir=work, prefix=f"d{uuid.uuid4().hex[:3]}", policy=None,
                            progress=say)
    with Fabric(options) as fabric:
        program_fabric(fabric.description_path, policy)
        yield fabric


def _switch_pids(fabric: Any) -> dict[str, int]:
    return {sw.name: sw.process.pid for sw in fabric.net.switches if getattr(sw, "process", None)}


def run_ranks(fabric: Any, work: Path, *, mb: float = MB, iterations: int = ITERATIONS, warmup: int = WARMUP,
              check: bool = False, collective: str = "ring", timeout_s: float = 900.0) -> dict[str, Any]:
    """One run of the worker's three ranks on `RANK_HOSTS`: rank 0's JSON (its per-iteration
    CPU as ``cpu_iterations``) plus ``hosts`` (each rank's host address), ``cpu`` /
    ``cpu_wait`` (share of a core, share of time waiting for one, per rank and switch) and
    ``seconds``."""
    from experiments.trace_sweep import process_figures, process_sample
    from gradfabric.paths import ROOT
    from hosts.wire import DLCP_PORT

    worker = Path(__file__).with_name("ddp_hook_worker.py")
    out = work / f"rank0-{uuid.uuid4().hex[:6]}.json"
    nodes = [fabric.node(h) for h in RANK_HOSTS]
    master = str(nodes[0].IP())
    port = RENDEZVOUS_PORT + int(uuid.uuid4().int % 300)
    procs, logs = [], []
    for rank, node in enumerate(nodes):
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(ROOT), "HOME": os.environ.get(
            "HOME", "/root"), "MASTER_ADDR": master, "MASTER_PORT": str(port), "RANK": str(rank),
            "LOCAL_RANK": "0", "WORLD_SIZE": str(len(nodes)), "GLOO_SOCKET_IFNAME": node.defaultIntf().name,
            "OMP_NUM_THREADS": "1"}
        argv = [sys.executable, str(worker), "--mb", str(mb), "--iterations", str(iterations), "--warmup",
                str(warmup), "--collective", collective, "--port-rate", str(PORT_PPS), "--port", str(DLCP_PORT),
                "--out", str(out)]
        if check:
            argv.append("--check")
        log = open(work / f"rank{rank}.log", "w")  # noqa: SIM115 (closed below)
        logs.append(log)
        procs.append(node.popen(argv, stdout=log, stderr=log, stdin=None, env=env, cwd=str(ROOT)))
    switches = _switch_pids(fabric)
    samples, started = [process_sample(switches)], time.monotonic()
    try:
        deadline = started + timeout_s
        while any(p.poll() is None for p in procs):
            failed = [r for r, p in enumerate(procs) if p.poll() not in (None, 0)]
            if failed or time.monotonic() > deadline:
                break
            time.sleep(0.5)
            if time.monotonic() - samples[-1]["t"] >= SAMPLE_S:
                samples.append(process_sample(switches))
        samples.append(process_sample(switches))
        seconds = time.monotonic() - started
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
        for log in logs:
            log.close()
    codes = [p.returncode for p in procs]
    if any(codes) or not out.exists():
        tails = "\n".join(f"rank {r} on {RANK_HOSTS[r]} (exit {c}):\n" + "\n".join(
            (work / f"rank{r}.log").read_text().strip().splitlines()[-12:]) for r, c in enumerate(codes))
        raise RuntimeError(f"the DDP hook ranks on the fabric failed or exceeded {timeout_s:.0f} s:\n{tails}")
    result: dict[str, Any] = json.loads(out.read_text())
    result["cpu_iterations"] = result.pop("cpu")  # rank 0's process, per iteration, by side
    result["hosts"] = [str(n.IP()) for n in nodes]
    cpu: dict[str, float] = {}
    wait: dict[str, float | None] = {}
    for r, rank in enumerate(result["ranks"]):  # each rank's process over its timed iterations
        used, wall = (sum(sum(v) for v in rank[k].values()) for k in ("cpu", "times"))
        cpu[f"rank{r}"] = round(used / wall, 3)
    for a, b in zip(samples, samples[1:]):  # each switch's busiest window of about SAMPLE_S
        shares, waits = process_figures(a, b)
        for name, share in shares.items():
            cpu[name] = max(cpu.get(name, 0.0), share)
        for name, w in waits.items():
            if w is not None:
                wait[name] = max(wait.get(name) or 0.0, w)
    result["cpu"], result["cpu_wait"] = cpu, wait
    result["seconds"] = round(seconds, 1)
    return result


def _drops_by_queue(before: dict[str, Any], after: dict[str, Any]) -> dict[str, int]:
    """Tail drops in the switches' traffic managers between two counter snapshots, by priority
    queue and reason, all ports (gloo's TCP is in queue 0, the hook's buckets in the policy's
    layer queues)."""
    by: dict[str, int] = {}
    for name, now in after.items():
        for (_, queue, reason), n in (now.minus(before[name]).queue_drops or {}).items():
            by[f"queue {queue} {reason}"] = by.get(f"queue {queue} {reason}", 0) + n
    return dict(sorted(by.items()))


def measure(runs: int = RUNS, mb: float = MB, iterations: int = ITERATIONS) -> list[dict[str, Any]]:
    """`runs` runs on one booted fabric (module doc); each run's result with its p50s and the
    fabric's counters over it (both sides together: queue drops, magnitude drops, the job's
    ECN marks, host qdisc drops, and the hosts' TCP retransmissions and timeouts, gloo's)."""
    from experiments.trace_sweep import TraceSite

    done = []
    with netns_lock(), tempfile.TemporaryDirectory(prefix="gf-ddp-fabric-") as tmp:
        work = Path(tmp)
        print(f"bench ddp_hook_fabric: booting the training fabric (load {os.getloadavg()[0]:.1f}) ...", flush=True)
        booting = time.monotonic()
        with training_fabric(work, say=lambda msg: None) as fabric:
            print(f"bench ddp_hook_fabric: fabric up in {time.monotonic() - booting:.0f} s", flush=True)
            site = TraceSite(fabric)
            for i in range(runs):
                before = site.snapshot()
                r = run_ranks(fabric, work, mb=mb, iterations=iterations)
                after = site.snapshot()
                f = site.figures(before, after, [JOB])
                r["switch"] = {k: f[k] for k in ("queue_drops", "magnitude_drops", "ecn_marks", "host_qdisc_drops",
                                                 "tcp_retransmitted", "tcp_timeouts")}
                r["switch"]["queue_drops_by_queue"] = _drops_by_queue(before["counters"], after["counters"])
                r["p50"] = {k: statistics.median(v) for k, v in r["times"].items()}
                r["load"] = os.getloadavg()[0]
                done.append(r)
                shares = ", ".join(f"{n} {c:.2f}" for n, c in r["cpu"].items())
                bound = [n for n, c in r["cpu"].items() if c > CPU_BOUND]
                print(f"bench ddp_hook_fabric: run {i + 1}: gloo p50 {r['p50']['gloo'] * 1e3:,.1f} ms, hook "
                      f"{r['p50']['hook'] * 1e3:,.1f} ms, {r['p50']['hook'] / r['p50']['gloo']:.3f}x; "
                      f"hook retransmitted {r['retransmitted']} of {r['packets']} packets (rank 0); load "
                      f"{r['load']:.1f}; {r['seconds']:.0f} s; advertised {[tuple(p) for p in r['peers']]}", flush=True)
                print(f"    CPU share of a core: {shares}; waiting: "
                      f"{', '.join(f'{n} {w:.2f}' for n, w in r['cpu_wait'].items() if w is not None)}"
                      + (f"; CPU-BOUND: {', '.join(bound)} (this run's figure is not the network's)" if bound
                         else ""), flush=True)
                print(f"    fabric over the run (both sides): {r['switch']}", flush=True)
    return done


def figures_of(done: list[dict[str, Any]]) -> list[Figure]:
    """The run of the median hook / gloo ratio (the lower middle one of an even count): its p50s
    and rank 0's median CPU per iteration, each against gloo's."""
    ratios = [r["p50"]["hook"] / r["p50"]["gloo"] for r in done]
    middle = done[sorted(range(len(done)), key=lambda i: ratios[i])[(len(done) - 1) // 2]]
    mb = done[0]["gradient_bytes"] / 2**20
    print(f"bench ddp_hook_fabric: hook / gloo p50 per run, median {statistics.median(ratios):.3f}x "
          f"({', '.join(f'{x:.3f}' for x in ratios)})", flush=True)
    what = (f"DLCP hook (ring, bound 0), {len(RANK_HOSTS)} ranks on 3 Mininet hosts, {mb:.0f} MB of gradients, "
            f"training fabric (20,000 packets/s ports), no background, the run of median ratio of {len(done)}")
    cpu = middle["cpu_iterations"]
    return [Figure(f"DDP iteration p50, {what}", middle["p50"]["hook"] * 1e3, "DDP over gloo, interleaved",
                   middle["p50"]["gloo"] * 1e3, "ms", higher_is_better=False),
            Figure(f"DDP CPU per iteration (rank 0's process, median), {what}", statistics.median(cpu["hook"]) * 1e3,
                   "DDP over gloo, interleaved", statistics.median(cpu["gloo"]) * 1e3, "ms", higher_is_better=False)]


def run(runs: int = RUNS, mb: float = MB, iterations: int = ITERATIONS) -> list[Figure]:
    from tests import netns

    if not netns.is_root():
        print("bench_ddp_hook_fabric: skipped (needs root for the Mininet fabric)")
        return []
    return figures_of(measure(runs, mb, iterations))


def main() -> None:
    parser = argparse.ArgumentParser(description="DDP with the DLCP hook against gloo on the training fabric")
    parser.add_argument("--runs", type=int, default=RUNS)
    parser.add_argument("--mb", type=float, default=MB, help="MB of float32 gradients (the MLP's size)")
    parser.add_argument("--iterations", type=int, default=ITERATIONS, help="timed iterations of each, per run")
    args = parser.parse_args()
    from tests.benchmarks.figure import print_table

    print_table(run(args.runs, args.mb, args.iterations))


if __name__ == "__main__":
    main()
