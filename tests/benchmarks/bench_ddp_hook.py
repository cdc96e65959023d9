"""DDP with the DLCP hook (bound 0) against plain DDP over gloo, same run.

``torchrun --nproc_per_node=3`` on loopback (``python -m torch.distributed.run``), one
process per rank running ``ddp_hook_worker.py``: an MLP of 32 MB of float32 gradients,
iterations of the two interleaved; the figure is the median iteration time of each (lower
is better), for the ring and the star collective.
"""

from __future__ import annotations

import json
import socket
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

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


def run() -> list[Figure]:
    figures = []
    for collective in ("ring", "star"):
        print(f"bench ddp_hook: torchrun, {RANKS} ranks, {MB:g} MB of gradients, {collective} ...", flush=True)
        result = measure(collective)
        times = result["times"]
        figures.append(Figure(f"DDP iteration p50, DLCP hook ({collective}, bound 0), {RANKS} ranks, "
                              f"{result['gradient_bytes'] / 2**20:.0f} MB of gradients, loopback",
                              statistics.median(times["hook"]) * 1e3, "DDP over gloo, interleaved",
                              statistics.median(times["gloo"]) * 1e3, "ms", higher_is_better=False))
    return figures
