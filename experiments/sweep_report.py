"""The sweep's report: ``results.md`` (tables with medians and 95% CIs), ``results.json``
(meta, summary and every run's figures) and per scenario three PNG plots: accuracy against
wall time (one line per run), the CDF of iteration times, and speed-ups with CIs."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from experiments.stats import run_metrics, summarize

ORDER = ("gloo", "reliable", "qos", "priority", "dropping", "spraying", "dlcp")


def _est(e: dict[str, Any] | None, scale: float = 1.0, fmt: str = "{:.2f}") -> str:
    if e is None:
        return "-"
    text = fmt.format(e["median"] * scale)
    if e["low"] is not None:
        text += f" [{fmt.format(e['low'] * scale)}, {fmt.format(e['high'] * scale)}]"
    return text


def _configs(table: dict[str, Any]) -> list[str]:
    return sorted(table, key=lambda c: ORDER.index(c) if c in ORDER else len(ORDER))


def markdown(summary: dict[str, Any], meta: dict[str, Any]) -> str:
    job = meta["job"]
    lines = [
        "# Training over the fabric: DDP/gloo, QoS isolation and DLCP, repeated", "",
        f"Made by `{meta['command']}`, started {meta['started']}, {meta.get('elapsed_s', 0) / 60:.1f} min; "
        f"load average (1, 5, 15 min) at start {meta['load_at_start']}, at end {meta.get('load_at_end')}, "
        f"{meta['cpus']} CPUs. Site: {meta['site']}."
        + ("" if "pooled_from" not in meta else " Pooled from: " + "; ".join(
            f"`{p['command']}` started {p['started']}" for p in meta["pooled_from"]) + "."),
        f"Job: PyTorch DDP, CNN on scikit-learn digits, {job['iterations']} iterations, batch {job['batch_size']} "
        f"per rank, Adam lr {job['lr']}; target test accuracy {meta['target_accuracy']}; "
        + (f"{meta['repetitions']} repetitions per configuration, interleaved, data-order seed per repetition."
         if "pooled_from" not in meta else
         f"{meta['repetitions']} runs per configuration from {len(meta['pooled_from'])} sweeps, each interleaved with "
         "a data-order seed per repetition (sweeps run with the same seeds repeat those data orders)."), "",
        "Cells: median [95% bootstrap CI]. Time to target of a run that did not reach it is its training time "
        "(a lower bound; counted under *not reached*). *Same round vs gloo*: final accuracy minus gloo's in "
        "the same round (same data-order seed), median of those differences. Speed-up: median time to target of the reference over "
        "this configuration's. Background goodput: sum of the long flows' received Mbit/s.", "",
    ]
    for sc, table in summary.items():
        lines += [f"## Scenario `{sc}`: {meta['scenarios'].get(sc, '')}", "",
                  "| configuration | runs ok / failed / not reached | time to target (s) | iterations to target "
                  "| speed-up vs gloo | speed-up vs qos | iteration p50 (ms) | iteration p99 (ms) | final accuracy "
                  "| accuracy vs gloo (pp) | same round vs gloo (pp) |",
                  "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for c in _configs(table):
            row = table[c]
            lines.append(
                f"| {c} | {row['ok']} / {row['failed']} / {row['not_reached']} | {_est(row['time_to_target_s'], fmt='{:.1f}')} "
                f"| {_est(row['iterations_to_target'], fmt='{:.0f}')} | {_est(row['speedup_vs_gloo'])} "
                f"| {_est(row['speedup_vs_qos'])} | {_est(row['iteration_p50_s'], 1e3, '{:.0f}')} "
                f"| {_est(row['iteration_p99_s'], 1e3, '{:.0f}')} | {_est(row['final_accuracy'], fmt='{:.3f}')} "
                f"| {_est(row['accuracy_vs_gloo'], 100, '{:+.1f}')} "
                f"| {_est(row.get('accuracy_vs_gloo_paired'), 100, '{:+.1f}')} |")
        lines += ["", "| configuration | gradient loss (%) | packets | retransmitted | dropped (transport) "
                  "| magnitude drops (switch) | background goodput (Mbit/s) | UDP background loss (%) "
                  "| request/response FCT p50 / p99 (ms) | requests failed | job 2 time to target (s) |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for c in _configs(table):
            row = table[c]
            lines.append(
                f"| {c} | {_est(row['gradient_loss'], 100, '{:.2f}')} | {_est(row['packets'], fmt='{:.0f}')} "
                f"| {_est(row['retransmitted'], fmt='{:.0f}')} | {_est(row['dropped'], fmt='{:.0f}')} "
                f"| {_est(row['magnitude_drops'], fmt='{:.0f}')} | {_est(row['bg_goodput_mbps'])} "
                f"| {_est(row['bg_udp_loss'], 100, '{:.1f}')} | {_est(row['rr_fct_p50_ms'], fmt='{:.0f}')} / "
                f"{_est(row['rr_fct_p99_ms'], fmt='{:.0f}')} | {_est(row['rr_failed'], fmt='{:.0f}')} "
                f"| {_est(row['job2_time_to_target_s'], fmt='{:.1f}')} |")
        lines += ["", f"Plots: `accuracy_{sc}.png`, `iteration_cdf_{sc}.png`, `speedup_{sc}.png`.", ""]
    lines += ["Packets count the DLCP data packets of the measured job (first transmissions, all ranks); "
              "gloo's TCP is not counted. Raw runs: `runs/*.json`; failed runs keep their ranks' logs under `logs/`.",
              ""]
    return "\n".join(lines)


def _legend(ax: Any, **kwargs: Any) -> None:
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize="small", **kwargs)


def plots(records: Sequence[dict[str, Any]], summary: dict[str, Any], target: float, out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    colors = {c: plt.get_cmap("tab10")(i) for i, c in enumerate(ORDER)}
    paths: list[Path] = []
    for sc, table in summary.items():
        runs = [(r["config"], run_metrics(r, target)) for r in records if r["scenario"] == sc and r["status"] == "ok"]
        fig, ax = plt.subplots(figsize=(7, 4.5))
        seen: set[str] = set()
        for config, m in runs:
            if m["accuracy_curve"]:
                t, a = zip(*m["accuracy_curve"])
                ax.plot(t, a, color=colors.get(config), alpha=0.7, linewidth=1,
                        label=None if config in seen else config)
                seen.add(config)
        ax.axhline(target, color="grey", linestyle=":", linewidth=1, label="target")
        ax.set(xlabel="wall time (s)", ylabel="test accuracy", ylim=(0, 1), title=f"{sc}: accuracy, one line per run")
        ax.grid(alpha=0.3)
        _legend(ax, loc="lower right")
        fig.tight_layout()
        paths.append(out / f"accuracy_{sc}.png")
        fig.savefig(paths[-1], dpi=110)
        plt.close(fig)

        fig, ax = plt.subplots(figsize=(7, 4.5))
        for config in _configs(table):
            x = np.sort(np.concatenate([np.asarray(m["iteration_times_s"]) for c, m in runs if c == config] or
                                       [np.array([])]) * 1e3)
            if x.size:
                ax.step(x, np.arange(1, x.size + 1) / x.size, where="post", label=config, color=colors.get(config))
        ax.set_xscale("log")
        ax.set(xlabel="iteration time (ms)", ylabel="CDF", title=f"{sc}: iteration times, all runs pooled")
        ax.grid(alpha=0.3, which="both")
        _legend(ax, loc="lower right")
        fig.tight_layout()
        paths.append(out / f"iteration_cdf_{sc}.png")
        fig.savefig(paths[-1], dpi=110)
        plt.close(fig)

        fig, ax = plt.subplots(figsize=(7, 4.5))
        configs = _configs(table)
        for k, ref in enumerate(("gloo", "qos")):
            xs, ys, errs = [], [], [[], []]
            for i, config in enumerate(configs):
                e = table[config].get(f"speedup_vs_{ref}")
                if e is None:
                    continue
                xs.append(i + (k - 0.5) * 0.38)
                ys.append(e["median"])
                low = e["low"] if e["low"] is not None else e["median"]
                high = e["high"] if e["high"] is not None else e["median"]
                errs[0].append(max(0.0, e["median"] - low))
                errs[1].append(max(0.0, high - e["median"]))
            if xs:
                ax.bar(xs, ys, width=0.38, yerr=errs, capsize=3, label=f"vs {ref}")
        ax.axhline(1.0, color="grey", linewidth=1)
        ax.set_xticks(range(len(configs)), configs)
        ax.set(ylabel="speed-up in time to target (x)", title=f"{sc}: speed-up, median and 95% CI")
        _legend(ax)
        fig.tight_layout()
        paths.append(out / f"speedup_{sc}.png")
        fig.savefig(paths[-1], dpi=110)
        plt.close(fig)
    return paths


def write_report(records: Sequence[dict[str, Any]], meta: dict[str, Any], out: Path) -> dict[str, Any]:
    """Write results.md, results.json and the plots; return the summary."""
    target = float(meta["target_accuracy"])
    summary = summarize(records, target)
    per_run = []
    for r in records:
        entry = {k: r[k] for k in ("run_id", "scenario", "config", "repetition", "seed", "status") if k in r}
        if r["status"] == "ok":
            m = run_metrics(r, target)
            entry.update({k: v for k, v in m.items() if k not in ("iteration_times_s", "accuracy_curve")})
        else:
            entry["error"] = r.get("error")
        per_run.append(entry)
    (out / "results.json").write_text(json.dumps({"meta": meta, "summary": summary, "runs": per_run}, indent=1) + "\n")
    (out / "results.md").write_text(markdown(summary, meta))
    plots(records, summary, target, out)
    return summary


def pool(folders: Sequence[Path], out: Path, command: str) -> Path:
    """One report over the runs of several sweep folders (each folder's runs/*.json and meta)."""
    from experiments.errors import ExperimentError

    records: list[dict[str, Any]] = []
    metas = []
    for folder in folders:
        try:
            metas.append(json.loads((folder / "results.json").read_text())["meta"])
        except (OSError, ValueError, KeyError) as exc:
            raise ExperimentError(f"{folder} holds no readable results.json ({exc})") from None
        records += [{**json.loads(p.read_text()), "source": str(folder)} for p in sorted((folder / "runs").glob("*.json"))]
    targets = {m["target_accuracy"] for m in metas}
    if len(targets) != 1:
        raise ExperimentError(f"the folders used different target accuracies: {sorted(targets)}")
    out.mkdir(parents=True, exist_ok=True)
    meta = dict(metas[0])
    meta.update({
        "command": command, "pooled_from": [{"folder": str(f), "command": m["command"], "started": m["started"],
                                             "load_at_start": m["load_at_start"], "load_at_end": m.get("load_at_end")}
                                            for f, m in zip(folders, metas)],
        "repetitions": sum(m["repetitions"] for m in metas), "elapsed_s": sum(m.get("elapsed_s", 0) for m in metas),
        "load_at_end": metas[-1].get("load_at_end"),
    })
    write_report(records, meta, out)
    return out
