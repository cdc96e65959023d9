"""`gradfabric sim validate RESULTS_DIR`: the simulator against the training experiment's raw
runs (``runs/*.json`` of ``gradfabric experiment training`` and ``experiment trace``).

Runs are grouped by job (CNN or H100 trace), scenario, configuration and port rate; the
measured iteration times of all ranks (iteration 0 left out) are pooled into p50 and p99.
Each run is predicted by :mod:`simulator.run_model` (its module doc) from its scenario and what
its record says of its conditions, with a host cost per packet ``c`` of its family **calibrated
leave-one-sweep-out**: the cost with the smallest median p50 error over the family's runs in the
other sweeps, never on the sweep predicted. A family no other sweep ran is left uncalibrated and
out of the table's error. With ``--with reordering`` (off by default: it did not hold leave one
sweep out, simulator/README.md), a cost per reordered packet fitted with it
(:mod:`simulator.reorder_model`): each run's iterations are charged its recorded reordered
packets at that cost.

* **Ranking**: per scenario, the configurations by p50, measured against predicted; a pair
  counts as clearly ordered when 95% of resamples of whole runs keep its measured order, and
  the table says whether every such pair is kept beside the strict ranking.
"""

from __future__ import annotations

import hashlib
import re
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from gradfabric.traces import merge_layers
from simulator.calibration_cache import CurveCache, fingerprint
from simulator.errors import SimulatorError
from simulator.fabric_runs import Run, load_runs, not_results, timing_logged
from simulator.host_model import COST_GRID, CPU_MEASURES, DEFAULT_CPU_MEASURE, best_cost, cross_validated, run_available
from simulator.ranking import rank_row
from simulator.reorder_model import REORDER_TERM, cross_validated_joint, joint_best, load_reordered
from simulator.run_model import TERMS, _b, cost_family, predict_run, scaled_trace
from simulator.traces import ModelTrace, load_trace
from simulator.validate_report import clean_section, summary, write_report

#: The spread of iterations about their median (``spread``, :func:`iteration_spread`): for the
#: trace-driven job, whose compute is a timed sleep, the family's runs in the other sweeps;
#: a CNN run's host time is replayed from loopback runs, which carry its own.
#: The same configuration's runs where another sweep ran it, else the family's (``SPREAD_BY_CONFIG``).
SPREAD_KINDS, SPREAD_SEED, SPREAD_BY_CONFIG = ("trace",), 1_000_003, True
CALIBRATION_DRAWS = 200
#: Sweeps reported apart as well (``validate``'s ``clean``): the 10-pair sweep (experiments/README.md,
#: "The 10-pair sweep"; one commit, 10 interleaved rounds, a quiet machine), by folder name.
CLEAN_PREFIX, CLEAN_TITLE = "trace10-", "The 10-pair sweep alone"


def run_seed(run: Run) -> int:
    """``run``'s seed for its draws: a digest of its sweep folder's and run's names, not its place
    among the runs read, so that reading another folder or leaving one out changes no other run's
    prediction."""
    return int.from_bytes(hashlib.sha256(f"{run.sweep}/{run.run_id}".encode()).digest()[:8], "big")


def pair_key(run: Run) -> tuple[str, str]:
    """The sweep and round a run was made in (its id's ``-rN``; runs of one sweep and round were
    made side by side), the key the ranking's paired rule matches runs by."""
    found = re.search(r"-r(\d+)$", run.run_id)
    return run.sweep, found.group(1) if found else run.run_id


def host_baseline(folder: Path, cpu_measure: str = DEFAULT_CPU_MEASURE) -> dict[str, tuple[list[float], float]]:
    """Iteration times of runs without the fabric (``--loopback``) per configuration and per
    communication (``comm:gloo``, ``comm:dlcp``), with the CPU share those runs got."""
    found: dict[str, tuple[list[float], list[float]]] = {}
    for run in load_runs(folder):
        keys = [run.config] + ([f"comm:{run.spec.comm}"] if run.kind == "cnn" else [])
        for key in keys:
            times, cpus = found.setdefault(key, ([], []))
            times.extend(run.iterations)
            cpus.append(run_available(run, cpu_measure)[0])
    return {key: (times, statistics.mean(cpus)) for key, (times, cpus) in found.items()}


@dataclass
class _Inputs:
    job: ModelTrace
    host_iterations: list[float] | None
    baseline_available: float


