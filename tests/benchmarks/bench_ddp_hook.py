"""DDP with the DLCP hook (bound 0) against plain DDP over gloo, same run.

``torchrun --nproc_per_node=3`` on loopback (``python -m torch.distributed.run``), one
process per rank running ``ddp_hook_worker.py``: an MLP of 32 MB of float32 gradients, in
pairs of one iteration of each whose order alternates; the figures are the median iteration
time of each (lower is better), for the ring and the star collective, and the CPU time rank
0's process used per iteration (all its threads: on a machine with fewer cores than busy
threads the wall time follows it). ``python -m tests.benchmarks.bench_ddp_hook --runs 5
--collectives ring`` repeats the comparison and prints each run's ratios, the median of the
per-pair ratios (hook over gloo, the two iterations of a pair run back to back, so a change of
load hits both alike) over all runs with its distribution-free 95% CI, and the median over
runs; ``--save DIR`` keeps each run's raw times.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.benchmarks.bench_transport import median_ci
from tests.benchmarks.figure import Figure

RANKS = 3
MB = 32.0
ITERATIONS = 12


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def measure(collective: str, iterations: int = ITERATIONS) -> dict:
    """Rank 0's iteration times (s) of gloo and the hook, and what the hook sent."""
    worker = Path(__file__).with_name("ddp_hook_worker.py")
    with tempfile.TemporaryDirectory(prefix="bench-ddp-") as tmp:
        out = Path(tmp) / "rank0.json"
        cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={RANKS}",
               f"--master_addr=127.0.0.1", f"--master_port={_free_port()}", str(worker), "--mb", str(MB),
               "--iterations", str(iterations), "--collective", collective, "--out", str(out)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
        if proc.returncode != 0 or not out.exists():
            tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-15:])
            raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{tail}")
        return json.loads(out.read_text())


def figures_of(collective: str, result: dict) -> list[Figure]:
    """The iteration time and CPU per iteration of one run, each against gloo's."""
    times, cpu = result["times"], result["cpu"]
    mb = result["gradient_bytes"] / 2**20
    what = f"DLCP hook ({collective}, bound 0), {RANKS} ranks, {mb:.0f} MB of gradients, loopback"
    return [Figure(f"DDP iteration p50, {what}", statistics.median(times["hook"]) * 1e3,
                   "DDP over gloo, interleaved", statistics.median(times["gloo"]) * 1e3, "ms",
                   higher_is_better=False),
            Figure(f"DDP CPU per iteration (rank 0's process, median), {what}", statistics.median(cpu["hook"]) * 1e3,
                   "DDP over gloo, interleaved", statistics.median(cpu["gloo"]) * 1e3, "ms",
                   higher_is_better=False)]


def pair_ratios(result: dict, what: str = "times") -> list[float]:
    """Hook over gloo of each pair of iterations (`what`: "times" or "cpu")."""
    return [h / g for g, h in zip(result[what]["gloo"], result[what]["hook"]) if g > 0]


def run(collectives: tuple[str, ...] = ("ring", "star")) -> list[Figure]:
    figures = []
    for collective in collectives:
        print(f"bench ddp_hook: torchrun, {RANKS} ranks, {MB:g} MB of gradients, {collective} ...", flush=True)
        figures += figures_of(collective, measure(collective))
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description="DDP with the DLCP hook against gloo, repeated")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--collectives", default="ring", help="comma-separated: ring, star")
    parser.add_argument("--save", type=Path, default=None, help="a folder for each run's raw times (JSON)")
    args = parser.parse_args()
    ratios: dict[str, list[float]] = {}
    pairs: dict[str, list[float]] = {}
    for i in range(args.runs):
        for collective in args.collectives.split(","):
            result = measure(collective)
            if args.save is not None:
                args.save.mkdir(parents=True, exist_ok=True)
                (args.save / f"run{i + 1}_{collective}.json").write_text(json.dumps(result))
            for f in figures_of(collective, result):
                ratios.setdefault(f.name, []).append(f.ratio)
                print(f"run {i + 1}: {f.name}: {f.value:,.1f} against {f.baseline:,.1f} {f.unit}, {f.ratio:.3f}x",
                      flush=True)
            for what in ("times", "cpu"):
                mine = pair_ratios(result, what)
                pairs.setdefault(f"{collective} {what}", []).extend(mine)
                mid, lo, hi = median_ci(mine)
                print(f"run {i + 1}: {collective}, {what} hook / gloo per pair: median {mid:.3f}x "
                      f"(95% CI {lo:.3f}-{hi:.3f}x, {len(mine)} pairs, {min(mine):.3f}-{max(mine):.3f}x)", flush=True)
    for name, values in ratios.items():
        mid, lo, hi = median_ci(values)
        print(f"{name}: median {mid:.3f}x over {len(values)} runs ({min(values):.3f}-{max(values):.3f}x; "
              f"95% CI {lo:.3f}-{hi:.3f}x)")
    for name, values in pairs.items():
        mid, lo, hi = median_ci(values)
        print(f"{name}, hook / gloo per pair over all runs: median {mid:.3f}x (95% CI {lo:.3f}-{hi:.3f}x, "
              f"{len(values)} pairs)")


if __name__ == "__main__":
    main()
