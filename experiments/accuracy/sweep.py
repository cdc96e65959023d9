"""The accuracy sweep: conditions x seeds, paired by seed and interleaved, resumable.

A folder holds ``settings.json`` (everything fixed before the runs, with the command) and one
``runs/<condition>_seed<k>.jsonl`` per finished run (one JSON record per iteration, written
under a temporary name and renamed when the run is complete, so ``--resume`` skips exactly
the finished runs). The report (``report.py``) reads only the folder.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from experiments.accuracy.data import Corpus, load_corpus
from experiments.accuracy.masks import (MaskSource, NoLoss, PacketLayout, RandomLoss, RecordedLoss, SmallestLoss,
                                        read_masks)
from experiments.accuracy.model import ModelConfig
from experiments.accuracy.train import TrainSettings, layout_of, make_model, train
from experiments.errors import ExperimentError

#: The synthetic sweep: no loss, random p% of packets, DLCP's p% smallest, p in {1, 10, 30}.
SYNTHETIC = ("none", "random-1", "random-10", "random-30", "smallest-1", "smallest-10", "smallest-30")
#: Validation bits/byte the iterations are counted to; fixed before the sweep (experiments/README.md).
TARGET_BPB = 3.1
SEEDS = 5
SETTINGS = TrainSettings(model=ModelConfig(layers=2, width=64, heads=4, context=32), workers=4, batch=8,
                         steps=450, lr=3e-3, warmup=20, eval_every=10, eval_windows=128, threads=1)
_CONDITION = re.compile(r"^(none|(random|smallest)-(\d+(\.\d+)?)|recorded-[A-Za-z0-9_.-]+|counts-[A-Za-z0-9_.-]+)$")


@dataclass
class SweepPlan:
    """What to run and where."""

    out: Path
    conditions: tuple[str, ...] = SYNTHETIC
    seeds: tuple[int, ...] = tuple(range(SEEDS))
    settings: TrainSettings = SETTINGS
    target: float = TARGET_BPB
    masks: dict[str, Path] = field(default_factory=dict)  # recorded-NAME -> file, counts-RUN -> trace run file
    iteration_time: dict[str, float] = field(default_factory=dict)  # condition (or "*") -> seconds
    command: str = ""

    def describe(self, corpus: Corpus) -> dict[str, Any]:
        return {"conditions": list(self.conditions), "seeds": list(self.seeds), "target_bpb": self.target,
                "settings": self.settings.describe(), "corpus": corpus.describe(),
                "masks": {k: str(v) for k, v in self.masks.items()}, "iteration_time": self.iteration_time,
                "command": self.command}


def check_condition(name: str, masks: dict[str, Path]) -> None:
    if not _CONDITION.match(name):
        raise ExperimentError(f"unknown condition {name!r}: use none, random-P, smallest-P (P in percent) "
                              f"or recorded-NAME with --masks NAME=FILE, counts-RUN with --trace DIR")
    if name.startswith("recorded-") and name not in masks:
        raise ExperimentError(f"condition {name!r} needs --masks {name.removeprefix('recorded-')}=FILE")
    if name.startswith("counts-") and name not in masks:
        raise ExperimentError(f"condition {name!r} needs --trace DIR (a trace sweep holding run "
                              f"{name.removeprefix('counts-')})")
    if name.startswith(("random-", "smallest-")) and not 0 <= float(name.split("-")[1]) < 100:
        raise ExperimentError(f"condition {name!r}: the share must be in [0, 100)")


def mask_source(name: str, layout: PacketLayout, seed: int, masks: dict[str, Path]) -> MaskSource:
    check_condition(name, masks)
    if name == "none":
        return NoLoss(layout)
    if name.startswith("recorded-"):
        return RecordedLoss(layout, read_masks(masks[name]), name)
    if name.startswith("counts-"):
        from experiments.accuracy.trace import counted_source

        return counted_source(masks[name], layout, name)
    kind, share = name.split("-")
    if kind == "random":
        return RandomLoss(layout, float(share) / 100, seed)
    return SmallestLoss(layout, float(share) / 100)


def run_path(out: Path, condition: str, seed: int) -> Path:
    return out / "runs" / f"{condition}_seed{seed}.jsonl"


def read_run(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def run_sweep(plan: SweepPlan, resume: bool = False) -> None:
    """Run every (seed, condition) not yet in the folder, seed by seed (pairs interleaved)."""
    for c in plan.conditions:
        check_condition(c, plan.masks)
    settings_file = plan.out / "settings.json"
    corpus = load_corpus()
    described = plan.describe(corpus)
    if settings_file.exists():
        if not resume:
            raise ExperimentError(f"{plan.out} already holds a sweep; use --resume {plan.out} to continue it")
        before = json.loads(settings_file.read_text())
        for key in ("settings", "target_bpb", "corpus"):
            if before.get(key) != described[key]:
                raise ExperimentError(f"{settings_file}: {key} differs from this run's; resume with the same "
                                      f"parameters (recorded: {before.get(key)})")
        described["command"] = before.get("command", "") + (" && " + plan.command if plan.command else "")
        # Parts of one sweep (other seeds or conditions, maybe run at the same time) add up.
        described["seeds"] = sorted(set(before["seeds"]) | set(described["seeds"]))
        described["conditions"] = list(dict.fromkeys(before["conditions"] + described["conditions"]))
    plan.out.mkdir(parents=True, exist_ok=True)
    (plan.out / "runs").mkdir(exist_ok=True)
    settings_file.write_text(json.dumps(described, indent=2) + "\n")
    layout = layout_of(make_model(plan.settings, 0))
    todo = [(s, c) for s in plan.seeds for c in plan.conditions if not run_path(plan.out, c, s).exists()]
    done_before = len(plan.seeds) * len(plan.conditions) - len(todo)
    print(f"accuracy sweep in {plan.out}: {len(todo)} runs to do ({done_before} already there), "
          f"{plan.settings.steps} iterations each, corpus {corpus.train.size:,} train / {corpus.val.size:,} "
          f"validation bytes", flush=True)
    started = time.monotonic()
    for n, (seed, condition) in enumerate(todo, start=1):
        path = run_path(plan.out, condition, seed)
        if path.exists() or not _claim(path):
            continue  # finished or being run by another part of the sweep
        t0 = time.monotonic()
        try:
            records = train(corpus, plan.settings, seed, mask_source(condition, layout, seed, plan.masks))
            tmp = path.with_suffix(".partial")
            tmp.write_text("".join(json.dumps(r) + "\n" for r in records))
            tmp.rename(path)
        finally:
            path.with_suffix(".claim").unlink(missing_ok=True)
        eta = (time.monotonic() - started) / n * (len(todo) - n)
        last = records[-1]
        print(f"[{n}/{len(todo)}] {condition} seed {seed}: val {last['val_bpb']:.3f} bits/byte, "
              f"{last['reduce_lost']:.2%} lost at the last step, {time.monotonic() - t0:.0f} s "
              f"(at most {eta / 60:.0f} min left)", flush=True)


def _claim(path: Path) -> bool:
    """Take a run for this process (a ``.claim`` file with its pid); a claim of a process
    that is gone is taken over. False when another live process holds it."""
    claim = path.with_suffix(".claim")
    for _ in range(2):
        try:
            with open(claim, "x") as f:
                f.write(str(os.getpid()))
            return True
        except FileExistsError:
            try:
                pid = int(claim.read_text() or "0")
                os.kill(pid, 0)
                return False
            except ProcessLookupError:
                claim.unlink(missing_ok=True)  # its process is gone
            except (ValueError, PermissionError, FileNotFoundError):
                return False
    return False


def parse_iteration_times(items: Sequence[str]) -> dict[str, float]:
    """``SECONDS`` (every condition) or ``CONDITION=SECONDS`` items."""
    out: dict[str, float] = {}
    for item in items:
        name, sep, value = item.rpartition("=")
        try:
            seconds = float(value)
        except ValueError:
            raise ExperimentError(f"--iteration-time {item!r}: expected [CONDITION=]SECONDS") from None
        if seconds <= 0:
            raise ExperimentError(f"--iteration-time {item!r}: seconds must be positive")
        out[name if sep else "*"] = seconds
    return out


def parse_seeds(text: str) -> tuple[int, ...]:
    """``N`` (seeds 0..N-1), ``A-B`` (inclusive) or a comma-separated list."""
    try:
        if "," in text:
            seeds = tuple(int(x) for x in text.split(","))
        elif "-" in text:
            a, b = text.split("-")
            seeds = tuple(range(int(a), int(b) + 1))
        else:
            seeds = tuple(range(int(text)))
    except ValueError:
        raise ExperimentError(f"--seeds {text!r}: expected N, A-B or a comma-separated list") from None
    if not seeds or min(seeds) < 0:
        raise ExperimentError(f"--seeds {text!r} names no seeds (or a negative one)")
    return tuple(dict.fromkeys(seeds))


def parse_masks_args(items: Sequence[str]) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z0-9_.]+", name):
            raise ExperimentError(f"--masks {item!r}: expected NAME=FILE (NAME of letters, digits, _ and .)")
        out[f"recorded-{name}"] = Path(path)
    return out
