"""The hosts' own time on the emulated fabric: a packet-rate ceiling set by the transport's
cost per packet and by the CPU the run's processes got.

* **Cost per packet** ``c`` (seconds of CPU for one packet through the busiest host, both
  ends of its handling: the sender's and the receiver's software, the kernel and the
  software switches' share): one value per *family* of runs whose hosts move packets the
  same way (job kind, kernel TCP or the DLCP transport, scheduler), calibrated on the runs
  of other sweeps (:func:`cross_validated`: the cost of :data:`COST_GRID` with the smallest
  median p50 error over them), never on the sweep it predicts.
* **CPU available** ``1 - s``: ``s`` is the share of its runnable time a rank waited for a
  CPU, which the trace-driven runs record per rank (``/proc/<pid>/task/*/schedstat``; the
  most starved rank of the job). Runs that do not record it take ``s = max(0, 1 - cores /
  load)`` from the machine's load average (``load`` runnable tasks sharing ``cores``).
* **The packet path** (:func:`path_available`): a packet is handled by the rank and by the
  software switches and the kernel, which get the machine's share per task; the path moves
  at the slower, ``min(1 - s, cores / load)``.
* **Recorded per process** (runs since commit c828d8c; :func:`run_available`, measure
  ``recorded``): a process that used ``u`` of a core and waited for one ``w`` of the wall
  time (its longest-waiting thread) got ``u / (u + w)`` of the CPU while it wanted one, so
  its packets take ``(u + w) / u`` times their CPU time. The rank is the busiest host's;
  the switches are pooled (uses and waits summed, so the busy ones weigh); the path moves
  at the slower. Runs without the record take both from the load, ``cores / load``
  (:data:`CPU_MEASURES` lists the variants ``sim validate --cpu`` offers; the default,
  ``summed``, reads the rank's summed figure and the load for every run, which validates
  better on the committed runs: simulator/README.md).
* **Background through the switches**: the software switches forward the background's
  packets with the same CPU, first-come first-served before any egress queue's priority;
  the background's recorded goodput (data packets of 1,448 bytes a second) and its TCP flows'
  ACKs (one per two data packets, delayed ACK) are taken off the ceiling, leaving the job at
  least half of it (max-min between window-based flows; the DLCP transport since it paces
  its sends, ``sim validate``'s ``paced`` term, keeps no such half: it takes what is left); the jobs of one run (multitenant's two, hotspot's job and bulk job) share what is left by their ranks' recorded CPU use, else
  equally (``sim validate``, ``fabric_runs.tenant_share``).
* **Ceiling**: the busiest host moves at most ``(1 - s) / c`` packets a second; a message of
  ``n`` packets on it holds the link ``n c / (1 - s)`` on top of its time on the wire
  (:class:`simulator.fabric_model.CollectiveLink`, ``host_pps``).
* **CPU-bound compute** (a CNN replayed from loopback runs) is stretched by
  ``(1 - s_baseline) / (1 - s)``; a trace-driven job's compute is a timed sleep and is not.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence

import numpy as np

from simulator.errors import SimulatorError
from simulator.fabric_runs import Run

#: CPUs of the machine the committed runs were made on (every sweep's meta records 2).
CORES = 2
#: CPU share assumed left for a process whose starvation is recorded as 1 (a rank that never ran).
MIN_AVAILABLE = 0.01


def starvation_from_load(load: float, cores: int = CORES) -> float:
    """Share of runnable time spent waiting for a CPU when ``load`` tasks share ``cores``."""
    if load < 0 or cores < 1:
        raise SimulatorError(f"bad load {load} or cores {cores}")
    return max(0.0, 1.0 - cores / load) if load > 0 else 0.0


def available(starvation: float | None, load: float | None, cores: int = CORES) -> float:
    """CPU share a run's processes got: ``1 - s`` (recorded ``s``, else from the load, else 1)."""
    if starvation is not None:
        if not 0.0 <= starvation <= 1.0:
            raise SimulatorError(f"starvation must lie in [0, 1], not {starvation}")
        return max(MIN_AVAILABLE, 1.0 - starvation)
    if load is not None:
        return max(MIN_AVAILABLE, 1.0 - starvation_from_load(load, cores))
    return 1.0


