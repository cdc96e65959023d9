"""`gradfabric sim port-predict`: the validation model's prediction for a sweep at another port
rate, made before its runs exist.

Each run of the source sweeps (the same scenarios and configurations, at their own port rate)
is predicted twice with :func:`simulator.run_model.predict_run`: as recorded, and moved to the
new port rate with the scaling rule's ``k`` for it (``b`` unchanged, as ``experiment trace
--port-pps`` keeps it: the same bytes per rank and queues in packets). Moved, the run's
recorded compute is stretched by the ratio of the ``k``s and a tuned ``rto_min`` with it
(the experiment scales its timers by ``k``); the CPU shares, tenants' shares and background
are what the source run recorded, or (``free``) an uncontended CPU: the two bracket what the
hosts will get when they move four times fewer packets a second. The host cost per packet of
each family is given (by default the committed validation table's figure fitted on every
run); the moved runs run the hosts' code of today, which answers probes in C (its DLCP host
terms at :data:`simulator.run_model.HOST_CODE_CPU`). Each draw is multiplied by the spread of
iterations about their median that the same configuration's runs in the *other* sweeps under
the results folder recorded (:func:`simulator.validate.iteration_spread`, as ``sim validate``
does): without it the p50 of a hashed job's draws falls on either side of the uplink
collision, drawn half the time.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from gradfabric.traces import merge_layers
from simulator.errors import SimulatorError
from simulator.fabric_runs import C_ANSWERS_CODE, Run, load_runs
from simulator.host_model import DEFAULT_CPU_MEASURE
from simulator.ranking import rank_row
from simulator.traces import ModelTrace
from simulator.run_model import HOST_CODE_CPU, P3_RING_FAMILY, _b, cost_family, predict_run, scaled_trace
from simulator.validate import SPREAD_SEED, iteration_spread, pair_key

#: Host cost per packet by family (the committed validation table's "fitted on every run" when
#: kernel TCP had one family): kernel TCP 7 us, a P3 ring's kernel TCP the same unless given
#: (:data:`simulator.run_model.P3_RING_FAMILY`), the GSO DLCP transport at its per-process CPU share 14 us.
DEFAULT_COSTS: dict[str, float] = {"trace/tcp": 7e-6, "trace/tcp" + P3_RING_FAMILY: 7e-6,
                                   "trace/dlcp+ecn (gso) [per process]": 14e-6}
CONDITIONS = ("recorded", "free")
DRAWS = 400


def moved(run: Run, port_pps: float, k: float, condition: str = "recorded", code: str = C_ANSWERS_CODE[0]) -> Run:
    """``run`` at ``port_pps`` with the job's time multiplier ``k`` (``b`` kept), on the hosts'
    ``code``: recorded compute and a tuned ``rto_min`` times ``k`` over the run's; ``condition``
    ``free`` gives every process the whole CPU it wants (no wait, no starvation, no load)."""
    if run.job is None:
        raise SimulatorError(f"{run.sweep}/{run.run_id}: only a trace-driven run can be moved to another port rate")
    if port_pps <= 0 or k <= 0 or condition not in CONDITIONS:
        raise SimulatorError(f"bad port rate {port_pps}, k {k} or condition {condition!r} (one of {CONDITIONS})")
    f = k / float(run.job["k"])
    job = {**run.job, "b": _b(run.job), "k": k, "port_pps": port_pps}
    new = replace(run, port_pps=port_pps, job=job, compute=[c * f for c in run.compute], code=code,
                  answered_in_c=None, rto_min_s=run.rto_min_s * f if run.rto_min_s else None)
    if condition == "free":
        new = replace(new, starvation=0.0, load=None, cpu_wait=0.0 if new.cpu_use is not None else None,
                      switch_cpu={name: (use, 0.0) for name, (use, _) in new.switch_cpu.items()})
    return new


def predict_group(runs: Sequence[Run], traces: Path, costs: Mapping[str, float], *, seed: int = 0,
                  spread: Mapping[tuple[str, str, str], np.ndarray] | None = None, q: float = 50.0) -> float:
    """The ``q``-th percentile (p50 by default) of the pooled draws of ``runs``, each with its
    family's cost from ``costs`` and multiplied by a ratio drawn from ``spread`` (by sweep, family
    and configuration) where given."""
    draws = []
    cache: dict[tuple[str, ...], ModelTrace] = {}
    for i, run in enumerate(runs):
        assert run.job is not None
        family = cost_family(run, DEFAULT_CPU_MEASURE)
        if family not in costs:
            raise SimulatorError(f"no host cost for family {family} (given: {', '.join(sorted(costs))})")
        key = (str(run.job["model"]), str(run.job["precision"]), str(_b(run.job)), str(run.job["k"]))
        if key not in cache:
            cache[key] = merge_layers(scaled_trace(run.job, traces))
        pred = predict_run(run, cache[key], costs[family], draws=DRAWS, seed=seed + i).draws
        ratios = (spread or {}).get((run.sweep, run.family, run.config))
        draws.append(pred * (np.random.default_rng(SPREAD_SEED + seed + i).choice(ratios, len(pred))
                             if ratios is not None else 1.0))
    return float(np.percentile(np.concatenate(draws), q))


def stand_in(run: Run, config: str, loss_rate: float | None = None) -> Run:
    """``run``'s record standing in for a run of ``config`` that no sweep made: its CPU shares,
    load, background and compute, the DLCP transport's loss per packet ``loss_rate`` where given
    (the recorded one belongs to the record's own queue and marks), else the record's."""
    new = replace(run, config=config, loss_rate=run.loss_rate if loss_rate is None else loss_rate)
    if new.spec.comm != "dlcp" and loss_rate is not None:
        raise SimulatorError(f"{config}: a loss per packet is the DLCP transport's record, not kernel TCP's")
    if not 0 <= (new.loss_rate or 0.0) < 1:
        raise SimulatorError(f"{config}: loss per packet {loss_rate} is not in [0, 1)")
    return new


def port_predict(sources: Sequence[Path], port_pps: float, k: float, traces: Path, command: str,
                 costs: Mapping[str, float] | None = None, results: Path | None = None,
                 stand_ins: Mapping[str, tuple[str, float | None]] | None = None) -> str:
    """The Markdown table: per scenario x configuration of the ``sources``' runs, the measured
    and predicted p50 at the runs' own port rate, and the p50 predicted at ``port_pps`` and
    ``k`` under both :data:`CONDITIONS`, with the speed-up over DDP-style TCP (``ddp-tcp``); the
    spread from the sources' runs and those under ``results`` (default: the first source's parent
    folder) but the others of the sources' scenarios at ``port_pps`` (runs already made there are
    not what a prediction before them may see). ``stand_ins`` (configuration -> source configuration, loss per packet
    or None) predicts configurations no source ran from another's records (:func:`stand_in`)."""
    costs = dict(DEFAULT_COSTS if costs is None else costs)
    groups: dict[tuple[str, str], list[Run]] = defaultdict(list)
    for source in sources:
        for run in load_runs(source):
            if run.job is not None:
                groups[(run.scenario, run.config)].append(run)
    if not groups:
        raise SimulatorError(f"no trace-driven runs under {', '.join(map(str, sources))}")
    for config, (source_config, loss) in (stand_ins or {}).items():
        if any(c == config for _, c in groups):
            raise SimulatorError(f"{config} ran in the sources: predict it from its own runs")
        found = [(s, runs) for (s, c), runs in list(groups.items()) if c == source_config]
        if not found:
            raise SimulatorError(f"{config}: no runs of {source_config} in the sources to stand in")
        for scenario, runs in found:
            groups[(scenario, config)] = [stand_in(r, config, loss) for r in runs]
    ran = [r for (_, c), runs in groups.items() if c not in (stand_ins or {}) for r in runs]
    names, scenarios = {r.sweep for r in ran}, {s for s, _ in groups}
    pool = [r for r in load_runs(results or sources[0].parent)
            if r.sweep not in names and not (r.port_pps == port_pps and r.scenario in scenarios)]
    spread = iteration_spread(pool + ran)
    # A stand-in's spread from the runs of its configuration (else family) that were made, one
    # key at a time: the records standing in hold another configuration's iterations.
    for run in {(r.sweep, r.family, r.config): r for (_, c), runs in groups.items() if c in (stand_ins or {})
                for r in runs}.values():
        spread.update({k: v for k, v in iteration_spread(pool + [run]).items() if k[0] == run.sweep})
    table: dict[tuple[str, str], list[float]] = {}
    for n, ((scenario, config), runs) in enumerate(sorted(groups.items())):
        measured = statistics.median(t for r in runs for t in r.iterations)
        here = predict_group(runs, traces, costs, seed=1000 * n, spread=spread)
        there = [predict_group([moved(r, port_pps, k, c) for r in runs], traces, costs, seed=1000 * n, spread=spread)
                 for c in CONDITIONS]
        p99 = predict_group([moved(r, port_pps, k) for r in runs], traces, costs, seed=1000 * n, spread=spread, q=99)
        table[(scenario, config)] = [measured, here, *there, p99]
    pps_from = sorted({f"{r.port_pps:,.0f}" for runs in groups.values() for r in runs})
    lines = [f"Made by `{command}`. Model: simulator/port_predict.py (module doc).", "",
             f"Host cost per packet: {', '.join(f'{f} {c * 1e6:g} us' for f, c in sorted(costs.items()))}; "
             f"at the new port rate the DLCP transport's host terms x {HOST_CODE_CPU['c-answers']:g} "
             "(probes answered in C).", "",
             f"| scenario | configuration | runs | p50 measured at {'/'.join(pps_from)} pkt/s (ms) | "
             f"predicted there (ms) | predicted at {port_pps:,.0f} pkt/s, k = {k:g}, CPU as recorded (ms) | "
             "speed-up over ddp-tcp | predicted, CPU uncontended (ms) | speed-up over ddp-tcp | "
             "p99 predicted, CPU as recorded (ms) |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for (scenario, config), (measured, here, rec, free, p99) in table.items():
        base = table.get((scenario, "ddp-tcp"))
        up = (f"{base[2] / rec:.2f}x", f"{base[3] / free:.2f}x") if base else ("-", "-")
        shown = "-" if config in (stand_ins or {}) else f"{measured * 1e3:,.1f}"
        lines.append(f"| {scenario} | {config} | {len(groups[(scenario, config)])} | {shown} | "
                     f"{here * 1e3:,.1f} | {rec * 1e3:,.1f} | {up[0]} | {free * 1e3:,.1f} | {up[1]} | {p99 * 1e3:,.1f} |")
    if stand_ins:
        lines += ["", "Configurations no source ran, predicted from another's records (CPU shares, load, background, "
                  "compute): " + "; ".join(f"{c} from {src}'s" + (f", the DLCP transport's loss {loss:.2%}/pkt" if loss
                                                                   is not None else ", their recorded loss")
                                          for c, (src, loss) in sorted(stand_ins.items())) + "."]
    return "\n".join(lines) + "\n"


def read_prediction(path: Path, column: int = 5) -> dict[tuple[str, str], float]:
    """The p50s (seconds) a committed ``prediction.md`` of :func:`port_predict` gave with the CPU
    as recorded, by scenario and configuration (``column`` 9: its p99s)."""
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise SimulatorError(f"{path}: {exc.strerror}") from None
    out: dict[tuple[str, str], float] = {}
    for line in lines:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) > column and cells[2].isdigit():
            out[(cells[0], cells[1])] = float(cells[column].replace(",", "")) / 1e3
    if not out:
        raise SimulatorError(f"{path}: no prediction table")
    return out


