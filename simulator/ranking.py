"""The ranking of configurations per scenario, measured against predicted (``sim validate``):
which pairs the runs order clearly (a paired bootstrap interval of the gap between p50s that
excludes 0) and which the prediction keeps."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

#: A measured order of two configurations is clear when the paired confidence interval (this
#: level, two-sided) of the gap between their p50s over resamples of whole runs excludes 0; a
#: pair whose gap the interval includes is a *tie* (counted apart).
BOOTSTRAP, CLEAR_ORDER = 1_000, 0.95


def bootstrap_p50(runs: Sequence[Sequence[float]], resamples: int = BOOTSTRAP, seed: int = 0) -> np.ndarray:
    """p50 of the pooled iteration times of ``runs`` resampled with replacement (whole runs:
    iterations of one run share its conditions), ``resamples`` times."""
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(runs), size=(resamples, len(runs)))
    return np.array([np.median(np.concatenate([runs[i] for i in pick])) for pick in picks])


def _ranking(values: dict[str, float]) -> list[str]:
    return sorted(values, key=lambda c: values[c])


def rank_row(measured: dict[str, float], predicted: dict[str, float],
             run_times: dict[str, Sequence[Sequence[float]]]) -> list[str]:
    """One scenario's ranking of configurations by p50, measured (``measured``) against
    predicted: both orders, whether they are the same, whether every clearly ordered pair is
    (:func:`clear_verdict`), the pairs kept of all and of the clear ones, the ties predicted the
    other way of all ties, and the pairs predicted the other way with the share of resamples
    that keep their measured order, each marked ``clear`` or ``tie``. A pair is a tie when the
    :data:`CLEAR_ORDER` paired confidence interval of its measured gap includes 0
    (:func:`measured_tie`; the resamples of the runs' iteration times, ``run_times``, draw the
    same runs of every configuration: the sweeps' rounds are paired), else clear."""
    m, p = _ranking(measured), _ranking(predicted)
    pairs = [(a, b) for n, a in enumerate(m) for b in m[n + 1:]]
    kept = sum(1 for a, b in pairs if p.index(a) < p.index(b))
    boot = {c: bootstrap_p50(run_times[c]) for c in m}
    share = {(a, b): float(np.mean(boot[a] < boot[b])) for a, b in pairs}
    tie = {(a, b): measured_tie(boot[a], boot[b]) for a, b in pairs}
    clear = [pair for pair in pairs if not tie[pair]]
    kept_clear = sum(1 for a, b in clear if p.index(a) < p.index(b))
    ties = [pair for pair in pairs if tie[pair]]
    swapped_ties = sum(1 for a, b in ties if p.index(a) > p.index(b))
    swapped = [f"{a} < {b} ({share[(a, b)]:.0%}, {'tie' if tie[(a, b)] else 'clear'})"
               for a, b in pairs if p.index(a) > p.index(b)]
    return [" < ".join(m), " < ".join(p), "yes" if m == p else "no", clear_verdict(m == p, kept_clear, len(clear)),
            f"{kept} of {len(pairs)}", f"{kept_clear} of {len(clear)}", f"{swapped_ties} of {len(ties)}",
            "; ".join(swapped) or "-"]


def measured_tie(first: np.ndarray, second: np.ndarray, level: float = CLEAR_ORDER) -> bool:
    """Whether the measured gap ``second - first`` (p50s over the same resamples of whole runs)
    has a two-sided ``level`` confidence interval that includes 0: a tie."""
    gap = np.asarray(second, dtype=float) - np.asarray(first, dtype=float)
    low, high = np.percentile(gap, [50 * (1 - level), 50 * (1 + level)])
    return bool(low <= 0.0 <= high)


def clear_verdict(same: bool, kept_clear: int, clear: int) -> str:
    """Whether the prediction keeps every pair the runs order clearly: ``yes``, ``no``, or
    ``yes (differs only in ties)`` where the strict ranking is not the same."""
    if kept_clear < clear:
        return "no"
    return "yes" if same else "yes (differs only in ties)"


__all__ = ["BOOTSTRAP", "CLEAR_ORDER", "bootstrap_p50", "clear_verdict", "measured_tie", "rank_row"]