def _inputs(run: Run, cnn: ModelTrace | None, traces: Path, hosts: dict[str, tuple[list[float], float]],
            cache: dict[tuple[str, ...], ModelTrace]) -> _Inputs:
    if run.job:
        key = (str(run.job["model"]), str(run.job["precision"]), str(_b(run.job)), str(run.job["k"]))
        if key not in cache:
            trace = scaled_trace(run.job, traces)
            cache[key] = merge_layers(trace) if run.job.get("layers", "layer") == "layer" else trace
        return _Inputs(cache[key], None, 1.0)
    if cnn is None:
        raise SimulatorError("the CNN job's runs need --job-trace (a `sim profile` of the job)")
    if not hosts:
        return _Inputs(cnn, None, 1.0)
    host = hosts.get(run.config) or hosts.get(f"comm:{run.spec.comm}")
    if not host:
        raise SimulatorError(f"the baseline has no run of {run.config} or its communication")
    return _Inputs(cnn, host[0], host[1])


def _error(predicted: float, measured: float) -> float:
    return (predicted - measured) / measured


@dataclass
class Calibration:
    """Every run's inputs and its predicted p50 on :data:`COST_GRID` (``curves``, one per run
    in ``calibration``: sweep, family, measured p50; ``members``: their indices among the runs),
    or why it cannot be predicted."""

    inputs: dict[int, _Inputs]
    reasons: dict[int, str]
    calibration: list[tuple[str, str, float]]
    curves: list[list[float]]
    members: list[int] = field(default_factory=list)


def calibrate(runs: Sequence[Run], cnn: ModelTrace | None, traces: Path, hosts: dict[str, tuple[list[float], float]],
              *, progress: bool = True, cpu_measure: str = DEFAULT_CPU_MEASURE,
              without: frozenset[str] = frozenset(), cache_dir: Path | None = None) -> Calibration:
    """Predict every run's p50 on the grid of host costs (the slow part of :func:`validate`);
    with ``cache_dir``, curves computed before for the same code and settings are read from it
    (:mod:`simulator.calibration_cache`)."""
    import sys

    cache: dict[tuple[str, ...], ModelTrace] = {}
    cal = Calibration({}, {}, [], [], [])
    h100 = traces / "h100_pytorch_layer_traces.csv"
    curves = CurveCache(cache_dir, fingerprint([cpu_measure, ",".join(sorted(without)), repr(cnn), repr(sorted(hosts.items())),
                                                hashlib.sha256(h100.read_bytes()).hexdigest() if h100.exists() else "",
                                                repr(COST_GRID), str(CALIBRATION_DRAWS)])) if cache_dir else None
    for i, run in enumerate(runs):
        if progress and (i + 1) % 20 == 0:
            print(f"calibration: {i + 1} of {len(runs)} runs on {len(COST_GRID)} host costs", file=sys.stderr,
                  flush=True)
        try:
            inp = cal.inputs[i] = _inputs(run, cnn, traces, hosts, cache)
            curve = curves.get(run) if curves else None
            if curve is None:
                curve = [float(np.median(predict_run(run, inp.job, cost, host_iterations=inp.host_iterations,
                                                     baseline_available=inp.baseline_available, draws=CALIBRATION_DRAWS,
                                                     cpu_measure=cpu_measure, without=without).draws))
                         for cost in COST_GRID]
                if curves:
                    curves.put(run, curve)
            cal.curves.append(curve)
            cal.calibration.append((run.sweep, cost_family(run, cpu_measure, without), run.p50_s))
            cal.members.append(i)
        except SimulatorError as exc:
            cal.reasons[i] = str(exc)
    if curves:
        curves.save()
    return cal


def iteration_spread(runs: Sequence[Run], kinds: Sequence[str] = SPREAD_KINDS,
                     by_config: bool = True) -> dict[tuple[str, str, str], np.ndarray]:
    """Per (sweep, family, configuration) of the ``kinds`` given: the iteration times of the
    same configuration's runs in the *other* sweeps (with ``by_config``; where no other sweep
    ran it, or without ``by_config``: the family's), each over its own run's p50 (the spread of
    iterations about their median that those runs recorded). None from the sweep itself, as
    for the host cost."""
    ratios = [(run.sweep, run.family, run.config, np.asarray(run.iterations, dtype=float) / run.p50_s)
              for run in runs if run.kind in kinds]
    out: dict[tuple[str, str, str], np.ndarray] = {}
    for sweep, family, config in {r[:3] for r in ratios}:
        same = [x for sw, f, c, x in ratios if sw != sweep and f == family and c == config] if by_config else []
        others = same or [x for sw, f, _, x in ratios if sw != sweep and f == family]
        if others:
            out[(sweep, family, config)] = np.concatenate(others)
    return out


