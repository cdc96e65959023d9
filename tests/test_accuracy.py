"""Loss masks replayed into training (experiments/accuracy): values checked by hand."""

from __future__ import annotations

import gzip
import io
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from experiments.accuracy.data import Corpus, fixed_starts, is_validation, load_corpus, windows
from experiments.accuracy.masks import (GATHER, REDUCE, LossMasks, MaskFileError, NoLoss, PacketLayout, RandomLoss,
                                        RecordedLoss, element_mask, format_ranges, parse_masks, parse_ranges,
                                        read_masks, smallest_packets)
from experiments.accuracy.model import ModelConfig
from experiments.accuracy.report import paired_mean_diff, paired_ratio
from experiments.accuracy.train import (TrainSettings, evaluate, make_model, reduce_gradients, steps_to_target,
                                        train)


class FixedLoss:
    """Reduce-stage (and optionally gather-stage) packets lost by every worker at every step."""

    name = "fixed"

    def __init__(self, reduce: list[np.ndarray], gather: list[np.ndarray] | None = None) -> None:
        self.reduce, self.gather = reduce, gather

    def lost(self, iteration, grads):  # noqa: ANN001, ANN201 - the MaskSource protocol
        return self.reduce, self.gather


def test_layout_cuts_tensors_into_361_value_packets() -> None:
    layout = PacketLayout((800, 10, 361))
    # 800 = 361 + 361 + 78; 10 -> one packet; 361 -> exactly one.
    assert layout.tensor_packets.tolist() == [3, 1, 1]
    assert layout.tensor_first_packet.tolist() == [0, 3, 4]
    assert layout.packet_counts(0).tolist() == [361, 361, 78]
    assert layout.packet_starts.tolist() == [0, 361, 722, 800, 810]
    owner = layout.element_packet
    assert owner[360] == 0 and owner[361] == 1 and owner[799] == 2 and owner[800] == 3 and owner[810] == 4


def test_element_mask_names_exactly_the_lost_packets_values() -> None:
    layout = PacketLayout((5, 3), values_per_packet=2)  # packets: [0,1] [2,3] [4] | [5,6] [7]
    lost = np.array([False, True, False, False, True])
    assert element_mask(layout, lost).tolist() == [False, False, True, True, False, False, False, True]


def test_reduce_mask_zero_fills_lost_values_in_the_sum() -> None:
    """Two workers, a 4-value tensor in packets of 2 (by hand): worker 0 loses packet 1, worker 1
    packet 0; the mean is (1 + 0, 2 + 0, 0 + 30, 0 + 40) / 2, divided by both workers."""
    layout = PacketLayout((4,), values_per_packet=2)
    grads = [torch.tensor([1.0, 2.0, 3.0, 4.0]), torch.tensor([10.0, 20.0, 30.0, 40.0])]
    lost = [np.array([False, True]), np.array([True, False])]
    total, lost_values = reduce_gradients(grads, lost, torch.from_numpy(layout.element_packet))
    assert total.tolist() == [0.5, 1.0, 15.0, 20.0]
    assert lost_values == 4
    total, lost_values = reduce_gradients(grads, [np.zeros(2, bool)] * 2, torch.from_numpy(layout.element_packet))
    assert total.tolist() == [5.5, 11.0, 16.5, 22.0] and lost_values == 0


def test_smallest_selection_follows_dlcp_classes_and_budget() -> None:
    """Packets of 2 values; magnitude classes from max |v|: 0.001 -> 2^-10 (class 118), 0 -> 0,
    0.5 -> 2^-1 (127), 8 -> 2^3 (131), 0.003 -> 2^-9 (119). A 30% bound of 10 values allows 3
    values: the all-zero packet (2 values) is taken, the next smallest (0.001, 2 values) would
    make 4 > 3, so marking stops there."""
    grad = np.array([0.5, -0.25, 0.001, 0.0, 0.0, 0.0, 8.0, 1.0, -0.003, 0.002], np.float32)
    layout = PacketLayout((10,), values_per_packet=2)
    assert smallest_packets(layout, grad, 0.3).tolist() == [False, False, True, False, False]
    # 50%: 5 values: zero packet (2), then 0.001 (2) = 4, then 0.003 would make 6 > 5.
    assert smallest_packets(layout, grad, 0.5).tolist() == [False, True, True, False, False]
    # 60%: 6 values: the 0.003 packet too; never the 0.5 or 8 packets.
    assert smallest_packets(layout, grad, 0.6).tolist() == [False, True, True, False, True]
    # Per tensor: a second tensor of one packet cannot lose it under 60% (2 values > floor(0.6 * 2)).
    two = PacketLayout((10, 2), values_per_packet=2)
    both = np.concatenate([grad, np.array([0.0, 0.0], np.float32)])
    assert smallest_packets(two, both, 0.6).tolist() == [False, True, True, False, True, False]


