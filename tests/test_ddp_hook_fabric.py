"""The DDP hook's ranks on the training fabric (root, Mininet; issue 27).

The harness of ``tests/benchmarks/bench_ddp_hook_fabric.py`` (the trace experiment's
leaf-spine with full DLCP's policy, three ranks in three Mininet hosts on both leaves, gloo
over the hosts' interfaces) with a 1 MB MLP, one timed iteration and the worker's check.
Asserted: every rank's endpoint advertises its own Mininet host's address (as Mininet
assigned it, never loopback) and the DLCP port the switches parse; an all-reduce of
integer-valued float32 through the hook (bound 0) equals gloo's exactly on every rank, with nothing zero-filled; one DDP iteration
with the hook gives gloo's gradients to float32 rounding (the two sum in different orders).
No timing is asserted.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import netns

pytestmark = [pytest.mark.netns, pytest.mark.slow]


def test_hook_ranks_on_the_fabric_advertise_their_hosts_and_reduce_as_gloo(tmp_path: Path) -> None:
    if not netns.is_root():
        pytest.skip("needs root (Mininet fabric)")
    from hosts.wire import DLCP_PORT
    from tests.benchmarks.bench_ddp_hook_fabric import RANK_HOSTS, netns_lock, run_ranks, training_fabric

    with netns_lock(), training_fabric(tmp_path) as fabric:
        hosts = [str(fabric.node(h).IP()) for h in RANK_HOSTS]
        result = run_ranks(fabric, tmp_path, mb=1.0, iterations=1, warmup=0, check=True, timeout_s=600.0)
    assert len(set(hosts)) == 3 and not any(ip.startswith("127.") for ip in hosts), hosts
    assert [p[0] for p in result["peers"]] == hosts, result["peers"]
    assert all(p[1] == DLCP_PORT for p in result["peers"]), result["peers"]  # the port the switches parse
    checks = result["check"]
    assert len(checks) == 3
    for rank, check in enumerate(checks):
        assert check["ints_equal"], f"rank {rank}: hook and gloo differ by up to {check['ints_max_abs_diff']}"
        assert check["lost_elements"] == 0, f"rank {rank} zero-filled {check['lost_elements']} values at bound 0"
        assert check["grad_max_abs"] > 0, f"rank {rank}: no gradient to compare"
        assert check["grad_max_abs_diff"] <= 1e-5 * check["grad_max_abs"], (rank, check)
    assert len(result["times"]["hook"]) == 1 and len(result["times"]["gloo"]) == 1
