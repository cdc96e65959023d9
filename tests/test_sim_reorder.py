"""The validation's reordering term (simulator/reorder_model.py) on hand-computed figures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simulator.errors import SimulatorError
from simulator.reorder_model import cross_validated_joint, joint_best, load_reordered, reordered_per_iteration

GRID = (0.0, 1e-5)
RATES = (0.0, 1e-3, 2e-3)


def _record(run_id: str, *ranks: list[int | None]) -> dict[str, object]:
    return {"run_id": run_id, "jobs": {"1": {"ranks": {str(i): {"records": [{"reordered": c} for c in counts]}
                                                        for i, counts in enumerate(ranks)}}}}


def test_reordered_per_iteration_is_the_busiest_ranks_mean_without_iteration_0() -> None:
    # rank 0: (10 + 20) / 2 = 15, rank 1: (30 + 50) / 2 = 40; the 999s are iteration 0.
    assert reordered_per_iteration(_record("r", [999, 10, 20], [999, 30, 50])) == 40.0
    assert reordered_per_iteration(_record("r", [999, 10, None])) is None
    assert reordered_per_iteration({"jobs": {}}) is None


def test_load_reordered_keys_runs_by_sweep_and_run_id(tmp_path: Path) -> None:
    runs = tmp_path / "sweep-a" / "runs"
    runs.mkdir(parents=True)
    (runs / "000-x.json").write_text(json.dumps(_record("000-x", [0, 4, 6])))
    (runs / "001-y.json").write_text(json.dumps({"run_id": "001-y", "jobs": {}}))  # kernel TCP: none recorded
    assert load_reordered(tmp_path) == {("sweep-a", "000-x"): 5.0}


def test_joint_best_charges_the_reordered_packets() -> None:
    # Run A reorders nothing and is measured at the cost-0 curve (1.0 s); run B reorders 100
    # packets an iteration and is measured 0.1 s above it: 0.1 s / 100 = 1 ms a packet, and
    # (c = 0, r = 1 ms) predicts both exactly, where r = 0 misses B by 0.1 / 1.1.
    curves = [[1.0, 1.5], [1.0, 1.5]]
    assert joint_best(GRID, curves, [0.0, 100.0], [1.0, 1.1], reorder_grid=RATES) == (0.0, 1e-3)
    # No run reorders: r stays 0 and the host cost is the plain fit (here the 1.5 s curve).
    assert joint_best(GRID, curves, [0.0, 0.0], [1.5, 1.5], reorder_grid=RATES) == (1e-5, 0.0)
    with pytest.raises(SimulatorError, match="2 reorder counts for 3 runs"):
        joint_best(GRID, curves + [[1.0, 1.5]], [0.0, 1.0], [1.0, 1.0, 1.0], reorder_grid=RATES)


def test_cross_validated_joint_never_fits_on_the_sweep_predicted() -> None:
    # Sweep s1's reordering run is 0.1 s over its curve (1 ms a packet), s2's 0.2 s (2 ms):
    # each sweep is given the rate the *other* sweep shows.
    runs = [("s1", "dlcp", 1.0), ("s1", "dlcp", 1.1), ("s2", "dlcp", 1.0), ("s2", "dlcp", 1.2), ("s1", "tcp", 1.5)]
    curves = [[1.0, 1.5]] * 5
    reordered = [0.0, 100.0, 0.0, 100.0, 0.0]
    out = cross_validated_joint(runs, curves, reordered, GRID, reorder_grid=RATES)
    assert out[("s1", "dlcp")] == (0.0, 2e-3, 2)
    assert out[("s2", "dlcp")] == (0.0, 1e-3, 2)
    assert ("s1", "tcp") not in out  # no other sweep ran it
