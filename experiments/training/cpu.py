"""CPU time of this process and how long it waited for a CPU (a loaded machine), from ``/proc``."""

from __future__ import annotations

import os
from pathlib import Path


def cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system


def schedstat() -> tuple[int, int]:
    """(ns on a CPU, ns runnable but waiting for one), summed over this process's threads."""
    run = wait = 0
    for task in Path("/proc/self/task").iterdir():
        try:
            fields = (task / "schedstat").read_text().split()
        except OSError:
            continue
        run, wait = run + int(fields[0]), wait + int(fields[1])
    return run, wait


def starvation(before: tuple[int, int], after: tuple[int, int]) -> float | None:
    """Share of the time this process was runnable that it waited for a CPU (a loaded machine)."""
    run, wait = after[0] - before[0], after[1] - before[1]
    return wait / (run + wait) if run + wait > 0 else None
