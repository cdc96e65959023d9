"""Statistics of the sweep: per-run figures, medians with 95% bootstrap CIs, speed-ups.

A run's figures (:func:`run_metrics`) are those of its first job's rank 0 (iteration times,
accuracy) and of all that job's ranks (packets, losses), plus the background's. Time to
target of a run that never reached the target is *censored* at the run's training time
(a lower bound) and counted in ``not_reached``. Intervals: :func:`scipy.stats.bootstrap`
(percentile method, 2,000 resamples, fixed seed) of the median, and of the ratio of two
groups' medians for speed-ups.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

WARM_UP = 1  # iterations left out of iteration times (first-call costs)
RESAMPLES = 2000
CONFIDENCE = 0.95

#: Figures summarized per group (name -> whether smaller is better, for the reader only).
FIGURES = ("time_to_target_s", "iterations_to_target", "iteration_p50_s", "iteration_p99_s", "final_accuracy",
           "gradient_loss", "packets", "retransmitted", "dropped", "magnitude_drops", "bg_goodput_mbps",
           "bg_udp_loss", "rr_fct_p50_ms", "rr_fct_p99_ms", "rr_failed", "job2_time_to_target_s")


def _first_job(record: dict[str, Any]) -> dict[str, Any]:
    jobs = record["jobs"]
    return jobs[sorted(jobs, key=int)[0]]


def _job_times(job: dict[str, Any], target: float) -> tuple[float | None, int | None, float, float]:
    """(time to target, iterations to target, final accuracy, training time) of rank 0."""
    records = job["ranks"]["0"]["records"]
    curve = [(r["iteration"] + 1, float(r["wall_s"]), float(r["accuracy"])) for r in records
             if r.get("accuracy") is not None]
    hit = next(((it, t) for it, t, a in curve if a >= target), None)
    wall = float(records[-1]["wall_s"]) if records else float("nan")
    final = curve[-1][2] if curve else float("nan")
    return (hit[1] if hit else None), (hit[0] if hit else None), final, wall


def run_metrics(record: dict[str, Any], target: float) -> dict[str, Any]:
    """The figures of one successful run (module doc)."""
    job = _first_job(record)
    tta, itt, final, wall = _job_times(job, target)
    rank0 = job["ranks"]["0"]["records"]
    times = np.array([float(r["iteration_s"]) for r in rank0[WARM_UP:]])
    ranks = job["ranks"].values()
    lost = sum(int(r["totals"].get("lost", 0)) for r in ranks)
    reduced = sum(int(r["totals"].get("reduced", 0)) for r in ranks)
    sent = sum(int(r["totals"].get("packets", 0)) for r in ranks)
    resent = sum(int(r["totals"].get("retransmitted", 0)) for r in ranks)
    received = sum(int(r["receive"].get("data_packets", 0)) for r in ranks)
    flows = record.get("background", [])
    goodputs = [f["goodput_mbps"] for f in flows if f["protocol"] in ("tcp", "udp") and f.get("goodput_mbps") is not None]
    udp_loss = [f["loss"] for f in flows if f["protocol"] == "udp" and f.get("loss") is not None]
    fcts = [x for f in flows if f["protocol"] == "rr" for x in f.get("fct_s", [])]
    out: dict[str, Any] = {
        "time_to_target_s": tta, "iterations_to_target": itt, "final_accuracy": final, "train_s": wall,
        "iteration_p50_s": float(np.percentile(times, 50)) if times.size else float("nan"),
        "iteration_p99_s": float(np.percentile(times, 99)) if times.size else float("nan"),
        "iteration_times_s": times.tolist(),
        "accuracy_curve": [(float(r["wall_s"]), float(r["accuracy"])) for r in rank0 if r.get("accuracy") is not None],
        "gradient_loss": lost / reduced if reduced else 0.0, "packets": sent, "retransmitted": resent,
        "dropped": max(0, sent + resent - received) if sent else 0,
        "magnitude_drops": record.get("switch", {}).get("magnitude_drops"),
        "bg_goodput_mbps": sum(goodputs) if goodputs else None,
        "bg_udp_loss": float(np.mean(udp_loss)) if udp_loss else None,
        "rr_fct_p50_ms": float(np.percentile(fcts, 50) * 1e3) if fcts else None,
        "rr_fct_p99_ms": float(np.percentile(fcts, 99) * 1e3) if fcts else None,
        "rr_failed": sum(int(f.get("failed") or 0) for f in flows if f["protocol"] == "rr") if flows else None,
        "job2_time_to_target_s": None,
    }
    others = sorted(record["jobs"], key=int)[1:]
    if others:
        tta2, _, _, wall2 = _job_times(record["jobs"][others[0]], target)
        out["job2_time_to_target_s"] = tta2 if tta2 is not None else wall2
    return out


@dataclass(frozen=True)
class Estimate:
    """A median with its 95% CI (None where fewer than two values)."""

    median: float
    low: float | None
    high: float | None
    n: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _interval(samples: Sequence[np.ndarray], statistic: Any) -> tuple[float | None, float | None]:
    from scipy.stats import bootstrap

    if any(len(s) < 2 for s in samples):
        return None, None
    if all(np.ptp(s) == 0 for s in samples):
        value = float(statistic(*samples, axis=-1))
        return value, value
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = bootstrap(tuple(samples), statistic, n_resamples=RESAMPLES, confidence_level=CONFIDENCE,
                        method="percentile", paired=False, vectorized=True, random_state=np.random.default_rng(0))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def _median(x: np.ndarray, axis: int = -1) -> Any:
    return np.median(x, axis=axis)


def median_ci(values: Sequence[float]) -> Estimate | None:
    """Median of `values` (None and NaN left out) with its bootstrap 95% CI."""
    x = np.array([v for v in values if v is not None and not math.isnan(v)], dtype=float)
    if x.size == 0:
        return None
    low, high = _interval([x], _median)
    return Estimate(float(np.median(x)), low, high, int(x.size))


def _ratio(reference: np.ndarray, other: np.ndarray, axis: int = -1) -> Any:
    return np.median(reference, axis=axis) / np.median(other, axis=axis)


def _difference(other: np.ndarray, reference: np.ndarray, axis: int = -1) -> Any:
    return np.median(other, axis=axis) - np.median(reference, axis=axis)


def speedup(reference: Sequence[float], other: Sequence[float]) -> Estimate | None:
    """median(reference) / median(other) (how many times sooner `other` is), with its CI."""
    r, o = np.array(reference, float), np.array(other, float)
    if r.size == 0 or o.size == 0:
        return None
    low, high = _interval([r, o], _ratio)
    return Estimate(float(np.median(r) / np.median(o)), low, high, int(min(r.size, o.size)))


def difference(reference: Sequence[float], other: Sequence[float]) -> Estimate | None:
    """median(other) - median(reference), with its CI (e.g. accuracy vs the reference)."""
    r, o = np.array(reference, float), np.array(other, float)
    if r.size == 0 or o.size == 0:
        return None
    low, high = _interval([o, r], _difference)
    return Estimate(float(np.median(o) - np.median(r)), low, high, int(min(r.size, o.size)))


def censored_tta(metrics: dict[str, Any]) -> float:
    """Time to target, or the training time (a lower bound) where the target was not reached."""
    tta = metrics["time_to_target_s"]
    return float(tta) if tta is not None else float(metrics["train_s"])


def paired_differences(rounds: dict[tuple[Any, ...], dict[str, float]], reference: str, config: str) -> list[float]:
    """Final accuracy of `config` minus the reference's, per round that has both."""
    return [r[config] - r[reference] for r in rounds.values() if config in r and reference in r]


