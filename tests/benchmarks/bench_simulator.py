"""Simulator speed: ResNet-50, every scheduler, 4 to 2048 workers (issue 9 asks < 10 s).

Baseline of the same run: the same sweep with WFBP alone, the simplest scheduler, so the
ratio says what the other six schedulers cost on top.
"""

from __future__ import annotations

import time

from hosts.schedulers import AlphaBeta
from simulator.cli import DEFAULT_TRACES
from simulator.cluster import Network
from simulator.reproduce import ALL_SCHEDULERS, IB56_ALPHA, IB56_BETA, SCALING_WORKERS
from simulator.sweep import ClusterSpec, sweep
from simulator.traces import load_trace
from tests.benchmarks.figure import Figure


def _seconds(schedulers: tuple[str, ...], baseline: str) -> float:
    trace = load_trace(DEFAULT_TRACES / "resnet50_astrasim.csv")
    cluster = ClusterSpec("ring", Network.from_ring_fit(AlphaBeta(IB56_ALPHA, IB56_BETA), 16))
    start = time.perf_counter()
    for arch_cluster in (cluster, ClusterSpec("ps", cluster.network)):
        sweep(trace, arch_cluster, SCALING_WORKERS, schedulers, baseline=baseline)
    return time.perf_counter() - start


def run() -> list[Figure]:
    all_s = _seconds(ALL_SCHEDULERS, "wfbp")
    wfbp_s = _seconds(("wfbp",), "wfbp")
    return [
        Figure(
            name=f"sim ResNet-50, 7 schedulers x {len(SCALING_WORKERS)} worker counts x ring+PS (limit 10,000 ms)",
            value=all_s * 1e3,
            baseline_name="same sweep, wfbp only",
            baseline=wfbp_s * 1e3,
            unit="ms",
            higher_is_better=False,
        )
    ]