def test_random_loss_is_seeded_and_near_its_share() -> None:
    layout = PacketLayout((361 * 2000,))
    a = RandomLoss(layout, 0.1, seed=3).lost(0, [np.zeros(1)] * 2)[0]
    b = RandomLoss(layout, 0.1, seed=3).lost(0, [np.zeros(1)] * 2)[0]
    assert all((x == y).all() for x, y in zip(a, b))
    assert not (a[0] == a[1]).all()  # workers lose different packets
    assert 0.08 < a[0].mean() < 0.12
    assert not NoLoss(layout).lost(0, [np.zeros(1)])[0][0].any()


def test_ranges_and_mask_file_round_trip(tmp_path: Path) -> None:
    assert format_ranges([7, 0, 1, 2, 5, 3, 9, 10]) == "0-3,5,7,9-10"
    assert parse_ranges("0-3,5,7,9-10").tolist() == [0, 1, 2, 3, 5, 7, 9, 10]
    masks = LossMasks(tensors=[1000, 10], workers=2, iterations=0, source="hand")
    masks.add(0, REDUCE, 1, 0, [0, 1, 2])
    masks.add(0, REDUCE, 1, 0, [2])  # merged, not duplicated
    masks.add(3, GATHER, 0, 1, [0])
    for name in ("m.txt", "m.txt.gz"):
        masks.write(tmp_path / name)
        back = read_masks(tmp_path / name)
        assert back.header() == masks.header()
        assert back.header()["iterations"] == 4
        assert {k: v.tolist() for k, v in back.lost.items()} == {(0, "R", 1, 0): [0, 1, 2], (3, "G", 0, 1): [0]}
    lines = (tmp_path / "m.txt").read_text().splitlines()
    assert lines[1:] == ["0 R 1 0 0-2", "3 G 0 1 0"]
    assert gzip.decompress((tmp_path / "m.txt.gz").read_bytes()).decode().splitlines() == lines
    # lost share at the reduce stage: 3 packets = 361 + 361 + 278 = 1000 values of 1010 * 2 workers * 4 iterations
    assert masks.lost_share(REDUCE) == pytest.approx(1000 / (1010 * 2 * 4))


def test_mask_file_errors_name_the_line() -> None:
    head = '{"format": "gradfabric-loss-masks", "version": 1, "values_per_packet": 361, "workers": 2, "tensors": [10]}'
    with pytest.raises(MaskFileError, match=r"bad:3: .*packets"):
        parse_masks(io.StringIO(head + "\n0 R 0 0 0\n1 R 0 0 4\n"), "bad")
    with pytest.raises(MaskFileError, match=r"bad:1: bad header"):
        parse_masks(io.StringIO('{"format": "other"}\n'), "bad")
    with pytest.raises(MaskFileError, match=r"bad:2: .*stage"):
        parse_masks(io.StringIO(head + "\n0 X 0 0 0\n"), "bad")


def test_recorded_masks_map_onto_another_model() -> None:
    masks = LossMasks(tensors=[361 * 4, 10], workers=2, iterations=2)
    masks.add(1, REDUCE, 1, 0, [1])  # second quarter of the front tensor, worker 1, iteration 1
    masks.add(0, GATHER, 0, 1, [0])
    layout = PacketLayout((361 * 8, 5, 20))  # 8 packets, 1, 1
    source = RecordedLoss(layout, masks, "recorded-x")
    reduce, gather = source.lost(3, [np.zeros(1)] * 4)  # iteration 3 -> 1; workers 1 and 3 -> 1
    assert [np.flatnonzero(r).tolist() for r in reduce] == [[], [2, 3], [], [2, 3]]
    assert gather is None
    reduce, gather = source.lost(2, [np.zeros(1)] * 2)  # -> iteration 0: tensors 1 and 2 map to recorded 1
    assert gather is not None and np.flatnonzero(gather[0]).tolist() == [8, 9] and not gather[1].any()


def small_corpus() -> Corpus:
    text = np.frombuffer(b"def f(x):\n    return x + 1\n" * 400, np.uint8).copy()
    return Corpus(train=text, val=text[: 2000].copy(), root="-", train_files=1, val_files=1, fingerprint="-")