def summarize(records: Sequence[dict[str, Any]], target: float,
              references: Sequence[str] = ("gloo", "qos")) -> dict[str, Any]:
    """Per scenario and configuration: counts, median and CI of every figure, speed-ups of
    time to target over each reference, and the final-accuracy difference to the first."""
    groups: dict[str, dict[str, list[dict[str, Any]]]] = {}
    failed: dict[str, dict[str, int]] = {}
    # Final accuracy by round: runs of one round share the data-order seed.
    pairs: dict[str, dict[tuple[Any, ...], dict[str, float]]] = {}
    for rec in records:
        if rec["status"] == "ok":
            key = (rec.get("source"), rec.get("repetition"), rec.get("seed"))
            pairs.setdefault(rec["scenario"], {}).setdefault(key, {})[rec["config"]] = \
                run_metrics(rec, target)["final_accuracy"]
    for rec in records:
        by_config = groups.setdefault(rec["scenario"], {})
        by_config.setdefault(rec["config"], [])
        if rec["status"] == "ok":
            by_config[rec["config"]].append(run_metrics(rec, target))
        else:
            failed.setdefault(rec["scenario"], {}).setdefault(rec["config"], 0)
            failed[rec["scenario"]][rec["config"]] += 1
    out: dict[str, Any] = {}
    for sc, by_config in groups.items():
        table: dict[str, Any] = {}
        for config, runs in by_config.items():
            row: dict[str, Any] = {"ok": len(runs), "failed": failed.get(sc, {}).get(config, 0),
                                   "not_reached": sum(1 for m in runs if m["time_to_target_s"] is None)}
            for name in FIGURES:
                values = ([censored_tta(m) for m in runs] if name == "time_to_target_s"
                          else [m[name] for m in runs])
                est = median_ci(values)
                row[name] = est.to_dict() if est else None
            for ref in references:
                base = by_config.get(ref, [])
                est = speedup([censored_tta(m) for m in base], [censored_tta(m) for m in runs])
                row[f"speedup_vs_{ref}"] = est.to_dict() if est else None
            base = by_config.get(references[0], [])
            est = difference([m["final_accuracy"] for m in base], [m["final_accuracy"] for m in runs])
            row[f"accuracy_vs_{references[0]}"] = est.to_dict() if est else None
            paired = paired_differences(pairs.get(sc, {}), references[0], config)
            est = median_ci(paired) if paired else None
            row[f"accuracy_vs_{references[0]}_paired"] = est.to_dict() if est else None
            table[config] = row
        out[sc] = table
    return out