def path_available(starvation: float | None, load: float | None, cores: int = CORES) -> float:
    """CPU share of the slower of the two kinds of process a packet passes through: the rank
    (its recorded starvation) and the software switches and the kernel's packet work, which
    get the machine's share per runnable task (``cores / load``). Without a load: the rank's."""
    rank = available(starvation, load, cores)
    return rank if load is None else min(rank, available(None, load, cores))


#: How :func:`run_available` takes a run's CPU share (``sim validate --cpu``): the rank's
#: summed figure and the load for every run (``summed``); per process where recorded, else from
#: the load (``recorded``), else the rank's summed figure and the load (``recorded-summed``); the
#: wait share of wall time as the share lacked, ``1 - w``, rank and most-waiting switch, else as
#: ``recorded`` (``wall``); per process where recorded, else summed, each calibrated apart
#: (``recorded-apart``); and the default, ``dlcp-recorded``: as ``recorded-apart`` for the DLCP
#: transport's runs, whose packet work runs in the rank's process, ``summed`` for kernel TCP's,
#: whose packet work runs in softirq, charged to no process (simulator/README.md, Validation).
CPU_MEASURES = ("summed", "recorded", "recorded-summed", "wall", "recorded-apart", "dlcp-recorded")
DEFAULT_CPU_MEASURE = "dlcp-recorded"
#: Measures whose per-process shares are calibrated in families of their own (a cost per
#: packet on that scale is fitted only on runs that carry the record).
CALIBRATED_APART = ("recorded-apart", "dlcp-recorded")


def process_available(use: float | None, wait: float | None) -> float | None:
    """CPU share a process got while it wanted one: ``use / (use + wait)`` (use as a share of
    a core, wait as a share of wall time); None when not recorded or never runnable."""
    if use is None or wait is None:
        return None
    if use < 0 or wait < 0:
        raise SimulatorError(f"CPU use {use} and wait {wait} must not be negative")
    return max(MIN_AVAILABLE, use / (use + wait)) if use + wait > 0 else None


def switches_available(switch_cpu: Mapping[str, tuple[float, float]]) -> float | None:
    """The software switches' CPU share, pooled: their uses over their uses and waits summed."""
    return process_available(sum(u for u, _ in switch_cpu.values()), sum(w for _, w in switch_cpu.values())) \
        if switch_cpu else None


def run_available(run: Run, measure: str = "summed", cores: int = CORES) -> tuple[float, str]:
    """The CPU share the packet path of ``run`` got by ``measure`` (:data:`CPU_MEASURES`) and
    what it came from: ``per process``, ``summed`` (the rank's summed figure and the load) or ``load``."""
    if measure not in CPU_MEASURES:
        raise SimulatorError(f"unknown CPU measure {measure!r}; choose from {', '.join(CPU_MEASURES)}")
    rank, switches = process_available(run.cpu_use, run.cpu_wait), switches_available(run.switch_cpu)
    own = measure != "dlcp-recorded" or run.spec.comm == "dlcp"
    if measure in ("recorded", "recorded-summed") + CALIBRATED_APART and own and rank is not None \
            and switches is not None:
        return min(rank, switches), "per process"
    if measure == "wall" and run.cpu_wait is not None and run.switch_cpu:
        worst = max(w for _, w in run.switch_cpu.values())
        return max(MIN_AVAILABLE, 1.0 - max(run.cpu_wait, worst)), "per process"
    if measure in ("recorded", "wall"):
        return available(None, run.load, cores), "load" if run.load is not None else "-"
    source = "summed" if run.starvation is not None else "load" if run.load is not None else "-"
    return path_available(run.starvation, run.load, cores), source


#: The share of the switches' budget a job keeps against the background (max-min between
#: window-based flows: kernel TCP's job and the background's long TCP flows each claim half).
MAX_MIN_FLOOR = 0.5


