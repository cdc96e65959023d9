"""The ranking of configurations per scenario, measured against predicted (``sim validate``):
which pairs the runs order clearly (a bootstrap interval of the gap between p50s that excludes 0)
and which the prediction keeps.

Two rules for "clear". The first (kept as it was) resamples each configuration's runs with the
same seed: its draws pair the i-th runs of two configurations only where both have as many runs,
and those are the same round only where both are one sweep's interleaved rounds; a group pooled
over sweeps, or of another size, is resampled apart, not paired. The **paired rule** judges a
pair only on the runs made side by side (the same sweep and round, :data:`PAIR_MIN` of them at
least), resampling those rounds together; a pair never run so is not judged (neither clear nor a
tie)."""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np

#: A measured order of two configurations is clear when the paired confidence interval (this
#: level, two-sided) of the gap between their p50s over resamples of whole runs excludes 0; a
#: pair whose gap the interval includes is a *tie* (counted apart).
BOOTSTRAP, CLEAR_ORDER = 1_000, 0.95
#: Rounds run side by side a pair needs to be judged by the paired rule.
PAIR_MIN = 3


def bootstrap_p50(runs: Sequence[Sequence[float]], resamples: int = BOOTSTRAP, seed: int = 0) -> np.ndarray:
    """p50 of the pooled iteration times of ``runs`` resampled with replacement (whole runs:
    iterations of one run share its conditions), ``resamples`` times."""
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(runs), size=(resamples, len(runs)))
    return np.array([np.median(np.concatenate([runs[i] for i in pick])) for pick in picks])


def paired_gap(first: Sequence[Sequence[float]], second: Sequence[Sequence[float]], resamples: int = BOOTSTRAP,
               seed: int = 0) -> np.ndarray:
    """The gap between p50s (``second`` less ``first``) over resamples of the rounds: ``first[i]``
    and ``second[i]`` are one round's runs of the two configurations, drawn together."""
    if len(first) != len(second) or not first:
        raise ValueError(f"paired runs come in rounds of two: {len(first)} against {len(second)}")
    rng = np.random.default_rng(seed)
    a = [np.asarray(x, dtype=float) for x in first]
    b = [np.asarray(x, dtype=float) for x in second]
    picks = rng.integers(0, len(a), size=(resamples, len(a)))
    return np.array([np.median(np.concatenate([b[i] for i in pick])) - np.median(np.concatenate([a[i] for i in pick]))
                     for pick in picks])


def paired_verdict(first: Sequence[Sequence[float]], first_keys: Sequence[Hashable],
                   second: Sequence[Sequence[float]], second_keys: Sequence[Hashable]) -> str:
    """The paired rule on a pair whose measured order is ``first`` before ``second``: ``clear`` or
    ``tie`` on the runs whose keys (sweep and round) both have, or ``not paired`` with fewer than
    :data:`PAIR_MIN` such rounds."""
    index = {k: i for i, k in enumerate(second_keys)}
    common = [(i, index[k]) for i, k in enumerate(first_keys) if k in index]
    if len(common) < PAIR_MIN:
        return "not paired"
    gap = paired_gap([first[i] for i, _ in common], [second[j] for _, j in common])
    low, high = np.percentile(gap, [50 * (1 - CLEAR_ORDER), 50 * (1 + CLEAR_ORDER)])
    return "tie" if low <= 0.0 <= high else "clear"


def _ranking(values: dict[str, float]) -> list[str]:
    return sorted(values, key=lambda c: values[c])


def rank_row(measured: dict[str, float], predicted: dict[str, float],
             run_times: dict[str, Sequence[Sequence[float]]],
             run_keys: dict[str, Sequence[Hashable]] | None = None) -> list[str]:
    """One scenario's ranking of configurations by p50, measured (``measured``) against
    predicted: both orders, whether they are the same, whether every clearly ordered pair is
    (:func:`clear_verdict`), the pairs kept of all and of the clear ones, the ties predicted the
    other way of all ties, and the pairs predicted the other way with the share of resamples
    that keep their measured order, each marked ``clear`` or ``tie``. A pair is a tie when the
    :data:`CLEAR_ORDER` paired confidence interval of its measured gap includes 0
    (:func:`measured_tie`; the resamples of the runs' iteration times, ``run_times``, draw the
    same runs of every configuration where their numbers agree), else clear. Then the paired rule
    (module doc; ``run_keys``: each run's sweep and round, by configuration as ``run_times``; by
    default its place in the list): whether every pair it finds clear is kept, the clear pairs
    kept of those, the pairs it cannot judge, and its verdict on each pair predicted the other way."""
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
    keys = run_keys or {c: list(range(len(run_times[c]))) for c in m}
    paired = {(a, b): paired_verdict(run_times[a], keys[a], run_times[b], keys[b]) for a, b in pairs}
    clear_paired = [pair for pair in pairs if paired[pair] == "clear"]
    kept_paired = sum(1 for a, b in clear_paired if p.index(a) < p.index(b))
    unjudged = sum(1 for pair in pairs if paired[pair] == "not paired")
    swapped_paired = [f"{a} < {b} ({paired[(a, b)]})" for a, b in pairs if p.index(a) > p.index(b)]
    return [" < ".join(m), " < ".join(p), "yes" if m == p else "no", clear_verdict(m == p, kept_clear, len(clear)),
            f"{kept} of {len(pairs)}", f"{kept_clear} of {len(clear)}", f"{swapped_ties} of {len(ties)}",
            "; ".join(swapped) or "-", "yes" if kept_paired == len(clear_paired) else "no",
            f"{kept_paired} of {len(clear_paired)}", f"{unjudged} of {len(pairs)}", "; ".join(swapped_paired) or "-"]


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


__all__ = ["BOOTSTRAP", "CLEAR_ORDER", "PAIR_MIN", "bootstrap_p50", "clear_verdict", "measured_tie", "paired_gap",
           "paired_verdict", "rank_row"]
