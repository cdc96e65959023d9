"""The trace job's close barrier: a rank started with ``--wait-go`` stays open after its summary
until the runner lets it close, and the runner lets a job's ranks close only once every one of
them is done (a rank that closed as soon as its own part ended said goodbye to a peer still
waiting for the final answer to its last message, which failed that peer)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from experiments.trace_sweep import release_finished_jobs
from experiments.training.trace_worker import SHARED_TRACES
from mininet_topos.launcher import free_ports

ROOT = Path(__file__).resolve().parent.parent


class _Process:
    def __init__(self, code: int | None = None) -> None:
        self.code = code

    def poll(self) -> int | None:
        return self.code


class _Role:
    """What release_finished_jobs reads of a RoleProcess."""

    def __init__(self, summarised: bool = False, code: int | None = None) -> None:
        self.done = summarised
        self.process = _Process(code)
        self.released = 0

    def summarised(self) -> bool:
        return self.done

    def release(self) -> None:
        self.released += 1


def test_a_job_is_let_go_only_when_every_rank_is_done() -> None:
    a0, a1 = _Role(summarised=True), _Role()
    b0, b1 = _Role(summarised=True), _Role(code=0)  # job 2's rank 1 already ended
    roles: list[Any] = [(1, 0, a0, True), (1, 1, a1, True), (2, 0, b0, False), (2, 1, b1, False)]
    released: set[int] = set()
    release_finished_jobs(roles, released)
    assert released == {2} and (a0.released, a1.released) == (0, 0) and (b0.released, b1.released) == (1, 1)
    a1.done = True
    release_finished_jobs(roles, released)
    release_finished_jobs(roles, released)  # once only
    assert released == {1, 2} and (a0.released, a1.released, b0.released) == (1, 1, 1)


def _reader(proc: subprocess.Popen, lines: list[dict]) -> threading.Thread:
    def read() -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            if raw.startswith("{"):
                lines.append(json.loads(raw))
    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread


@pytest.mark.skipif(not SHARED_TRACES.exists(), reason=f"no H100 trace at {SHARED_TRACES}")
@pytest.mark.slow
def test_a_done_rank_stays_open_until_released() -> None:
    peers = ",".join(f"127.0.0.1:{p}" for p in free_ports(2))
    procs = [subprocess.Popen([sys.executable, "-m", "experiments.training.trace_worker", "--rank", str(r),
                               "--peers", peers, "--iterations", "2", "--timeout-s", "60", "--k", "1", "--comm", "dlcp",
                               "--scheduler", "fusion", "--overlap", "ddp", "--wait-go"],
                              cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for r in range(2)]
    lines: list[list[dict]] = [[], []]
    try:
        readers = [_reader(p, out) for p, out in zip(procs, lines)]
        deadline = time.monotonic() + 120
        while not all(any(l["event"] == "listening" for l in out) for out in lines):
            assert time.monotonic() < deadline and all(p.poll() is None for p in procs), "a rank did not start"
            time.sleep(0.05)
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        deadline = time.monotonic() + 240
        while not all(any(l["event"] == "done" for l in out) for out in lines):
            assert time.monotonic() < deadline, "the job did not finish"
            assert all(p.poll() is None for p in procs), [p.stderr.read()[-2000:] for p in procs if p.poll()]
            time.sleep(0.05)
        # Unreleased, each stays open past every linger its endpoint's close has (0.25 s quiet,
        # then at most 2 s after its last final answer, the max RTO).
        time.sleep(4.0)
        assert [p.poll() for p in procs] == [None, None]
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("close\n")
            p.stdin.flush()
        for p in procs:
            assert p.wait(timeout=60) == 0, p.stderr.read()[-2000:] if p.stderr else ""
        for r in readers:
            r.join(5)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(5)
