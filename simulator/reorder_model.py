"""The cost of reordered packets (``sim validate --with reordering``, off by default): a DLCP sender whose
probe overtakes late packets waits ``reorder_grace`` or the smoothed round trip before it probes
again (hosts/recovery.py), and per-packet spraying reorders packets (the ablation in tcp at
5,000 packets/s: 5-6% of full DLCP's packets out of order, 15% of its p50). The runs record, per
rank and iteration, how many packets arrived out of order (``reordered``), not the waits; the
term charges each iteration the reordered packets of the rank that saw most, ``R``, at a cost
per reordered packet ``r`` (a time on the wall clock, added to the iteration).

``r`` is fitted with the family's host cost per packet ``c``, **leave one sweep out**: the pair
(``c``, ``r``) with the smallest median |p50 error| over the family's runs in the other sweeps.
A family whose runs reorder nothing keeps the ``c`` it had (``r`` is 0 there), so the term moves
only what the ``c`` of the families that spray stood in for.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from simulator.errors import SimulatorError
from simulator.host_model import best_cost

#: The term's name for ``sim validate --with``.
REORDER_TERM = "reordering"
#: Costs per reordered packet the fit tries: 0, then 10 us to 100 ms in steps of 10^(1/15) (17%).
REORDER_GRID: tuple[float, ...] = (0.0,) + tuple(1e-5 * 10 ** (i / 15) for i in range(61))


def reordered_per_iteration(record: dict[str, object]) -> float | None:
    """The reordered packets per iteration (iteration 0 left out) of the rank of ``record`` that
    saw most; None when no rank records them."""
    per_rank = []
    for job in (record.get("jobs") or {}).values():  # type: ignore[union-attr]
        for rank in (job.get("ranks") or {}).values():
            counts = [rec.get("reordered") for rec in (rank.get("records") or [])[1:]]
            if counts and all(c is not None for c in counts):
                per_rank.append(statistics.mean(float(c) for c in counts))
    return max(per_rank) if per_rank else None


def load_reordered(results: Path) -> dict[tuple[str, str], float]:
    """Per (sweep folder name, run id) under ``results`` (as :func:`simulator.fabric_runs.load_runs`
    names them): :func:`reordered_per_iteration`, for the runs that record it."""
    out: dict[tuple[str, str], float] = {}
    for f in sorted(results.rglob("runs/*.json")):
        try:
            record = json.loads(f.read_text())
        except (OSError, ValueError) as exc:
            raise SimulatorError(f"{f}: not a run record: {exc}") from None
        count = reordered_per_iteration(record)
        if count is not None:
            out[(f.parent.parent.name, str(record.get("run_id") or f.stem))] = count
    return out


def joint_best(grid: Sequence[float], curves: Sequence[Sequence[float]], reordered: Sequence[float],
               measured: Sequence[float], groups: Sequence[object] | None = None,
               reorder_grid: Sequence[float] = REORDER_GRID) -> tuple[float, float]:
    """The host cost of ``grid`` and cost per reordered packet of ``reorder_grid`` whose
    predictions (``curves[run][cost] + r * reordered[run]``) have the smallest median absolute
    relative p50 error against ``measured`` (ties: the smaller host cost, then the smaller ``r``);
    ``groups`` as in :func:`simulator.host_model.best_cost`."""
    if not curves or not (len(curves) == len(measured) == len(reordered)) or any(len(c) != len(grid) for c in curves):
        raise SimulatorError(f"{len(curves)} prediction curves, {len(reordered)} reorder counts for "
                             f"{len(measured)} runs on a grid of {len(grid)}")
    counts = np.asarray(reordered, dtype=float)
    rates = np.asarray(reorder_grid, dtype=float) if counts.any() else np.zeros(1)
    # Every (cost, rate) pair as one grid, in the order of the tie rule: cost first, then rate.
    flat = (np.asarray(curves, dtype=float)[:, :, None] + counts[:, None, None] * rates[None, None, :])
    best = int(best_cost(range(flat[0].size), flat.reshape(len(curves), -1).tolist(), measured, groups))
    c, r = divmod(best, len(rates))
    return float(grid[c]), float(rates[r])


def cross_validated_joint(runs: Sequence[tuple[str, str, float]], curves: Sequence[Sequence[float]],
                          reordered: Sequence[float], grid: Sequence[float], groups: Sequence[object] | None = None,
                          reorder_grid: Sequence[float] = REORDER_GRID) -> dict[tuple[str, str], tuple[float, float, int]]:
    """Leave one sweep out, as :func:`simulator.host_model.cross_validated`: for every (sweep,
    family) among ``runs`` (sweep, family, measured p50), the :func:`joint_best` (host cost, cost
    per reordered packet) over the family's runs in the *other* sweeps and how many there were."""
    by_family: dict[str, list[int]] = defaultdict(list)
    for i, (_, family, _) in enumerate(runs):
        by_family[family].append(i)
    out: dict[tuple[str, str], tuple[float, float, int]] = {}
    for family, members in by_family.items():
        for sweep in {runs[i][0] for i in members}:
            others = [i for i in members if runs[i][0] != sweep]
            if others:
                cost, rate = joint_best(grid, [curves[i] for i in others], [reordered[i] for i in others],
                                        [runs[i][2] for i in others],
                                        None if groups is None else [groups[i] for i in others], reorder_grid)
                out[(sweep, family)] = (cost, rate, len(others))
    return out


__all__ = ["REORDER_GRID", "REORDER_TERM", "cross_validated_joint", "joint_best", "load_reordered",
           "reordered_per_iteration"]
