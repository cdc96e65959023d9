"""The accuracy report: iterations to the target bits/byte per condition against no loss,
paired by seed, with bootstrap CIs (scipy), time to accuracy, a Markdown table and a plot.

Statistics: for each condition and each seed where both it and ``none`` reached the target,
the difference (and ratio) of iterations; 95% percentile bootstrap CIs over those pairs
(10,000 resamples, fixed generator). A seed that never reached the target is counted and
left out of the differences, never given a value. The validation bits/byte at the last
iteration is compared the same way for every seed. Time to accuracy = iterations to target x
the given measured iteration time of the condition (``--iteration-time``); its ratio to no
loss is the iterations ratio x the ratio of the two times (constants, not resampled).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from experiments.accuracy.sweep import read_run, run_path
from experiments.accuracy.train import steps_to_target
from experiments.errors import ExperimentError

BASELINE = "none"
RESAMPLES = 10_000


@dataclass(frozen=True)
class Estimate:
    mean: float
    low: float
    high: float
    pairs: int

    def text(self, digits: int = 1, signed: bool = True) -> str:
        f = f"{{:{'+' if signed else ''}.{digits}f}}"
        if self.pairs < 2:
            return f.format(self.mean) + f" (n={self.pairs})"
        return f"{f.format(self.mean)} [{f.format(self.low)}, {f.format(self.high)}]"

    def to_dict(self) -> dict[str, float]:
        return {"mean": self.mean, "ci_low": self.low, "ci_high": self.high, "pairs": self.pairs}


def paired_mean_diff(a: np.ndarray, b: np.ndarray) -> Estimate:
    """Mean of a - b over pairs with a 95% bootstrap CI."""
    d = np.asarray(a, float) - np.asarray(b, float)
    if d.size == 0:
        return Estimate(math.nan, math.nan, math.nan, 0)
    if d.size < 2 or np.ptp(d) == 0:
        return Estimate(float(d.mean()), float(d.mean()), float(d.mean()), int(d.size))
    ci = stats.bootstrap((d,), np.mean, n_resamples=RESAMPLES, method="percentile",
                         confidence_level=0.95, random_state=np.random.default_rng(0)).confidence_interval
    return Estimate(float(d.mean()), float(ci.low), float(ci.high), int(d.size))


def paired_ratio(a: np.ndarray, b: np.ndarray) -> Estimate:
    """mean(a) / mean(b) over pairs with a 95% paired bootstrap CI."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    if a.size == 0:
        return Estimate(math.nan, math.nan, math.nan, 0)
    r = float(a.mean() / b.mean())
    if a.size < 2 or (np.ptp(a) == 0 and np.ptp(b) == 0):
        return Estimate(r, r, r, int(a.size))

    def ratio(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
        return np.mean(x, axis=axis) / np.mean(y, axis=axis)

    ci = stats.bootstrap((a, b), ratio, paired=True, vectorized=True, n_resamples=RESAMPLES, method="percentile",
                         confidence_level=0.95, random_state=np.random.default_rng(0)).confidence_interval
    return Estimate(r, float(ci.low), float(ci.high), int(a.size))


def load(folder: Path) -> tuple[dict[str, Any], dict[str, dict[int, list[dict[str, Any]]]]]:
    settings_file = folder / "settings.json"
    if not settings_file.exists():
        raise ExperimentError(f"{folder} holds no accuracy sweep (no settings.json)")
    settings = json.loads(settings_file.read_text())
    runs: dict[str, dict[int, list[dict[str, Any]]]] = {}
    for c in settings["conditions"]:
        for s in settings["seeds"]:
            path = run_path(folder, c, s)
            if path.exists():
                runs.setdefault(c, {})[s] = read_run(path)
    if BASELINE not in runs:
        raise ExperimentError(f"{folder}: no finished run of the baseline condition {BASELINE!r}")
    return settings, runs


def iteration_time(times: dict[str, float], condition: str) -> float | None:
    return times.get(condition, times.get("*"))


def summarize(settings: dict[str, Any], runs: dict[str, dict[int, list[dict[str, Any]]]]) -> list[dict[str, Any]]:
    target = float(settings["target_bpb"])
    times = settings.get("iteration_time", {})
    base = runs[BASELINE]
    rows = []
    for c, by_seed in runs.items():
        reach = {s: steps_to_target(r, target) for s, r in by_seed.items()}
        base_reach = {s: steps_to_target(r, target) for s, r in base.items()}
        both = sorted(s for s in reach if reach[s] is not None and base_reach.get(s) is not None)
        a = np.array([reach[s] for s in both], float)
        b = np.array([base_reach[s] for s in both], float)
        common = sorted(s for s in by_seed if s in base)
        final_a = np.array([by_seed[s][-1]["val_bpb"] for s in common])
        final_b = np.array([base[s][-1]["val_bpb"] for s in common])
        reached = [v for v in reach.values() if v is not None]
        row: dict[str, Any] = {
            "condition": c, "seeds": len(by_seed), "reached": len(reached),
            "lost_share": float(np.mean([np.mean([x["reduce_lost"] for x in r]) for r in by_seed.values()])),
            "gather_lost_share": float(np.mean([np.mean([x["gather_lost"] for x in r]) for r in by_seed.values()])),
            "iterations": float(np.mean(reached)) if reached else None,
            "iterations_by_seed": {str(s): v for s, v in sorted(reach.items())},
            "final_bpb": float(np.mean([r[-1]["val_bpb"] for r in by_seed.values()])),
            "d_iterations": paired_mean_diff(a, b).to_dict(),
            "r_iterations": paired_ratio(a, b).to_dict(),
            "d_final_bpb": paired_mean_diff(final_a, final_b).to_dict(),
        }
        t, t0 = iteration_time(times, c), iteration_time(times, BASELINE)
        if t is not None and reached:
            row["iteration_time_s"] = t
            row["time_to_target_s"] = float(np.mean(reached)) * t
            if t0 is not None:
                r = row["r_iterations"]
                scale = t / t0
                row["r_time_to_target"] = {"mean": r["mean"] * scale, "ci_low": r["ci_low"] * scale,
                                           "ci_high": r["ci_high"] * scale, "pairs": r["pairs"]}
        rows.append(row)
    return rows


def _est(d: dict[str, float], digits: int, signed: bool = True) -> str:
    if d["pairs"] == 0:
        return "–"
    return Estimate(d["mean"], d["ci_low"], d["ci_high"], int(d["pairs"])).text(digits, signed)


def table(settings: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    target = settings["target_bpb"]
    timed = any("time_to_target_s" in r for r in rows)
    head = ["condition", "values lost", "reached", f"iterations to {target:g} bits/byte",
            "Δ iterations vs none [95% CI]", "ratio vs none [95% CI]", "final bits/byte", "Δ final bits/byte [95% CI]"]
    if timed:
        head += ["iteration time (s)", "time to accuracy (s)", "time ratio vs none [95% CI]"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        ref = r["condition"] == BASELINE
        cells = [r["condition"], f"{r['lost_share']:.2%}" + (f" (+{r['gather_lost_share']:.2%} gather)"
                                                           if r["gather_lost_share"] else ""),
                 f"{r['reached']}/{r['seeds']}", "–" if r["iterations"] is None else f"{r['iterations']:.1f}",
                 "(reference)" if ref else _est(r["d_iterations"], 1),
                 "(reference)" if ref else _est(r["r_iterations"], 3, signed=False), f"{r['final_bpb']:.3f}",
                 "(reference)" if ref else _est(r["d_final_bpb"], 3)]
        if timed:
            cells += [f"{r['iteration_time_s']:g}" if "iteration_time_s" in r else "–",
                      f"{r['time_to_target_s']:.1f}" if "time_to_target_s" in r else "–",
                      "(reference)" if ref else
                      _est(r["r_time_to_target"], 3, signed=False) if "r_time_to_target" in r else "–"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot(settings: dict[str, Any], runs: dict[str, dict[int, list[dict[str, Any]]]], rows: list[dict[str, Any]],
         path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    for c, by_seed in runs.items():
        steps = [x["step"] for x in next(iter(by_seed.values())) if "val_bpb" in x]
        curves = np.array([[x["val_bpb"] for x in r if "val_bpb" in x] for r in by_seed.values()])
        left.plot(steps, curves.mean(axis=0), label=c, lw=2 if c == BASELINE else 1.2)
    left.axhline(settings["target_bpb"], color="k", ls=":", lw=1, label="target")
    left.set(xlabel="iteration", ylabel="validation bits/byte (mean over seeds)", title="Learning curves")
    left.set_ylim(top=min(5.0, left.get_ylim()[1]))
    left.legend(fontsize=8)
    shown = [r for r in rows if r["condition"] != BASELINE and r["d_iterations"]["pairs"] > 0]
    ys = np.arange(len(shown))
    means = np.array([r["d_iterations"]["mean"] for r in shown])
    lows = means - np.array([r["d_iterations"]["ci_low"] for r in shown])
    highs = np.array([r["d_iterations"]["ci_high"] for r in shown]) - means
    right.barh(ys, means, xerr=[lows, highs], color="tab:blue", alpha=0.7, capsize=4)
    right.set_yticks(ys, [f"{r['condition']} ({r['d_iterations']['pairs']} pairs)" for r in shown])
    right.axvline(0, color="k", lw=1)
    right.set(xlabel=f"Δ iterations to {settings['target_bpb']:g} bits/byte vs no loss (95% CI)",
              title="Cost of the loss, paired by seed")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_report(folder: Path, iteration_time: dict[str, float] | None = None, command: str = "") -> Path:
    """Write results.md, results.json and accuracy.png into `folder`; returns results.md.
    `iteration_time` (condition or "*" -> seconds) replaces the sweep's, with the `command`
    that gave it."""
    settings, runs = load(folder)
    if iteration_time:
        settings["iteration_time"] = iteration_time
        settings["report_command"] = command
    rows = summarize(settings, runs)
    pairs = min((r["seeds"] for r in rows), default=0)
    smoke = len(settings["seeds"]) < 5 or any(len(by_seed) < len(settings["seeds"]) for by_seed in runs.values())
    (folder / "results.json").write_text(json.dumps({"settings": settings, "rows": rows}, indent=2) + "\n")
    plot(settings, runs, rows, folder / "accuracy.png")
    s = settings["settings"]
    m = s["model"]
    text = [
        "# Accuracy under DLCP's loss (loss masks replayed into data-parallel training)", "",
        f"Command: `{settings['command']}`" + (f"; report: `{settings['report_command']}`"
                                               if settings.get("report_command") else ""), "",
        *(["**A smoke test or an unfinished sweep**: fewer than 5 seeds or missing runs; no claims.", ""]
          if smoke else []),
        f"Byte-level transformer ({m['layers']} layers, width {m['width']}, {m['heads']} heads, context "
        f"{m['context']}) on the Python standard library's source ({settings['corpus']['train_bytes']:,} train / "
        f"{settings['corpus']['val_bytes']:,} validation bytes, {settings['corpus']['train_files']} / "
        f"{settings['corpus']['val_files']} files, fingerprint {settings['corpus']['fingerprint'][:12]}); "
        f"{s['workers']} workers x {s['batch']} windows, {s['steps']} iterations, AdamW lr {s['lr']:g}; "
        f"seeds {settings['seeds']}; target {settings['target_bpb']:g} bits/byte (fixed before the runs).", "",
        table(settings, rows),
        "Reduce-stage masks (lost values zero in the sum, divided by the number of workers). "
        "Iterations to target are interpolated between evaluations every "
        f"{s['eval_every']} iterations; CIs are 95% percentile bootstrap over seed pairs (at most {pairs} here; "
        "few pairs make them wide), and a CI that includes 0 is no measured effect. A seed that did not reach "
        "the target is left out of the iteration differences and counted under *reached*."
        + (" Time to accuracy = mean iterations to target x the given iteration time; its ratio to *none* is "
           "the iterations ratio x the ratio of the two given times." if any("time_to_target_s" in r for r in rows)
           else ""), "",
        "![accuracy](accuracy.png)", ""]
    out = folder / "results.md"
    out.write_text("\n".join(text))
    return out
