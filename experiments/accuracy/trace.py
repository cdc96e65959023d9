"""A trace sweep's runs as accuracy conditions (``gradfabric experiment accuracy --trace DIR``).

The trace experiment's ranks record, per iteration, how many gradient values of each layer
were zero-filled (``lost_by_tensor``), not which packets. A run becomes condition
``counts-<run id>``: its counts, summed over the job's workers and divided by each layer's
values times the workers, are shares replayed by :class:`~experiments.accuracy.masks.CountedLoss`
(one worker loses the smallest-magnitude packets covering each share). The layers' sizes come
from the sweep's ``plan.json`` (the scaled trace model its ranks ran). Per scenario the run with
the most zero-filled values is chosen; its iteration p50 is the condition's iteration time.

A run whose ranks recorded loss masks (a DLCP ring: which values were zero-filled,
:mod:`experiments.trace_masks`; the sweep writes them to ``masks/<run id>.txt.gz``) is
replayed from them instead: condition ``recorded-<run id>``
(:class:`~experiments.accuracy.masks.RecordedLoss`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from experiments.accuracy.masks import CountedLoss, PacketLayout, shares_from_counts
from experiments.errors import ExperimentError

PREFIX = "counts-"
RECORDED = "recorded-"


def _read(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ExperimentError(f"{path}: cannot read a trace sweep's JSON ({exc})") from exc


def run_counts(record: dict[str, Any]) -> tuple[list[dict[int, int]], int]:
    """Per iteration, zero-filled values per tensor summed over the job's workers (not a
    parameter server), and the number of workers."""
    ranks = [r for j in record["jobs"].values() for r in j["ranks"].values() if r.get("role") != "server"]
    iterations = max((len(r["records"]) for r in ranks), default=0)
    out: list[dict[int, int]] = []
    for i in range(iterations):
        lost: dict[int, int] = {}
        for r in ranks:
            if i < len(r["records"]):
                for t, n in r["records"][i].get("lost_by_tensor", {}).items():
                    lost[int(t)] = lost.get(int(t), 0) + int(n)
        out.append(lost)
    return out, len(ranks)


def trace_tensor_values(folder: Path) -> list[int]:
    """Values of each layer of the model the sweep's ranks ran (its ``plan.json`` job)."""
    from experiments.training.trace_worker import TraceJob, scaled_model

    job = _read(folder / "plan.json").get("job")
    if not isinstance(job, dict):
        raise ExperimentError(f"{folder / 'plan.json'}: no job settings (not a trace sweep folder?)")
    return [layer.numel for layer in scaled_model(TraceJob(**job)).layers]


def counted_source(run_file: Path, layout: PacketLayout, name: str) -> CountedLoss:
    """The mask source of one trace run file (``<sweep>/runs/<run>.json``)."""
    values = trace_tensor_values(run_file.parent.parent)
    counts, workers = run_counts(_read(run_file))
    return CountedLoss(layout, shares_from_counts(counts, values, max(1, workers)), len(values), name)


def lossiest_runs(folder: Path) -> tuple[dict[str, Path], dict[str, float]]:
    """Per scenario, the finished run with the most zero-filled values (scenarios where none
    lost anything are left out): condition name -> run file, and condition -> iteration p50 (s)."""
    from experiments.trace_report import run_figures

    files = sorted((folder / "runs").glob("*.json"))
    if not files:
        raise ExperimentError(f"{folder}: no runs/*.json (not a trace sweep folder?)")
    best: dict[str, tuple[int, Path, float]] = {}
    for path in files:
        record = _read(path)
        if record.get("status") != "ok":
            continue
        figures = run_figures(record)
        lost = int(figures["lost_values"])
        if lost > 0 and lost > best.get(record["scenario"], (0, path, 0.0))[0]:
            best[record["scenario"]] = (lost, path, float(figures["p50_s"]))
    runs: dict[str, Path] = {}
    times: dict[str, float] = {}
    for _, path, p50 in best.values():
        recorded = folder / "masks" / f"{path.stem}.txt.gz"
        name = f"{RECORDED}{path.stem}" if recorded.exists() else f"{PREFIX}{path.stem}"
        runs[name] = recorded if recorded.exists() else path
        times[name] = p50
    return runs, times