def test_a_few_steps_reduce_the_loss_and_are_deterministic() -> None:
    settings = TrainSettings(model=ModelConfig(layers=1, width=32, heads=2, context=16), workers=2, batch=4,
                             steps=20, lr=1e-2, warmup=1, eval_every=10, eval_windows=8)
    layout = PacketLayout(tuple(p.numel() for p in make_model(settings, 0).parameters()))
    a = train(small_corpus(), settings, 0, NoLoss(layout))
    b = train(small_corpus(), replace(settings, steps=5), 0, NoLoss(layout))
    assert [r["train_bpb"] for r in a[:5]] == [r["train_bpb"] for r in b]
    assert a[-1]["val_bpb"] < a[0]["train_bpb"] - 2.0  # starts near log2(256) = 8 bits/byte
    assert a[0]["train_bpb"] == pytest.approx(8.0, abs=0.5)


def test_losing_every_packet_freezes_the_model_and_gather_loss_keeps_stale_replicas() -> None:
    settings = TrainSettings(model=ModelConfig(layers=1, width=16, heads=2, context=8), workers=2, batch=2,
                             steps=5, lr=1e-2, warmup=1, eval_every=5, eval_windows=4)
    layout = PacketLayout(tuple(p.numel() for p in make_model(settings, 0).parameters()))
    everything = [np.ones(layout.packets, bool)] * 2
    frozen = train(small_corpus(), settings, 0, FixedLoss(everything))
    assert all(r["reduce_lost"] == 1.0 for r in frozen)
    # Zero gradients everywhere: AdamW without weight decay leaves the weights, so the
    # validation loss is that of the initial model.
    model = make_model(settings, 0)
    val = torch.from_numpy(windows(small_corpus().val, fixed_starts(small_corpus().val, 4, 9), 9))
    assert frozen[-1]["val_bpb"] == pytest.approx(evaluate(model, val), rel=1e-6)
    none = [np.zeros(layout.packets, bool)] * 2
    stale = train(small_corpus(), settings, 0, FixedLoss(none, everything))
    assert all(r["gather_lost"] == 1.0 and r["reduce_lost"] == 0.0 for r in stale)
    moving = train(small_corpus(), settings, 0, FixedLoss(none))
    # Replicas that never receive the server's parameters compute the initial model's
    # gradients every step, so training differs from the lossless run.
    assert [r["train_bpb"] for r in stale][1:] != [r["train_bpb"] for r in moving][1:]
    assert stale[1]["train_bpb"] != moving[1]["train_bpb"]


def test_steps_to_target_interpolates_and_reports_never() -> None:
    records = [{"step": 10, "val_bpb": 4.0}, {"step": 20, "val_bpb": 3.0}, {"step": 30, "val_bpb": 2.5}]
    assert steps_to_target(records, 3.5) == pytest.approx(15.0)
    assert steps_to_target(records, 3.0) == pytest.approx(20.0)
    assert steps_to_target(records, 5.0) == pytest.approx(10.0)
    assert steps_to_target(records, 2.0) is None


def test_paired_bootstrap_estimates() -> None:
    d = paired_mean_diff(np.array([11.0, 12, 13, 14, 15]), np.array([10.0, 10, 10, 10, 10]))
    assert d.mean == pytest.approx(3.0) and 1.0 <= d.low < 3.0 < d.high <= 5.0 and d.pairs == 5
    same = paired_mean_diff(np.array([2.0, 3.0]), np.array([1.0, 2.0]))
    assert (same.mean, same.low, same.high) == (1.0, 1.0, 1.0)
    r = paired_ratio(np.array([20.0, 22, 18, 21]), np.array([10.0, 11, 9, 10]))
    assert r.mean == pytest.approx(81 / 40) and r.low <= 2.0 <= r.high


def test_split_is_by_file_and_stable() -> None:
    # The rule is a hash of the relative path: fixed values, whatever the machine.
    import hashlib

    for path in ("os.py", "json/decoder.py", "asyncio/tasks.py"):
        assert is_validation(path, 0.1) == (hashlib.sha256(path.encode()).digest()[0] < 26)
    corpus = load_corpus()
    assert corpus.val_files > 0 and corpus.train_files > 5 * corpus.val_files
    assert corpus.train.size > 1_000_000


