"""CPU figures of processes, from ``/proc``: CPU use over wall time, and how long a process
waited for a CPU (a loaded machine).

Two wait figures are kept apart:

* :func:`wait_share` (what runs are marked by): the share of *wall* time the process had a
  thread runnable but not running, taken as its longest-waiting thread's wait
  (``/proc/<pid>/task/<tid>/schedstat``, field 2) over the wall time. The union of the
  threads' waits is at least that, so this is a lower bound; it does not grow with the
  number of threads (a sum would: 54 sender threads each waiting a little for the others
  add up to most of the process's runnable time on an idle machine).
* :func:`starvation` (the earlier figure, kept because recorded runs and the simulator's
  host model use it): waits summed over the threads over runnable time summed over the
  threads. It reads 0.57-0.89 for multi-threaded ranks on a quiet machine, so it does not
  tell whether a run was CPU-starved.
"""

from __future__ import annotations

import os
from pathlib import Path

PROC = Path("/proc")

#: (ns on a CPU, ns runnable but waiting for one) of each thread, by thread id
ThreadStats = dict[int, tuple[int, int]]


def cpu_seconds() -> float:
    """User + system CPU seconds of this process, all its threads (ended ones included)."""
    t = os.times()
    return t.user + t.system


def _read(path: Path) -> tuple[int, int] | None:
    try:
        fields = path.read_text().split()
        return int(fields[0]), int(fields[1])
    except (OSError, IndexError, ValueError):  # the thread ended meanwhile, or an odd file
        return None


def thread_stats(pid: int | str = "self", proc: Path = PROC) -> ThreadStats:
    """(ns on a CPU, ns runnable but waiting) of every live thread of `pid`, by thread id."""
    out: ThreadStats = {}
    try:
        tasks = list((proc / str(pid) / "task").iterdir())
    except OSError:  # the process ended
        return out
    for task in tasks:
        if task.name.isdigit() and (figures := _read(task / "schedstat")) is not None:
            out[int(task.name)] = figures
    return out


def tree_thread_stats(pids: list[int], proc: Path = PROC) -> ThreadStats:
    """:func:`thread_stats` of every thread of these processes and of all their descendants."""
    children: dict[int, list[int]] = {}
    for entry in proc.iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
                ppid = int(stat.rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    out: ThreadStats = {}
    seen: set[int] = set()
    todo = list(pids)
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        out.update(thread_stats(p, proc))
        todo += children.get(p, [])
    return out


def wait_share(before: ThreadStats, after: ThreadStats, wall_s: float) -> float | None:
    """Share of `wall_s` the process waited for a CPU (module doc): the largest wait of one
    thread between the two samples over the wall time, at most 1. A thread absent from
    `before` started in between (all its wait counts); one absent from `after` ended and is
    not seen (a lower bound). None without wall time or threads."""
    if wall_s <= 0 or not after:
        return None
    worst = max(max(0, wait - before.get(tid, (0, 0))[1]) for tid, (_, wait) in after.items())
    return min(1.0, worst / (wall_s * 1e9))


def schedstat() -> tuple[int, int]:
    """(ns on a CPU, ns runnable but waiting for one), summed over this process's threads."""
    run = wait = 0
    for r, w in thread_stats().values():
        run, wait = run + r, wait + w
    return run, wait


def starvation(before: tuple[int, int], after: tuple[int, int]) -> float | None:
    """The earlier figure (module doc): summed waits over summed runnable time of the threads."""
    run, wait = after[0] - before[0], after[1] - before[1]
    return wait / (run + wait) if run + wait > 0 else None
