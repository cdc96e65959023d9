"""What the tests of `sim validate` share: a one-layer job and committed-run folders written
by hand (a sweep's ``runs/*.json``, its ``plan.json`` or ``results.json``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from simulator.fabric_runs import Run, load_runs
from simulator.traces import Layer, ModelTrace

#: One tensor of 722 fp32 values, 2,888 bytes: two DLCP packets (a ring of two handles 4 at its
#: busiest host: 2 sent, 2 received), 1 ms forward and 1 ms backward.
ONE_LAYER = ModelTrace("one", (Layer(0, "w", 722, 0.001, 0.001),))
#: A trace-driven sweep's job as ``plan.json`` records it (the H100 ResNet-50 at k = 8, b = 13).
TRACE_PLAN: dict[str, Any] = {"job": {"model": "resnet50", "precision": "fp32", "k": 8.0, "port_pps": 20000.0},
                              "scale": {"b": 13.0}}


def iterations(times: list[float] | int, seconds: float = 0.1) -> list[dict[str, Any]]:
    """A rank's per-iteration records: ``times`` as given, or that many of ``seconds`` each."""
    values = [seconds] * times if isinstance(times, int) else times
    return [{"iteration": i, "iteration_s": t} for i, t in enumerate(values)]


def write_sweep(root: Path, name: str, runs: dict[str, dict[str, Any]], *, plan: dict[str, Any] | None = None,
                meta: dict[str, Any] | None = None, readme: str | None = None) -> Path:
    """A sweep folder ``root/name`` holding ``runs`` (file stem -> record, ``status`` ``ok``
    unless the record says otherwise), with ``plan.json``, ``results.json``'s ``meta`` and
    ``README.md`` where given; returns the folder."""
    sweep = root / name
    (sweep / "runs").mkdir(parents=True, exist_ok=True)
    for stem, record in runs.items():
        (sweep / "runs" / f"{stem}.json").write_text(json.dumps({"status": "ok", **record}))
    if plan is not None:
        (sweep / "plan.json").write_text(json.dumps(plan))
    if meta is not None:
        (sweep / "results.json").write_text(json.dumps({"meta": meta}))
    if readme is not None:
        (sweep / "README.md").write_text(readme)
    return sweep


def one_run(root: Path, record: dict[str, Any], **sweep: Any) -> Run:
    """The one run :func:`simulator.fabric_runs.load_runs` reads from a sweep of ``record`` alone."""
    write_sweep(root, "trace-1", {"000-run-r0": record}, **sweep)
    (run,) = load_runs(root)
    return run


def ring_record(scenario: str, config: str, *, ranks: int = 1, times: list[float] | int = 2,
                **extra: Any) -> dict[str, Any]:
    """A run record of one job whose ``ranks`` ranks recorded ``times`` (see :func:`iterations`)."""
    return {"scenario": scenario, "config": config,
            "jobs": {"1": {"ranks": {str(r): {"records": iterations(times)} for r in range(ranks)}}}, **extra}
