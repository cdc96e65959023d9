"""The shared trace reader on the pytorch (H100) format: layers, passes, errors."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from gradfabric.traces import (
    PYTORCH_HEADER,
    Passes,
    TensorTiming,
    TraceError,
    format_passes,
    format_pytorch,
    load_passes,
    load_trace,
    parse_trace,
)

from simulator.cli import DEFAULT_TRACES

H100 = DEFAULT_TRACES / "h100_pytorch_layer_traces.csv"
PASSES = DEFAULT_TRACES / "h100_pytorch_passes.json"

#: A model of three tensors whose gradients are not ready in reverse forward order.
SMALL = (
    "model,precision,batch,ready_order,param,numel,grad_ready_us,forward_use_us\n"
    "m,fp32,8,0,head.w,100,10.0,50.0\n"
    "m,fp32,8,1,stem.w,10,25.0,0.0\n"
    "m,fp32,8,2,mid.w,40,40.0,20.0\n"
    "m,bf16,8,0,head.w,100,5.0,30.0\n"
    "m,bf16,8,1,mid.w,40,12.0,10.0\n"
    "m,bf16,8,2,stem.w,10,20.0,0.0\n"
)
SMALL_PASSES = [Passes("m", "fp32", 8, 70e-6, 45e-6, 9e-6, 150), Passes("m", "bf16", 8, 40e-6, 21e-6, 9e-6, 150)]


def test_rows_become_layers_in_ready_order_with_measured_forward_needs() -> None:
    trace = parse_trace(SMALL, name="x", model="m", precision="fp32", passes=SMALL_PASSES)
    # Layer i is the tensor ready i-th from last: mid.w (last ready) is layer 0.
    assert [l.name for l in trace.layers] == ["mid.w", "stem.w", "head.w"]
    assert [l.backward_s for l in trace.layers] == pytest.approx([15e-6, 15e-6, 10e-6])
    # Forward uses stem.w (layer 1) at 0, mid.w (layer 0) at 20 us, head.w (layer 2) at 50 us; forward is 70 us.
    assert trace.forward_order == (1, 0, 2)
    assert [l.forward_s for l in trace.layers] == pytest.approx([30e-6, 20e-6, 20e-6])
    assert trace.backward_tail_s == pytest.approx(5e-6)
    assert trace.optimizer_s == pytest.approx(9e-6)
    assert trace.compute_s == pytest.approx(70e-6 + 45e-6 + 9e-6)
    assert trace.batch_size == 8 and trace.name == "m_fp32"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, r"holds precisions fp32, bf16 for m; pick one with --precision"),
        ({"model": "n"}, r"no model 'n'; the file holds m"),
        ({"model": "m", "precision": "fp16"}, r"no precision 'fp16' for m; the file holds fp32, bf16"),
        ({"model": "m", "precision": "fp32", "passes": []}, r"no forward/backward/optimizer times for m fp32"),
    ],
)
def test_choices_are_named_when_a_pick_is_missing_or_wrong(options: dict, message: str) -> None:
    options.setdefault("passes", SMALL_PASSES)
    with pytest.raises(TraceError, match=message):
        parse_trace(SMALL, name="x", origin="t.csv", **options)


def test_bad_rows_name_the_file_and_line() -> None:
    swapped = SMALL.replace("m,fp32,8,1,stem.w", "m,fp32,8,7,stem.w")
    with pytest.raises(TraceError, match=r"t.csv:3: ready_order 7 out of order"):
        parse_trace(swapped, name="x", origin="t.csv", model="m", precision="fp32", passes=SMALL_PASSES)
    earlier = SMALL.replace("m,fp32,8,2,mid.w,40,40.0", "m,fp32,8,2,mid.w,40,1.0")
    with pytest.raises(TraceError, match=r"t.csv:4: grad_ready_us 1.0 is earlier"):
        parse_trace(earlier, name="x", origin="t.csv", model="m", precision="fp32", passes=SMALL_PASSES)
    with pytest.raises(TraceError, match=r"t.csv:2: numel is not a number"):
        parse_trace(SMALL.replace(",100,10.0", ",many,10.0"), name="x", origin="t.csv", model="m",
                    precision="fp32", passes=SMALL_PASSES)


def test_a_tensor_without_forward_use_takes_the_next_ready_ones() -> None:
    text = SMALL.replace("m,fp32,8,0,head.w,100,10.0,50.0", "m,fp32,8,0,head.w,100,10.0,nan")
    trace = parse_trace(text, name="x", model="m", precision="fp32", passes=SMALL_PASSES)
    # head.w (layer 2) takes stem.w's use at 0 us; ties keep index order: 1, 2 at 0 us, then 0 at 20 us.
    assert trace.forward_order == (1, 2, 0)
    assert [l.forward_s for l in trace.layers] == pytest.approx([50e-6, 0.0, 20e-6])


def test_other_formats_refuse_a_model_pick() -> None:
    with pytest.raises(TraceError, match="pick rows of a pytorch-format trace"):
        parse_trace("name,numel,forward_us,backward_us\nx,1,1,1\n", name="x", model="m")


def test_writers_round_trip(tmp_path: Path) -> None:
    tensors = [TensorTiming("b", 4, 2e-6, 1e-6), TensorTiming("a", 3, 1e-6, 0.0)]
    (tmp_path / "t.csv").write_text(format_pytorch("tiny", "fp32", 2, tensors))
    (tmp_path / "p.json").write_text(format_passes([Passes("tiny", "fp32", 2, 5e-6, 3e-6, 1e-6, 7)]))
    trace = load_trace(tmp_path / "t.csv", passes=tmp_path / "p.json")
    assert [(l.name, l.numel) for l in trace.layers] == [("b", 4), ("a", 3)]
    assert trace.compute_s == pytest.approx(9e-6)
    with pytest.raises(TraceError, match="cannot read passes file"):
        load_trace(tmp_path / "t.csv", passes=tmp_path / "missing.json")


def test_every_h100_model_reads_with_its_passes() -> None:
    passes = json.loads(PASSES.read_text())["passes"]
    with H100.open() as f:
        rows = list(csv.DictReader(f))
    assert tuple(rows[0]) == PYTORCH_HEADER
    for p in passes:
        trace = load_trace(H100, model=p["model"], precision=p["precision"])
        mine = [r for r in rows if r["model"] == p["model"] and r["precision"] == p["precision"]]
        assert len(trace.layers) == p["params"] and trace.numel == p["numel"]
        # The last gradient is ready at its grad_ready_us: the sum of the layers' gaps.
        assert sum(l.backward_s for l in trace.layers) == pytest.approx(float(mine[-1]["grad_ready_us"]) * 1e-6)
        assert trace.forward_s == pytest.approx(p["forward_us"] * 1e-6)
        assert trace.backward_s == pytest.approx(p["backward_us"] * 1e-6)
        assert trace.optimizer_s == pytest.approx(p["optimizer_us"] * 1e-6)
        assert sorted(trace.forward_order or ()) == list(range(len(trace.layers)))
    assert len(load_passes(PASSES)) == len(passes)


# --- the engine on measured traces ------------------------------------------------------

def test_one_worker_iterates_in_forward_plus_backward_plus_optimizer(tmp_path: Path) -> None:
    from gradfabric.command.cli import main

    code = main(["sim", "run", "--trace", str(H100), "--model", "resnet50", "--precision", "bf16", "--gbps", "100",
                 "--workers", "1", "--schedulers", "wfbp,p3", "--baseline", "wfbp", "--out", str(tmp_path)])
    assert code == 0
    passes = {(p["model"], p["precision"]): p for p in json.loads(PASSES.read_text())["passes"]}
    p = passes[("resnet50", "bf16")]
    expected_s = (p["forward_us"] + p["backward_us"] + p["optimizer_us"]) * 1e-6
    with (tmp_path / "resnet50_bf16_ring.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [r["scheduler"] for r in rows] == ["wfbp", "p3"]
    for row in rows:
        assert float(row["iteration_s"]) == pytest.approx(expected_s, rel=1e-5)


def _two_layer_run(forward_order: tuple[int, int]) -> float:
    from hosts.schedulers import AlphaBeta, create
    from simulator.cluster import AlphaBetaLink
    from simulator.engine import simulate
    from gradfabric.traces import Layer

    layers = [Layer(0, "a", 1, 1.0, 1.0), Layer(1, "b", 1, 1.0, 1.0)]
    cost = AlphaBeta(3.0, 0.0)
    return simulate(layers, create("wfbp", cost=cost), AlphaBetaLink(cost), iterations=4,
                    forward_order=forward_order, optimizer_s=2.0).iteration_s


def test_forward_starts_a_layer_once_its_own_update_ran() -> None:
    # Backward: layer 1 ready at 1 s, layer 0 at 2 s; each all-reduce holds the link 3 s, so
    # layer 1 is reduced at 4 s and layer 0 at 7 s; each update takes 1 s, each forward 1 s.
    # Forward order 0, 1: update 1 (4-5), wait, update 0 (7-8), forward 0 (8-9), forward 1 (9-10).
    assert _two_layer_run((0, 1)) == pytest.approx(10.0)
    # Forward order 1, 0: update 1 (4-5), forward 1 (5-6), update 0 (7-8), forward 0 (8-9).
    assert _two_layer_run((1, 0)) == pytest.approx(9.0)
