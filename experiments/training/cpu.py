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

How long one wait lasts is a third figure, :func:`wait_per_slice`: the busiest thread's wait
over the timeslices it ran (schedstat's field 3, the times it was put on a CPU), both between
two samples. A thread that sleeps and wakes on an idle CPU counts a timeslice with no wait, so
this is the mean over every time it ran, not over the times it waited.
"""

from __future__ import annotations

import os
from pathlib import Path

PROC = Path("/proc")

#: (ns on a CPU, ns runnable but waiting for one, timeslices run) of each thread, by thread id
ThreadStats = dict[int, tuple[int, int, int]]


def cpu_seconds() -> float:
    """User + system CPU seconds of this process, all its threads (ended ones included)."""
    t = os.times()
    return t.user + t.system


def _read(path: Path) -> tuple[int, int, int] | None:
    try:
        fields = path.read_text().split()
        return int(fields[0]), int(fields[1]), int(fields[2])
    except (OSError, IndexError, ValueError):  # the thread ended meanwhile, or an odd file
        return None


def thread_stats(pid: int | str = "self", proc: Path = PROC) -> ThreadStats:
    """(ns on a CPU, ns runnable but waiting, timeslices run) of every live thread of `pid`, by thread id."""
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
    worst = max(max(0, figures[1] - before.get(tid, (0, 0, 0))[1]) for tid, figures in after.items())
    return min(1.0, worst / (wall_s * 1e9))


def wait_per_slice(before: ThreadStats, after: ThreadStats) -> float | None:
    """Mean wait for a CPU per timeslice (ns) of the busiest thread between the two samples
    (module doc): the thread that ran the most ns, its wait over the timeslices it ran. A
    thread absent from `before` started in between (all its figures count). None without
    threads, or when the busiest thread ran no timeslice (it did not run)."""
    deltas = []
    for tid, (run, wait, slices) in after.items():
        run0, wait0, slices0 = before.get(tid, (0, 0, 0))
        if run < run0 or slices < slices0:  # a reused thread id: a new thread
            run0 = wait0 = slices0 = 0
        deltas.append((run - run0, max(0, wait - wait0), slices - slices0))
    if not deltas:
        return None
    _, wait, slices = max(deltas)
    return wait / slices if slices > 0 else None


def schedstat() -> tuple[int, int]:
    """(ns on a CPU, ns runnable but waiting for one), summed over this process's threads."""
    run = wait = 0
    for r, w, _ in thread_stats().values():
        run, wait = run + r, wait + w
    return run, wait


def starvation(before: tuple[int, int], after: tuple[int, int]) -> float | None:
    """The earlier figure (module doc): summed waits over summed runnable time of the threads."""
    run, wait = after[0] - before[0], after[1] - before[1]
    return wait / (run + wait) if run + wait > 0 else None