def host_pps(cost_s: float, cpu_available: float, background_pps: float = 0.0, floor: float = MAX_MIN_FLOOR) -> float:
    """Packets a second the busiest host moves: ``(1 - s) / c`` (infinite for ``c = 0``), less
    the background's packets, which the same software switches handle first-come first-served
    ahead of any queue priority; max-min sharing leaves the job at least ``floor`` of it (0: a
    paced job, which claims no share, takes what the background leaves, but never below 1%
    of it)."""
    if cost_s < 0 or not 0 < cpu_available <= 1 or background_pps < 0 or not 0 <= floor <= 1:
        raise SimulatorError(f"bad host cost {cost_s} s per packet, CPU share {cpu_available}, background "
                             f"{background_pps} packets/s or floor {floor}")
    if cost_s == 0:
        return math.inf
    capacity = cpu_available / cost_s
    return max(capacity - background_pps, capacity * max(floor, MIN_AVAILABLE))


#: Costs per packet a calibration tries: 0, then 1 us to 10 ms in steps of 10^(1/15) (17%).
COST_GRID: tuple[float, ...] = (0.0,) + tuple(1e-6 * 10 ** (i / 15) for i in range(61))


def best_cost(grid: Sequence[float], curves: Sequence[Sequence[float]], measured: Sequence[float],
              groups: Sequence[object] | None = None) -> float:
    """The cost of ``grid`` whose predictions (``curves[run][cost]``, p50 seconds) have the
    smallest median absolute relative error against ``measured`` (ties: the smaller cost). With
    ``groups`` (a key per run: job, scenario, configuration) the error is a group's, its runs'
    median prediction against their median measurement, and the median is over groups, as the
    validation table counts: a scenario run in many sweeps does not outweigh the others."""
    if not curves or len(curves) != len(measured) or any(len(c) != len(grid) for c in curves):
        raise SimulatorError(f"{len(curves)} prediction curves for {len(measured)} runs on a grid of {len(grid)}")
    predicted = np.asarray(curves, dtype=float)
    truth = np.asarray(measured, dtype=float)
    if groups is not None:
        keys = sorted(set(groups), key=str)
        members = [[i for i, g in enumerate(groups) if g == key] for key in keys]
        predicted = np.array([np.median(predicted[m], axis=0) for m in members])
        truth = np.array([np.median(truth[m]) for m in members])
    errors = np.median(np.abs(predicted - truth[:, None]) / truth[:, None], axis=0)
    return float(grid[int(np.argmin(errors))])


def cross_validated(runs: Sequence[tuple[str, str, float]], curves: Sequence[Sequence[float]],
                    grid: Sequence[float] = COST_GRID,
                    groups: Sequence[object] | None = None) -> dict[tuple[str, str], tuple[float, int]]:
    """Leave one sweep out: for every (sweep, family) among ``runs`` (sweep, family, measured
    p50; ``curves`` their predictions on ``grid``), the :func:`best_cost` over the family's
    runs in the *other* sweeps (by ``groups`` where given) and how many there were; a family no
    other sweep ran is left out (no calibration)."""
    by_family: dict[str, list[int]] = defaultdict(list)
    for i, (_, family, _) in enumerate(runs):
        by_family[family].append(i)
    out: dict[tuple[str, str], tuple[float, int]] = {}
    for family, members in by_family.items():
        for sweep in {runs[i][0] for i in members}:
            others = [i for i in members if runs[i][0] != sweep]
            if others:
                cost = best_cost(grid, [curves[i] for i in others], [runs[i][2] for i in others],
                                 None if groups is None else [groups[i] for i in others])
                out[(sweep, family)] = (cost, len(others))
    return out


__all__ = ["CALIBRATED_APART", "CORES", "MAX_MIN_FLOOR", "COST_GRID", "CPU_MEASURES", "DEFAULT_CPU_MEASURE", "available", "best_cost", "cross_validated", "host_pps",
           "path_available", "process_available", "run_available", "starvation_from_load", "switches_available"]
