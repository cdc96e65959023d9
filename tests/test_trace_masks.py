"""Loss masks of trace runs (experiments/trace_masks.py): zero-filled reduce-stage values of a
DLCP ring mapped to (worker, layer, element), written as mask files and replayed by
`gradfabric experiment accuracy --trace` in preference to per-layer counts."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from experiments.accuracy.masks import REDUCE, read_masks
from experiments.trace_masks import MaskRecorder, lost_elements, run_masks, write_run_masks
from hosts.messages import MessageKey
from hosts.wire import MsgType


def _key(iteration: int, tensor: int, part: int, step: int, kind: MsgType = MsgType.GRADIENT) -> MessageKey:
    steps = 2  # a ring of two
    return MessageKey(1, 0, (iteration * 1024 + part) * steps + step, tensor, kind)


def _got(values: list[float], received: int) -> SimpleNamespace:
    return SimpleNamespace(values=np.array(values, dtype=np.float32), received=received)


def test_zeroed_packets_of_a_reduce_message_map_to_layers_and_the_sending_worker() -> None:
    # transfer of iteration 3, tensor id 5, part 0: layer 5 [0, 10) then layer 6 [0, 6); 16 values,
    # a ring of two cuts them into chunks [0, 8) and [8, 16); packets of 2 values
    segments = [(5, 0, 10), (6, 0, 6)]
    one = MaskRecorder(rank=1, size=2, count=2)
    one.plan(3, 5, 0, segments)
    # rank 1 receives chunk (1 - 0 - 1) % 2 = 0 from worker 0: packet 1 (values 2, 3) all zero ->
    # layer 5 elements 2, 3; the single zero at 5 is a value, not a lost packet
    one.note(_key(3, 5, 0, 0), _got([1, 1, 0, 0, 1, 0, 1, 1], received=6))
    assert one.pop(3) == {"0": {"5": "2-3"}}
    assert one.inexact == 0

    zero = MaskRecorder(rank=0, size=2, count=3)
    zero.plan(3, 5, 0, segments)
    # rank 0 receives chunk 1 (positions 8..15) from worker 1 in packets [0, 3), [3, 6), [6, 8):
    # packets 0 and 2 are zero -> positions 8-10 and 14-15 -> layer 5 elements 8, 9, layer 6
    # elements 0, 4, 5; 5 values zero but 4 counted lost: inexact
    zero.note(_key(3, 5, 0, 0), _got([0, 0, 0, 1, 1, 1, 0, 0], received=4))
    # the all-gather (step 1) and parameter messages are not the reduce stage: ignored
    zero.note(_key(3, 5, 0, 1), _got([0] * 8, received=0))
    zero.note(_key(3, 5, 0, 0, MsgType.PARAMETER), _got([0] * 8, received=0))
    assert zero.pop(3) == {"1": {"5": "8-9", "6": "0,4-5"}}
    assert zero.inexact == 1
    assert zero.pop(3) == {}


def test_a_message_added_in_place_is_recorded_from_the_receivers_lost_values() -> None:
    """Values added into the caller's array keep the local value where a packet was lost (not
    zero): the recorder takes the receiver's own list of lost values."""
    one = MaskRecorder(rank=1, size=2, count=2)
    one.plan(3, 5, 0, [(5, 0, 10), (6, 0, 6)])
    got = SimpleNamespace(values=np.full(8, 7.0, dtype=np.float32), received=6, lost=np.array([2, 3]))
    one.note(_key(3, 5, 0, 0), got)
    assert one.pop(3) == {"0": {"5": "2-3"}}
    assert one.inexact == 0


def test_attach_records_what_take_returns() -> None:
    recorder = MaskRecorder(rank=1, size=2)
    recorder.plan(0, 0, 0, [(0, 0, 4), (1, 0, 4)])
    message = _got([0, 2, 3, 4], received=3)
    endpoint = SimpleNamespace(take=lambda key, timeout=1.0, peer=None: message, count=1)  # 1 value a packet
    recorder.attach(endpoint)
    assert recorder.count == 1
    assert endpoint.take(_key(0, 0, 0, 0), timeout=5.0) is message
    assert recorder.pop(0) == {"0": {"0": "0"}}


