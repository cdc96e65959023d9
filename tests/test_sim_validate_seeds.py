"""`sim validate`'s draws seeded by each run's own identity: a run's prediction does not change
when another folder is read or left out (hand-made records)."""

from __future__ import annotations

import csv
from pathlib import Path

from gradfabric.command.cli import main
from tests.sim_validate_helpers import ring_record, write_sweep


def _predicted(root: Path, job: Path, out: Path) -> dict[tuple[str, str], tuple[str, str]]:
    """The p50 and p99 predicted per (scenario, configuration) of a validation of ``root``'s sweeps."""
    assert main(["sim", "validate", str(root), "--job-trace", str(job), "--out", str(out)]) == 0
    with (out / "validation.csv").open() as f:
        return {(r["scenario"], r["configuration"]): (r["p50 predicted (ms)"], r["p99 predicted (ms)"]) for r in csv.DictReader(f)}


def _sweeps(root: Path, extra: bool) -> None:
    # A hotspot run's draws are a coin toss per draw between the uplink alone and shared
    # (run_model.COLLISION_P = 0.5): its p50 is whichever mode the seed's draws favour.
    for name in ("b", "c"):
        write_sweep(root, name, {f"{i:03d}-hotspot-r{i}": ring_record("hotspot", "qos", times=[0.02, 0.03, 0.04],
                                                                     port_pps=1000, index=i)
                                 for i in range(2)})
    if extra:  # read first; its runs (a family no other sweep ran) are out of reach
        write_sweep(root, "a", {f"{i:03d}-tcp-r0": ring_record("tcp", "gloo", port_pps=1000, index=i)
                                for i in range(3)})


def test_a_runs_prediction_does_not_depend_on_the_other_folders_read(tmp_path: Path) -> None:
    job = tmp_path / "job.csv"
    job.write_text("name,numel,forward_us,backward_us\nw,72200,1000,1000\n")
    alone, both = tmp_path / "alone", tmp_path / "both"
    _sweeps(alone, extra=False)
    _sweeps(both, extra=True)
    first = _predicted(alone, job, tmp_path / "out1")
    second = _predicted(both, job, tmp_path / "out2")
    assert ("tcp", "gloo") in second and ("tcp", "gloo") not in first
    assert "-" not in first[("hotspot", "qos")]
    assert second[("hotspot", "qos")] == first[("hotspot", "qos")]