def validate(results: Path, out: Path, job_trace: Path | None, traces: Path, command: str,
             baseline: Path | None = None, *, progress: bool = True, cpu_measure: str = DEFAULT_CPU_MEASURE,
             without: frozenset[str] = frozenset(), calibrated: Calibration | None = None,
             clean: str = CLEAN_PREFIX, notes: str = "", leave_out: tuple[str, ...] = (),
             cache_dir: Path | None = None, with_terms: frozenset[str] = frozenset()) -> str:
    """Calibrate (leave one sweep out), predict, compare; write ``validation.md``, ``.csv`` and
    ``.png`` under ``out`` and return the Markdown. ``cpu_measure``: how a run's CPU share is
    taken (:data:`simulator.host_model.CPU_MEASURES`); ``without``: :data:`TERMS` left out;
    ``calibrated``: :func:`calibrate`'s result for the same runs and settings, if at hand; ``clean``:
    sweeps whose folder name starts so are also summarised alone (:func:`clean_set`; "": none);
    ``notes``: Markdown put under the ranking table; ``leave_out``: sweeps whose folder name starts
    so are not read (named above the table); ``cache_dir``: :func:`calibrate`'s cache; ``with_terms``: terms
    off by default put in (the ``reordering`` term, :mod:`simulator.reorder_model`)."""
    under_ranking = notes
    if not without <= set(TERMS):
        raise SimulatorError(f"unknown model terms {sorted(without - set(TERMS))}; known: {', '.join(TERMS)}")
    if not with_terms <= {REORDER_TERM}:
        raise SimulatorError(f"unknown terms to put in {sorted(with_terms - {REORDER_TERM})}; known: {REORDER_TERM}")
    reorder = REORDER_TERM in with_terms  # added after the curves: they do not depend on it
    if cpu_measure not in CPU_MEASURES:
        raise SimulatorError(f"unknown CPU measure {cpu_measure!r}; choose from {', '.join(CPU_MEASURES)}")
    runs = [run for run in load_runs(results) if not (leave_out and run.sweep.startswith(leave_out))]
    left = sorted({run.sweep for run in load_runs(results)} - {run.sweep for run in runs})
    cnn = load_trace(job_trace) if job_trace is not None else None
    hosts = host_baseline(baseline, cpu_measure) if baseline is not None else {}
    cal = calibrated or calibrate(runs, cnn, traces, hosts, progress=progress, cpu_measure=cpu_measure,
                                  without=without, cache_dir=cache_dir)
    inputs, reasons, calibration, curves = cal.inputs, cal.reasons, cal.calibration, cal.curves
    spread = {} if "spread" in without else iteration_spread(runs, SPREAD_KINDS, by_config=SPREAD_BY_CONFIG)
    keys = [(runs[j].kind, runs[j].scenario_label, runs[j].port_pps, runs[j].config) for j in cal.members]
    counts = load_reordered(results) if reorder else {}
    reordered = [counts.get((runs[j].sweep, runs[j].run_id), 0.0) for j in cal.members]
    joint = cross_validated_joint(calibration, curves, reordered, COST_GRID, groups=keys) if reorder else {}
    costs = {k: (c, n) for k, (c, _, n) in joint.items()} if reorder else \
        cross_validated(calibration, curves, groups=keys)
    family_rows = []
    for family in sorted({f for _, f, _ in calibration}):
        members = [i for i, (_, f, _) in enumerate(calibration) if f == family]
        sweeps = sorted({calibration[i][0] for i in members})
        folds = sorted({round(costs[(sw, family)][0] * 1e6) for sw in sweeps if (sw, family) in costs})
        fit = ([curves[i] for i in members], [calibration[i][2] for i in members], [keys[i] for i in members])
        every, every_r = joint_best(COST_GRID, fit[0], [reordered[i] for i in members], *fit[1:]) if reorder \
            else (best_cost(COST_GRID, *fit), 0.0)
        rates = sorted({round(joint[(sw, family)][1] * 1e6) for sw in sweeps if (sw, family) in joint})
        per_r = f"; per reordered packet {', '.join(f'{r:,}' for r in rates)} us" if any(rates) else ""
        family_rows.append([family, str(len(sweeps)), str(len(members)),
                            (", ".join(f"{c:,}" for c in folds) or "- (one sweep)") + per_r,
                            f"{every * 1e6:,.0f}" + (f" + {every_r * 1e6:,.0f} us per reordered packet" if every_r else "")])
    groups: dict[tuple[str, str, float, str], list[int]] = defaultdict(list)
    for i, run in enumerate(runs):
        groups[(run.kind, run.scenario_label, run.port_pps, run.config)].append(i)
    order = {c: n for n, c in enumerate(("gloo", "ddp-tcp", "ddp-tcp-qos", "ddp-tcp-rto", "p3-tcp", "reliable",
                                         "transport", "qos", "transport-qos", "priority", "dropping", "spraying",
                                         "dlcp", "dlcp-merged", "commodity"))}
    rows: list[list[str]] = []
    points: list[tuple[str, float, float, float, float]] = []
    errors: dict[str, list[float]] = defaultdict(list)
    by_scenario: dict[tuple[str, str, float], dict[str, tuple[float, float]]] = defaultdict(dict)
    run_times: dict[tuple[str, str, float, str], list[list[float]]] = {}
    run_keys: dict[tuple[str, str, float, str], list[tuple[str, str]]] = {}
    run_draws: dict[int, np.ndarray] = {}
    for key in sorted(groups, key=lambda k: (k[0], k[1], k[2], order.get(k[3], 99))):
        kind, scenario, pps, config = key
        members = [runs[i] for i in groups[key]]
        measured = [t for r in members for t in r.iterations]
        m50, m99 = float(np.percentile(measured, 50)), float(np.percentile(measured, 99))
        exposed = [t for r in members for t in r.exposed]
        cpu = [run_available(r, cpu_measure) for r in members]
        sources = sorted({source for _, source in cpu})
        starved = statistics.median(1 - a for a, _ in cpu)
        base = [kind, scenario, f"{pps:,.0f}", config, str(len({r.sweep for r in members})), str(len(members)),
                "-" if sources == ["-"] else f"{starved:.2f} ({', '.join(sources)})", f"{m50 * 1e3:,.1f}"]
        mexp = f"{statistics.median(exposed) * 1e3:,.1f}" if exposed else "-"
        draws, plain, preds, notes, cal = [], [], [], [], []
        try:
            for i in groups[key]:
                run = runs[i]
                if i in reasons:
                    raise SimulatorError(reasons[i])
                family = cost_family(run, cpu_measure, without)
                if (run.sweep, family) not in costs:
                    raise SimulatorError(f"family {family} ran in no other sweep: uncalibrated")
                cost, n = costs[(run.sweep, family)]
                inp = inputs[i]
                seed = run_seed(run)
                pred = predict_run(run, inp.job, cost, host_iterations=inp.host_iterations,
                                   baseline_available=inp.baseline_available, seed=seed, cpu_measure=cpu_measure,
                                   without=without)
                zero = predict_run(run, inp.job, 0.0, host_iterations=inp.host_iterations,
                                   baseline_available=inp.baseline_available, seed=seed, cpu_measure=cpu_measure,
                                   without=without)
                rate = joint[(run.sweep, family)][1] if reorder else 0.0
                waits = rate * counts.get((run.sweep, run.run_id), 0.0)
                if waits:
                    pred = replace(pred, draws=pred.draws + waits,
                                   note=pred.note + f"; reordered {waits / rate:,.0f}/iteration at {rate * 1e6:,.0f} us")
                ratios = spread.get((run.sweep, run.family, run.config))
                factor = np.random.default_rng(SPREAD_SEED + seed).choice(ratios, len(pred.draws)) \
                    if ratios is not None else 1.0
                draws.append(pred.draws * factor)
                run_draws[i] = draws[-1]
                plain.append(zero.draws * factor)
                preds.append(pred)
                cal.append((cost, n))
                notes.append(pred.note)
        except SimulatorError as exc:
            rows.append(base + ["-", "-", "-", "out of reach", f"{m99 * 1e3:,.1f}", "-", "-", mexp, "-", str(exc)])
            continue
        pooled, pooled0 = np.concatenate(draws), np.concatenate(plain)
        p50, p99, p50_0 = (float(np.percentile(pooled, 50)), float(np.percentile(pooled, 99)),
                           float(np.percentile(pooled0, 50)))
        e50, e99 = _error(p50, m50), _error(p99, m99)
        errors[kind].append(abs(e50))
        by_scenario[(kind, scenario, pps)][config] = (m50, p50)
        run_times[(kind, scenario, pps, config)] = [r.iterations for r in members]
        run_keys[(kind, scenario, pps, config)] = [pair_key(r) for r in members]
        points.append((f"{kind} {scenario} {config} {pps / 1e3:,.0f}k", m50, p50, m99, p99))
        costs_us = sorted({round(c * 1e6) for c, _ in cal})
        cost_text = "/".join(f"{c:,}" for c in costs_us) + f" (on {min(n for _, n in cal)}+ runs)"
        rows.append(base + [f"{p50_0 * 1e3:,.1f}", cost_text, f"{p50 * 1e3:,.1f}", f"{e50:+.0%}",
                            f"{m99 * 1e3:,.1f}", f"{p99 * 1e3:,.1f}", f"{e99:+.0%}", mexp,
                            f"{statistics.median(p.exposed_s for p in preds) * 1e3:,.1f}",
                            f"family {cost_family(members[0], cpu_measure, without)}; " + notes[0].split("; ", 2)[-1]])
    rank_rows = [[kind, scenario, f"{pps:,.0f}"]
                 + rank_row({c: v[0] for c, v in values.items()}, {c: v[1] for c, v in values.items()},
                            {c: run_times[(kind, scenario, pps, c)] for c in values},
                            {c: run_keys[(kind, scenario, pps, c)] for c in values})
                 for (kind, scenario, pps), values in sorted(by_scenario.items()) if len(values) >= 2]
    skipped = not_results(results)
    note = (f"Left out: the runs of {', '.join(skipped)}, whose README.md marks them as no result of the "
            "project's code.\n\n" if skipped else "")
    timed = timing_logged(results)
    if timed:
        note += (f"Left out: the runs of {', '.join(timed)}, made with timing logs on (a changed measurement: "
                 "the logs take the ranks' CPU), diagnostics.\n\n")
    if left:
        note += f"Left out by the command (`--leave-out {','.join(leave_out)}`): the runs of {', '.join(left)}.\n\n"
    section = ""
    if clean:
        section, clean_errors, clean_ranks = clean_set(runs, run_draws, clean)
        if section:
            note += f"{CLEAN_TITLE} (the section below): " + summary(clean_errors, clean_ranks) + "\n\n"
    return write_report(out, command, rows, rank_rows, points, errors, family_rows, note, section, under_ranking)