def against(targets: Sequence[Path], traces: Path, costs: Mapping[str, float] | None = None,
            results: Path | None = None, before: Mapping[tuple[str, str], float] | None = None,
            before_p99: Mapping[tuple[str, str], float] | None = None) -> str:
    """The runs made at the new port rate (``targets``) against the model: per scenario x
    configuration the measured p50 and the p50 predicted from each run's own record (its CPU
    shares, tenants, code), with the same costs and spread as :func:`port_predict`, and both
    speed-ups over DDP-style TCP (the p50 of the pooled iterations over ddp-tcp's); with
    ``before`` (:func:`read_prediction`), the prediction made before the runs beside them, and per
    scenario both predicted rankings against the measured one (:func:`simulator.ranking.rank_row`);
    with ``before_p99`` its p99s beside the measured ones (pooled iterations)."""
    costs = dict(DEFAULT_COSTS if costs is None else costs)
    spread = iteration_spread(load_runs(results or targets[0].parent))
    groups: dict[tuple[str, str, float], list[Run]] = defaultdict(list)
    for target in targets:
        for run in load_runs(target):
            if run.job is not None:
                groups[(run.scenario, run.config, run.port_pps)].append(run)
    if not groups:
        raise SimulatorError(f"no trace-driven runs under {', '.join(map(str, targets))}")
    table = {key: (statistics.median(t for r in runs for t in r.iterations),
                   predict_group(runs, traces, costs, seed=1000 * n, spread=spread))
             for n, (key, runs) in enumerate(sorted(groups.items()))}
    extra = " predicted before (ms) | error | speed-up, before |" if before is not None else ""
    extra += " p99 measured (ms) | p99 predicted before (ms) | error |" if before_p99 is not None else ""
    lines = [f"Against the runs of {', '.join(t.name for t in targets)}:", "",
             "| scenario | configuration | port (pkt/s) | runs | p50 measured (ms) | p50 predicted from each run's record "
             "(ms) | error | speed-up over ddp-tcp, measured | predicted |" + extra,
             "|---|---|---:|---:|---:|---:|---|---:|---:|" + ("---:|---|---:|" if before is not None else "")
             + ("---:|---:|---|" if before_p99 is not None else "")]
    for (scenario, config, pps), (measured, predicted) in table.items():
        base = table.get((scenario, "ddp-tcp", pps))
        up = (f"{base[0] / measured:.2f}x", f"{base[1] / predicted:.2f}x") if base else ("-", "-")
        row = (f"| {scenario} | {config} | {pps:,.0f} | {len(groups[(scenario, config, pps)])} | "
               f"{measured * 1e3:,.1f} | {predicted * 1e3:,.1f} | {(predicted - measured) / measured:+.0%} | "
               f"{up[0]} | {up[1]} |")
        if before is not None:
            b, b0 = before.get((scenario, config)), before.get((scenario, "ddp-tcp"))
            row += (f" {b * 1e3:,.1f} | {(b - measured) / measured:+.0%} | "
                    f"{f'{b0 / b:.2f}x' if b0 else '-'} |" if b else " - | - | - |")
        if before_p99 is not None:
            m99 = float(np.percentile([t for r in groups[(scenario, config, pps)] for t in r.iterations], 99))
            b99 = before_p99.get((scenario, config))
            row += f" {m99 * 1e3:,.1f} |" + (f" {b99 * 1e3:,.1f} | {(b99 - m99) / m99:+.0%} |" if b99 else " - | - |")
        lines.append(row)
    lines += ["", "| scenario | port (pkt/s) | predicted | measured order | predicted order | same | every clear pair kept "
              "| pairs kept | clear pairs kept | ties the other way | pairs the other way | paired rule: every clear pair kept "
              "| paired rule: clear pairs kept | paired rule: pairs not judged | paired rule on the pairs the other way |",
              "|---|---:|---|---|---|---|---|---:|---:|---:|---|---|---:|---:|---|"]
    for scenario, pps in sorted({(s, p) for s, _, p in groups}):
        configs = sorted(c for s, c, p in groups if (s, p) == (scenario, pps))
        measured = {c: table[(scenario, c, pps)][0] for c in configs}
        times = {c: [r.iterations for r in groups[(scenario, c, pps)]] for c in configs}
        keys = {c: [pair_key(r) for r in groups[(scenario, c, pps)]] for c in configs}
        preds = [("from the records", {c: table[(scenario, c, pps)][1] for c in configs})]
        if before is not None and all((scenario, c) in before for c in configs):
            preds.append(("before", {c: before[(scenario, c)] for c in configs}))
        for name, predicted in preds:
            lines.append(f"| {scenario} | {pps:,.0f} | {name} | " + " | ".join(rank_row(measured, predicted, times, keys)) + " |")
    return "\n".join(lines) + "\n"


__all__ = ["CONDITIONS", "DEFAULT_COSTS", "against", "moved", "port_predict", "predict_group", "read_prediction",
           "stand_in"]
