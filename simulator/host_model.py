"""The hosts' own time on the emulated fabric: a packet-rate ceiling set by the transport's
cost per packet and by the CPU the run's processes got.

* **Cost per packet** ``c`` (seconds of CPU for one packet through the busiest host, both
  ends of its handling: the sender's and the receiver's software, the kernel and the
  software switches' share): one value per *family* of runs whose hosts move packets the
  same way (job kind, kernel TCP or the DLCP transport, scheduler), calibrated on other
  runs (:func:`calibrate`, :func:`cross_validated`), never on the run it predicts.
* **CPU available** ``1 - s``: ``s`` is the share of its runnable time a rank waited for a
  CPU, which the trace-driven runs record per rank (``/proc/<pid>/task/*/schedstat``; the
  most starved rank of the job). Runs that do not record it take ``s = max(0, 1 - cores /
  load)`` from the machine's load average (``load`` runnable tasks sharing ``cores``).
* **Ceiling**: the busiest host moves at most ``(1 - s) / c`` packets a second; a message of
  ``n`` packets on it holds the link at least ``n c / (1 - s)``
  (:class:`simulator.fabric_model.CollectiveLink`, ``host_pps``).
* **CPU-bound compute** (a CNN replayed from loopback runs) is stretched by
  ``(1 - s_baseline) / (1 - s)``; a trace-driven job's compute is a timed sleep and is not.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable

from simulator.errors import SimulatorError

#: CPUs of the machine the committed runs were made on (every sweep's meta records 2).
CORES = 2
#: The largest cost per packet a calibration searches (a second per packet: nothing moves).
MAX_COST_S = 1.0
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


def host_pps(cost_s: float, cpu_available: float) -> float:
    """Packets a second the busiest host moves: ``(1 - s) / c`` (infinite for ``c = 0``)."""
    if cost_s < 0 or not 0 < cpu_available <= 1:
        raise SimulatorError(f"bad host cost {cost_s} s per packet or CPU share {cpu_available}")
    return math.inf if cost_s == 0 else cpu_available / cost_s


def calibrate(p50_for_cost: Callable[[float], float], measured_s: float, *, tolerance: float = 1e-3) -> float:
    """The cost per packet at which ``p50_for_cost`` (increasing in the cost) meets
    ``measured_s``, by bisection on a log scale; 0 when the model without host cost is
    already slower than measured."""
    if measured_s <= 0:
        raise SimulatorError(f"measured iteration time must be positive, not {measured_s}")
    if p50_for_cost(0.0) >= measured_s:
        return 0.0
    lo, hi = 1e-9, MAX_COST_S
    if p50_for_cost(hi) < measured_s:
        return hi
    while hi / lo > 1 + tolerance:
        mid = math.sqrt(lo * hi)
        if p50_for_cost(mid) < measured_s:
            lo = mid
        else:
            hi = mid
    return math.sqrt(lo * hi)


def cross_validated(fits: Iterable[tuple[str, str, float]]) -> dict[tuple[str, str], tuple[float, int]]:
    """Leave one sweep out: for every (sweep, family) among ``fits`` (sweep, family, cost
    fitted on one run), the median cost of the family's runs in the *other* sweeps and how
    many there were; a family no other sweep ran is left out (no calibration)."""
    by_family: dict[str, list[tuple[str, float]]] = defaultdict(list)
    for sweep, family, cost in fits:
        by_family[family].append((sweep, cost))
    out: dict[tuple[str, str], tuple[float, int]] = {}
    for family, items in by_family.items():
        for sweep in {s for s, _ in items}:
            others = [c for s, c in items if s != sweep]
            if others:
                out[(sweep, family)] = (statistics.median(others), len(others))
    return out


__all__ = ["CORES", "available", "calibrate", "cross_validated", "host_pps", "starvation_from_load"]