def _record(run_id: str, lost: list[dict]) -> dict:
    return {"run_id": run_id, "status": "ok", "jobs": {"1": {"ranks": {
        str(r): {"role": "worker", "records": [{"iteration": i, **({"lost_values": lv} if lv else {})}
                                               for i, lv in enumerate(its)]}
        for r, its in enumerate(lost)}}}}


def test_a_runs_masks_are_written_and_read_back(tmp_path: Path) -> None:
    record = _record("007-lossy-1-dlcp-r0", [[{}, {"1": {"0": "0-2"}}], [{"0": {"1": "4,7"}}, {}]])
    path = write_run_masks(tmp_path, record, [10, 8])
    assert path == tmp_path / "masks" / "007-lossy-1-dlcp-r0.txt.gz"
    masks = read_masks(path)
    assert masks.values_per_packet == 1 and masks.tensors == [10, 8] and masks.workers == 2
    assert {k: v.tolist() for k, v in masks.lost.items()} == {(1, REDUCE, 1, 0): [0, 1, 2], (0, REDUCE, 0, 1): [4, 7]}
    assert masks.lost_share() == 5 / (18 * 2 * 2)  # 5 values of 18 per worker, 2 workers, 2 iterations


def test_a_multitenant_runs_masks_are_its_first_jobs() -> None:
    record = _record("001-multitenant-dlcp-r0", [[{"1": {"0": "0-2"}}], [{"0": {"1": "4"}}]])
    other = _record("x", [[{"1": {"0": "5-6"}}], [{"0": {"0": "1"}}]])["jobs"]["1"]
    record["jobs"] = {"2": other, "1": record["jobs"]["1"]}
    masks = run_masks(record, [10, 8])
    assert masks is not None and masks.workers == 2
    assert {k: v.tolist() for k, v in masks.lost.items()} == {(0, REDUCE, 1, 0): [0, 1, 2], (0, REDUCE, 0, 1): [4]}


def test_runs_without_masks_have_none() -> None:
    assert run_masks(_record("x", [[{}], [{}]]), [4]) is None
    assert run_masks(json.loads(json.dumps({"jobs": {}})), [4]) is None


def test_the_accuracy_replay_prefers_a_runs_recorded_masks(tmp_path: Path) -> None:
    import shutil

    from experiments.accuracy.trace import lossiest_runs
    from tests.test_accuracy_trace import QUICK

    folder = tmp_path / "sweep"
    shutil.copytree(QUICK / "runs", folder / "runs")
    shutil.copy(QUICK / "plan.json", folder / "plan.json")
    before, _ = lossiest_runs(folder)
    assert before and all(name.startswith("counts-") for name in before)
    chosen = sorted(before)[0].removeprefix("counts-")
    record = _record(chosen, [[{"0": {"0": "0-9"}}], [{}]])
    path = write_run_masks(folder, record, [100])
    after, times = lossiest_runs(folder)
    assert after[f"recorded-{chosen}"] == path and f"counts-{chosen}" not in after
    assert set(after) - {f"recorded-{chosen}"} == set(before) - {f"counts-{chosen}"}
    assert f"recorded-{chosen}" in times
    from experiments.accuracy.sweep import check_condition

    check_condition(f"recorded-{chosen}", after)  # a run id's dashes make a valid condition name


def test_a_packet_cut_in_two_is_found_by_the_missing_count() -> None:
    # packets of 4: [0, 4) lost whole; the sender cut packet [8, 12) after 1 value and lost [9, 12)
    values = np.array([0, 0, 0, 0, 1, 0, 1, 1, 1, 0, 0, 0], dtype=np.float32)
    assert lost_elements(values, 4, 7).tolist() == [0, 1, 2, 3, 9, 10, 11]
    # the same zeros with 4 counted lost: the zero suffix is a value, not a packet piece
    assert lost_elements(values, 4, 4).tolist() == [0, 1, 2, 3]
    # the lost piece is the head of the cut packet [4, 8) (2 values)
    values = np.array([1, 1, 1, 1, 0, 0, 1, 1], dtype=np.float32)
    assert lost_elements(values, 4, 2).tolist() == [4, 5]
