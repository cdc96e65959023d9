"""A trace run's zero-filled counts replayed as smallest-magnitude packet losses (experiments/accuracy)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from experiments.accuracy.masks import CountedLoss, PacketLayout, shares_from_counts, smallest_whole_packets
from experiments.accuracy.trace import run_counts
from experiments.errors import ExperimentError

ROOT = Path(__file__).resolve().parents[1]
QUICK = ROOT / "experiments" / "results" / "training" / "trace-quick-20261126-080603"


def test_smallest_whole_packets_fill_the_share_from_the_smallest() -> None:
    # peaks 5.0, 0.1, 2.0 over 361, 361, 278 values; 40% of 1,000 = 400 values
    peaks, counts = np.array([5.0, 0.1, 2.0]), np.array([361, 361, 278])
    assert smallest_whole_packets(peaks, counts, 0.4).tolist() == [False, True, False]
    assert smallest_whole_packets(peaks, counts, 0.64).tolist() == [False, True, True]  # 639 <= 640
    assert smallest_whole_packets(peaks, counts, 0.0009).tolist() == [False, False, False]  # budget 0
    assert smallest_whole_packets(peaks, counts, 0.001).tolist() == [False, True, False]  # at least one packet
    # ties by sequence
    assert smallest_whole_packets(np.array([1.0, 1.0]), np.array([361, 361]), 0.5).tolist() == [True, False]


def test_counted_loss_hits_one_worker_and_maps_tensors_by_position() -> None:
    layout = PacketLayout((1000, 50))  # packets 0-2 (tensor 0), 3 (tensor 1)
    grad = np.concatenate([np.full(361, 5.0), np.full(361, 0.1), np.full(278, 2.0), np.full(50, 1.0)])
    # the run had 3 tensors: model tensor 0 -> recorded 0, model tensor 1 -> recorded 2
    source = CountedLoss(layout, [{0: 0.4, 1: 0.9}, {}, {2: 0.5}], 3, "counts-x")
    reduce, gather = source.lost(0, [grad, grad])
    assert gather is None
    assert np.flatnonzero(reduce[0]).tolist() == [1] and not reduce[1].any()
    reduce, _ = source.lost(4, [grad, grad])  # iteration 4 -> 1: nothing
    assert not any(r.any() for r in reduce)
    reduce, _ = source.lost(5, [grad, grad])  # -> 2: recorded tensor 2's half of model tensor 1 (one packet)
    assert np.flatnonzero(reduce[0]).tolist() == [3]
    with pytest.raises(ExperimentError, match="no iterations"):
        CountedLoss(layout, [], 3, "counts-empty")


def test_counts_of_a_run_become_shares_per_worker() -> None:
    record = {"jobs": {"1": {"ranks": {
        "0": {"role": "worker", "records": [{"lost_by_tensor": {"2": 50}}, {"lost_by_tensor": {}}]},
        "1": {"role": "worker", "records": [{"lost_by_tensor": {"2": 150, "0": 10}}, {}]},
        "2": {"role": "server", "records": [{"lost_by_tensor": {"1": 99}}]}}}}}
    counts, workers = run_counts(record)
    assert counts == [{2: 200, 0: 10}, {}] and workers == 2
    # tensor 2 holds 1,000 values per worker: 200 of 2,000 lost in iteration 0
    assert shares_from_counts(counts, [100, 100, 1000], workers) == [{2: 0.1, 0: 0.05}, {}]
    with pytest.raises(ExperimentError, match="tensor 5"):
        shares_from_counts([{5: 1}], [100], 1)


def test_the_committed_quick_sweep_gives_each_scenarios_lossiest_run() -> None:
    pytest.importorskip("torch")
    from experiments.accuracy.sweep import mask_source
    from experiments.accuracy.trace import lossiest_runs

    expected: dict[str, tuple[int, str]] = {}
    for path in sorted((QUICK / "runs").glob("*.json")):
        r = json.loads(path.read_text())
        if r["status"] != "ok":
            continue
        lost = sum(rec.get("lost", 0) for j in r["jobs"].values() for rank in j["ranks"].values()
                   if rank.get("role") != "server" for rec in rank["records"])
        if lost > expected.get(r["scenario"], (0, ""))[0]:
            expected[r["scenario"]] = (lost, path.stem)
    runs, times = lossiest_runs(QUICK)
    assert sorted(runs) == sorted(f"counts-{stem}" for _, stem in expected.values())
    assert "incast" not in expected  # no incast run zero-filled any value (the folder's README)
    for name, path in runs.items():
        iterations = [rec["iteration_s"] for j in json.loads(path.read_text())["jobs"].values()
                      for rank in j["ranks"].values() for rec in rank["records"][1:]]
        assert min(iterations) <= times[name] <= max(iterations)
    # the run's own model (identity mapping): worker 0 loses packets in exactly the tensors whose
    # recorded count, over two workers, leaves a budget of at least one value
    from experiments.accuracy.trace import trace_tensor_values

    sizes = trace_tensor_values(QUICK)
    layout = PacketLayout(tuple(sizes))
    name = sorted(runs)[0]
    source = mask_source(name, layout, 0, runs)
    ranks = [rank for j in json.loads(runs[name].read_text())["jobs"].values() for rank in j["ranks"].values()]
    grad = np.random.default_rng(0).standard_normal(sum(sizes)).astype(np.float32)
    hit = 0
    for i in range(len(ranks[0]["records"])):
        counts: dict[int, int] = {}
        for rank in ranks:
            for t, n in rank["records"][i].get("lost_by_tensor", {}).items():
                counts[int(t)] = counts.get(int(t), 0) + n
        reduce, _ = source.lost(i, [grad, grad])
        assert not reduce[1].any()
        first, end = layout.tensor_first_packet, layout.tensor_first_packet + layout.tensor_packets
        lost_tensors = {t for t in range(len(sizes)) if reduce[0][first[t]:end[t]].any()}
        assert lost_tensors == {t for t, n in counts.items() if n // len(ranks) > 0}, i
        hit += len(lost_tensors)
    assert hit > 0
    with pytest.raises(ExperimentError, match="--trace"):
        mask_source("counts-nothing", layout, 0, {})


def test_command_replays_a_trace_sweep(tmp_path: Path) -> None:
    """`gradfabric experiment accuracy --trace DIR` runs none and one counts-RUN per lossy scenario,
    each with its run's iteration p50 as iteration time, and reports them."""
    pytest.importorskip("torch")
    from experiments.accuracy.trace import lossiest_runs
    from gradfabric.command import cli

    out = tmp_path / "acc"
    words = ["experiment", "accuracy", "--trace", str(QUICK), "--conditions", "none", "--seeds", "1",
             "--steps", "2", "--out", str(out)]
    assert cli.main(words) == 0
    runs, times = lossiest_runs(QUICK)
    settings = json.loads((out / "settings.json").read_text())
    assert settings["conditions"] == ["none", *runs]
    assert settings["iteration_time"] == times
    assert settings["command"] == " ".join(["gradfabric", *words])
    assert sorted(p.name for p in (out / "runs").glob("*.jsonl")) == sorted(
        f"{c}_seed0.jsonl" for c in settings["conditions"])
    report = (out / "results.md").read_text()
    assert all(f"| {c} |" in report for c in runs)


def test_trace_report_names_the_replay_command(tmp_path: Path) -> None:
    """The trace report of a sweep whose runs zero-filled values says how to replay them."""
    import shutil

    from experiments.trace_report import write_trace_report

    folder = tmp_path / "sweep"
    folder.mkdir()
    shutil.copy(QUICK / "plan.json", folder / "plan.json")
    shutil.copytree(QUICK / "runs", folder / "runs")
    write_trace_report(folder)
    text = (folder / "results.md").read_text()
    assert f"`gradfabric experiment accuracy --trace {folder} --conditions none`" in text
    assert "zero-filled gradient values in multitenant, tcp:" in text  # no incast run lost a value
