"""Trace-driven ranks (issue 29): the scaling rule, the scaled H100 trace, gradient values,
and whole jobs on loopback (TCP ring; DLCP parameter server with layer-wise overlap)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mininet_topos.launcher import free_ports
from experiments.errors import ExperimentError
from experiments.scaling import ScaleRule
from experiments.training.trace_worker import SHARED_TRACES, TraceJob, forward_order, scaled_model

ROOT = Path(__file__).resolve().parent.parent
needs_trace = pytest.mark.skipif(not SHARED_TRACES.exists(), reason=f"no H100 trace at {SHARED_TRACES}")


def test_scale_rule_keeps_capacity() -> None:
    rule = ScaleRule(real_gbps=25.0, port_pps=20_000, k=8.0)
    # 20,000 frames of 1,500 bytes per second = 240 Mbit/s; 25 Gbit/s is 104.17 times that.
    assert rule.capacity_ratio == pytest.approx(25e9 / 240e6)
    assert rule.b * rule.k == pytest.approx(rule.capacity_ratio)
    assert rule.numel(2_048_000) == math.ceil(2_048_000 / (25e9 / 240e6 / 8))
    assert rule.numel(3) == 1
    assert rule.rto_min_s(0.2) == pytest.approx(1.6)
    assert "b = 13.02" in rule.describe() and "k = 8" in rule.describe()
    with pytest.raises(ExperimentError, match="b < 1"):
        ScaleRule(real_gbps=0.1, port_pps=20_000, k=8.0)


@needs_trace
def test_scaled_trace_follows_ready_order_and_forward_use() -> None:
    job = TraceJob(k=8.0, layers="tensor")
    trace = scaled_model(job)
    rows = [l.split(",") for l in SHARED_TRACES.read_text().splitlines()[1:]]
    mine = [r for r in rows if r[0] == "resnet50" and r[1] == "fp32"]
    assert len(trace.layers) == len(mine) == 161
    b = job.rule.b
    # layer i is the tensor whose gradient is ready i-th from last
    for k, row in enumerate(mine):
        layer = trace.layers[len(mine) - 1 - k]
        assert layer.name == row[4] and layer.numel == math.ceil(int(row[5]) / b)
    # the forward pass starts at the tensor forward uses first (conv1), not at index 0
    first = forward_order(trace)[0]
    assert trace.layers[first].name == min(mine, key=lambda r: float(r[7]))[4] == "conv1.weight"
    assert sum(l.backward_s for l in trace.layers) == pytest.approx(float(mine[-1][6]) * 1e-6 * 8, rel=1e-6)


def _run_job(world: int, *args: str) -> list[list[dict]]:
    peers = ",".join(f"127.0.0.1:{p}" for p in free_ports(world))
    procs = [subprocess.Popen([sys.executable, "-m", "experiments.training.trace_worker", "--rank", str(r),
                               "--peers", peers, "--iterations", "3", "--timeout-s", "60", "--k", "1", *args],
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in range(world)]
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=240)
        assert p.returncode == 0, err[-2000:]
        outs.append([json.loads(line) for line in out.splitlines() if line.startswith("{")])
    return outs


@needs_trace
@pytest.mark.slow
def test_tcp_ring_job_reduces_every_value() -> None:
    outs = _run_job(2, "--comm", "tcp", "--scheduler", "fusion", "--overlap", "ddp")
    numel = outs[0][0]["numel"]
    for lines in outs:
        iters = [l for l in lines if l["event"] == "iteration"]
        assert [l["iteration"] for l in iters] == [0, 1, 2]
        # a ring of two: each rank receives half the tensor in each of the two stages
        assert all(l["reduced"] == numel for l in iters) and all(l["lost"] == 0 for l in iters)
        assert all(l["iteration_s"] >= l["compute_s"] * 0.99 for l in iters)
        # each iteration's TCP_INFO of the rank's one peer socket, its bytes acked growing
        peer = str(1 - lines[0]["rank"])
        infos = [l["tcp_info"][peer] for l in iters]
        assert all(i["state"] == 1 and i["rto_us"] >= 200_000 and i["snd_cwnd"] > 0 for i in infos)
        acked = [i["bytes_acked"] for i in infos]
        assert 0 < acked[0] < acked[1] < acked[2]


@needs_trace
@pytest.mark.slow
def test_ddp_buckets_mark_the_jobs_bound_drop_eligible() -> None:
    """DDP buckets carry no loss policy: with a bound the ranks mark its share of each
    reduce-stage message drop-eligible (else the switches' magnitude dropping has nothing
    to drop); without one, nothing. The all-gather stage (parameters) is never marked."""
    for bound in (0.1, 0.0):
        outs = _run_job(2, "--comm", "dlcp", "--scheduler", "fusion", "--overlap", "ddp", "--grad-bound", str(bound))
        for lines in outs:
            done = lines[-1]
            assert done["event"] == "done"
            totals = done["totals"]
            # a ring of two: half of what a rank sends is its reduce-stage chunk, half all-gather
            reduce_values = totals["bytes"] / 4 / 2
            assert totals["eligible_elements"] <= bound * reduce_values * 1.01, (bound, totals)
            assert totals["eligible_elements"] >= bound * reduce_values * 0.95, (bound, totals)
            assert (totals["eligible"] > 0) == (bound > 0), totals
            # every rank received probes, and the C receive path answered some, never more
            assert 0 < totals["probes_answered_in_c"] <= totals["probes_received"], totals


@needs_trace
@pytest.mark.slow
def test_dlcp_ps_layerwise_job() -> None:
    outs = _run_job(3, "--comm", "dlcp", "--collective", "ps", "--scheduler", "dlcp", "--overlap", "layerwise",
                    "--grad-bound", "0.1")
    assert outs[0][-1]["role"] == "server"
    for lines in outs[1:]:
        iters = [l for l in lines if l["event"] == "iteration"]
        assert len(iters) == 3 and all(l["reduced"] == lines[0]["numel"] for l in iters)
        assert all(l["packets"] > 0 for l in iters)
        done = lines[-1]
        assert done["event"] == "done" and 0 < done["cpu_share"] < 4
        assert 0 <= done["cpu_wait_share"] <= 1  # one thread's wait over wall time (experiments/training/cpu.py)
        # pushes are totalled as sent messages: drop-eligible packets under the bound, what the server lacked
        assert done["totals"]["eligible"] > 0 and done["totals"]["eligible_elements"] > 0
        assert 0 <= done["totals"]["missing"] <= 0.1 * 3 * lines[0]["numel"]


def test_gradient_values_have_the_pool_magnitudes() -> None:
    from experiments.training.grad_values import GradientSource, GradPool

    pool = GradPool(rms=np.array([[1e-3], [1e-1]]), shapes=[np.ones(10, np.float32), np.ones(10, np.float32)])
    src = GradientSource([1000, 1000], pool, seed=1, rank=0)
    g = src.gradients(0)
    # the front tensor takes the first real tensor's RMS, the back one the last's (x a log-normal factor)
    assert 1e-3 / 3 < float(np.abs(g[0]).mean()) < 1e-3 * 3
    assert 1e-1 / 3 < float(np.abs(g[1]).mean()) < 1e-1 * 3
    assert not np.array_equal(src.gradients(1)[0], g[0])


@needs_trace
def test_layers_merge_a_convolution_and_its_norm() -> None:
    from experiments.training.trace_worker import unit_of

    assert unit_of("layer4.2.bn3.bias") == unit_of("layer4.2.conv3.weight") == "layer4.2.conv3"
    assert unit_of("layer4.0.downsample.1.weight") == "layer4.0.downsample.0"
    assert unit_of("fc.bias") == "fc"
    tensors = scaled_model(TraceJob(layers="tensor", k=1.0, real_gbps=0.24))
    layers = scaled_model(TraceJob(layers="layer", k=1.0, real_gbps=0.24))  # b = 1: sizes unscaled
    # ResNet-50: 53 convolutions (each with its norm) and the fully connected layer
    assert len(layers.layers) == 54
    assert layers.numel == tensors.numel == 25_557_032
    assert sum(l.backward_s for l in layers.layers) == pytest.approx(sum(l.backward_s for l in tensors.layers))
    assert layers.layers[forward_order(layers)[0]].name == "conv1"
    assert layers.layers[0].name == "conv1" and layers.layers[-1].name == "fc"