def test_report_pairs_seeds_and_times_accuracy(tmp_path: Path) -> None:
    """Hand-made runs: 'none' crosses 3.0 bits/byte at iteration 20 for every seed; 'random-10'
    at 30, 30 and never; time to accuracy with 0.5 s (none) and 0.25 s (lossy) iterations."""
    import json

    from experiments.accuracy.report import write_report

    def run(curve: list[float]) -> str:
        lines = [{"step": 10 * (i + 1), "train_bpb": v, "reduce_lost": 0.1, "gather_lost": 0.0, "val_bpb": v}
                 for i, v in enumerate(curve)]
        return "".join(json.dumps(x) + "\n" for x in lines)

    (tmp_path / "runs").mkdir()
    for seed in range(3):
        (tmp_path / "runs" / f"none_seed{seed}.jsonl").write_text(run([4.0, 3.0, 2.8, 2.7]))
        (tmp_path / "runs" / f"random-10_seed{seed}.jsonl").write_text(
            run([4.0, 3.5, 3.0, 2.9] if seed < 2 else [4.0, 3.5, 3.2, 3.1]))
    settings = {"conditions": ["none", "random-10"], "seeds": [0, 1, 2], "target_bpb": 3.0, "command": "x",
                "iteration_time": {}, "corpus": {"train_bytes": 1, "val_bytes": 1, "train_files": 1,
                                                 "val_files": 1, "fingerprint": "abc"},
                "settings": {"model": {"layers": 1, "width": 8, "heads": 1, "context": 4}, "workers": 2,
                             "batch": 1, "steps": 40, "lr": 0.1, "eval_every": 10}}
    (tmp_path / "settings.json").write_text(json.dumps(settings))
    md = write_report(tmp_path, {"none": 0.5, "*": 0.25}, "gradfabric experiment accuracy --report here").read_text()
    rows = {r["condition"]: r for r in json.loads((tmp_path / "results.json").read_text())["rows"]}
    lossy = rows["random-10"]
    assert lossy["reached"] == 2 and lossy["iterations_by_seed"] == {"0": 30.0, "1": 30.0, "2": None}
    assert lossy["d_iterations"]["mean"] == 10.0 and lossy["d_iterations"]["pairs"] == 2
    assert lossy["r_iterations"]["mean"] == 1.5
    assert lossy["d_final_bpb"]["mean"] == pytest.approx((0.2 + 0.2 + 0.4) / 3)
    assert lossy["time_to_target_s"] == 7.5 and rows["none"]["time_to_target_s"] == 10.0
    assert lossy["r_time_to_target"]["mean"] == 0.75  # 1.5 x (0.25 / 0.5)
    assert "| random-10 | 10.00% | 2/3 | 30.0 | +10.0 [+10.0, +10.0] | 1.500 [1.500, 1.500]" in md
    assert (tmp_path / "accuracy.png").stat().st_size > 1000
    assert "smoke test" in md  # 3 seeds


def test_recorded_file_replayed_in_training(tmp_path: Path) -> None:
    """A file naming all of tensor 0's packets for worker 0 at iteration 0 (a model of the same
    tensors: identity mapping) loses exactly tensor 0's values of one worker in iterations 0
    and 2 (the file has 2 iterations), nothing in iteration 1."""
    from experiments.accuracy.sweep import mask_source, parse_iteration_times, parse_seeds

    settings = TrainSettings(model=ModelConfig(layers=1, width=16, heads=2, context=8), workers=2, batch=2,
                             steps=3, lr=1e-2, warmup=1, eval_every=3, eval_windows=4)
    sizes = [p.numel() for p in make_model(settings, 0).parameters()]
    layout = PacketLayout(tuple(sizes))
    masks = LossMasks(tensors=sizes, workers=2, iterations=2, source="hand")
    masks.add(0, REDUCE, 0, 0, range(int(layout.tensor_packets[0])))
    masks.write(tmp_path / "m.txt.gz")
    source = mask_source("recorded-m", layout, 0, {"recorded-m": tmp_path / "m.txt.gz"})
    records = train(small_corpus(), settings, 0, source)
    share = sizes[0] / (sum(sizes) * 2)
    assert [r["reduce_lost"] for r in records] == pytest.approx([share, 0.0, share])
    assert parse_seeds("3") == (0, 1, 2) and parse_seeds("2-4") == (2, 3, 4) and parse_seeds("1,3") == (1, 3)
    assert parse_iteration_times(["none=0.5", "0.25"]) == {"none": 0.5, "*": 0.25}
    from experiments.errors import ExperimentError

    with pytest.raises(ExperimentError, match="recorded-x"):
        mask_source("recorded-x", layout, 0, {})
    with pytest.raises(ExperimentError, match="unknown condition"):
        mask_source("lossy-10", layout, 0, {})


def test_claims_keep_parts_of_a_sweep_apart(tmp_path: Path) -> None:
    from experiments.accuracy.sweep import _claim

    path = tmp_path / "none_seed0.jsonl"
    assert _claim(path) is True
    assert _claim(path) is False  # held by a live process (this one)
    path.with_suffix(".claim").write_text(str(2**22 + 1))  # above Linux's largest pid: gone
    assert _claim(path) is True
    assert path.with_suffix(".claim").read_text() == str(__import__("os").getpid())