def clean_set(runs: Sequence[Run], run_draws: dict[int, np.ndarray],
              prefix: str) -> tuple[str, dict[str, list[float]], list[list[str]]]:
    """The runs of the sweeps named ``prefix``* alone, grouped as in the table, each with the
    predicted draws it has there (``run_draws`` by run index; runs out of reach are left out):
    the Markdown section (:func:`simulator.validate_report.clean_section`), the |p50 errors| by
    job kind and the ranking rows."""
    groups: dict[tuple[str, str, float, str], list[int]] = defaultdict(list)
    for i, run in enumerate(runs):
        if run.sweep.startswith(prefix) and i in run_draws:
            groups[(run.kind, run.scenario_label, run.port_pps, run.config)].append(i)
    rows, errors = [], defaultdict(list)
    values: dict[tuple[str, str, float], dict[str, tuple[float, float, list[list[float]], list[tuple[str, str]]]]] = \
        defaultdict(dict)
    for (kind, scenario, pps, config), members in sorted(groups.items()):
        m50 = float(np.percentile([t for i in members for t in runs[i].iterations], 50))
        p50 = float(np.percentile(np.concatenate([run_draws[i] for i in members]), 50))
        errors[kind].append(abs(_error(p50, m50)))
        values[(kind, scenario, pps)][config] = (m50, p50, [runs[i].iterations for i in members],
                                                 [pair_key(runs[i]) for i in members])
        rows.append([kind, scenario, f"{pps:,.0f}", config, str(len(members)), f"{m50 * 1e3:,.1f}",
                     f"{p50 * 1e3:,.1f}", f"{_error(p50, m50):+.0%}"])
    rank_rows = [[kind, scenario, f"{pps:,.0f}"]
                 + rank_row({c: v[0] for c, v in found.items()}, {c: v[1] for c, v in found.items()},
                            {c: v[2] for c, v in found.items()},
                            {c: v[3] for c, v in found.items()})
                 for (kind, scenario, pps), found in sorted(values.items()) if len(found) >= 2]
    sweeps = sorted({runs[i].sweep for members in groups.values() for i in members})
    return clean_section(CLEAN_TITLE, sweeps, errors, rows, rank_rows), dict(errors), rank_rows


__all__ = ["CALIBRATION_DRAWS", "CLEAN_PREFIX", "Calibration", "calibrate", "clean_set", "host_baseline",
           "iteration_spread", "pair_key", "run_seed", "validate"]
