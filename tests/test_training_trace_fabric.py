"""The trace-driven runner on the fabric (root, network namespaces): one full-DLCP run of a
2-rank ResNet-50 trace job on the 8-host leaf-spine, through the same code as a sweep.

Asserted (issue 28): with the DLCP scheduler's priorities and layer-wise overlap, the next
iteration's first forward layer starts before the previous iteration's last result has
arrived; the hosts' qdiscs drop nothing; every value of every iteration is accounted for.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from tests import netns

pytestmark = [pytest.mark.netns, pytest.mark.slow]


def test_full_dlcp_run_overlaps_layers_on_the_fabric(tmp_path: Path) -> None:
    if not netns.is_root():
        pytest.skip("needs root (Mininet fabric)")
    from experiments.scenarios import JobPlacement
    from experiments.trace_configs import TOPOLOGY8, TraceScenario, trace_config
    from experiments.trace_sweep import PlannedRun, TraceSettings, TraceSite, run_trace_once
    from experiments.training.grad_values import load_pool
    from experiments.training.trace_worker import SHARED_TRACES, TraceJob
    from mininet_topos.launcher import Fabric, LaunchOptions
    from mininet_topos.programming import program_fabric

    if not SHARED_TRACES.exists():
        pytest.skip(f"no H100 trace at {SHARED_TRACES}")
    load_pool()
    # k = 1: b = 104, 245,000 values per rank per iteration, 38 ms of emulated compute
    settings = TraceSettings(job=TraceJob(iterations=3, k=1.0, timeout_s=120.0), job_timeout_s=400.0)
    scenario = TraceScenario("pair", "ring h1-h5, no background", (JobPlacement(1, ("h1", "h5")),))
    run = PlannedRun(0, "pair", "dlcp", 0, 2000)
    options = LaunchOptions(topo=TOPOLOGY8, workdir=tmp_path, prefix=f"t{uuid.uuid4().hex[:3]}", policy=None)
    with Fabric(options) as fabric:
        program_fabric(fabric.description_path, None)
        record = run_trace_once(TraceSite(fabric), scenario, trace_config("dlcp"), run, settings,
                                tmp_path / "logs", tmp_path / "policies", print)
    ranks = record["jobs"]["1"]["ranks"]
    assert set(ranks) == {"0", "1"}
    for rank in ranks.values():
        recs = rank["records"]
        assert [r["iteration"] for r in recs] == [0, 1, 2]
        # a ring of two: each rank receives half of every layer in each stage
        assert len({r["reduced"] for r in recs}) == 1 and recs[0]["reduced"] > 0
        early = [b["forward_first_s"] < a["last_arrival_s"] for a, b in zip(recs, recs[1:])]
        assert any(early), [(a["last_arrival_s"], b["forward_first_s"]) for a, b in zip(recs, recs[1:])]
    assert record["switch"]["host_qdisc_drops"] == 0
