"""Start a training job's roles as processes and follow them.

A :class:`Spawner` starts one role's command line somewhere: on this machine (loopback) or
inside a Mininet host (``host.popen``). :func:`run_job` starts the parameter server, reads
the address it bound, starts the workers, forwards worker 0's iteration records to a
callback (progress display) and collects everything the roles printed.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from experiments.errors import ExperimentError
from experiments.training.loop import TrainConfig
from experiments.training.options import TransportOptions

#: Starts argv with stdin and stdout piped and stderr into the given file.
Spawner = Callable[[list[str], IO[bytes]], subprocess.Popen]


def local_spawner(argv: list[str], stderr: IO[bytes]) -> subprocess.Popen:
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=stderr, stdin=subprocess.PIPE)


def gradfabric_argv() -> list[str]:
    """How to run the gradfabric command with this interpreter (works inside namespaces too)."""
    return [sys.executable, "-m", "gradfabric.command.cli"]


def role_argv(role: str, config: TrainConfig, options: TransportOptions, *, workers: int,
              bind: str, ps: str | None = None, rank: int | None = None, wait_go: bool = False) -> list[str]:
    """The command line of one role (see ``gradfabric train --role``)."""
    argv = [*gradfabric_argv(), "train", "--role", role, "--workers", str(workers), "--bind", bind,
            "--iterations", str(config.iterations), "--batch-size", str(config.batch_size),
            "--lr", repr(config.lr), "--seed", str(config.seed),
            "--hidden", ",".join(str(h) for h in config.hidden), "--eval-every", str(config.eval_every),
            "--scheduler", options.scheduler, "--grad-bound", repr(options.grad_bound),
            "--param-bound", repr(options.param_bound), "--front-loss-bound", repr(options.front_loss_bound),
            "--back-loss-bound", repr(options.back_loss_bound), "--job", str(options.job_id),
            "--rate", repr(options.rate_pps), "--timeout", repr(options.timeout_s)]
    if ps is not None:
        argv += ["--ps", ps]
    if rank is not None:
        argv += ["--rank", str(rank)]
    if wait_go:
        argv.append("--wait-go")
    return argv


class RoleProcess:
    """One running role: its JSON lines are read by a thread as they come."""

    def __init__(self, name: str, argv: list[str], spawner: Spawner, log: Path,
                 on_line: Callable[[dict[str, Any]], None] | None = None) -> None:
        self.name = name
        self.log = log
        self.lines: list[dict[str, Any]] = []
        self.listening = threading.Event()
        self.address = ""
        self._on_line = on_line
        log.parent.mkdir(parents=True, exist_ok=True)
        self._stderr = log.open("wb")
        self.process = spawner(argv, self._stderr)
        self._reader = threading.Thread(target=self._read, name=f"read-{name}", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            try:
                line = json.loads(raw)
            except ValueError:
                continue
            self.lines.append(line)
            if line.get("event") == "listening":
                self.address = str(line["address"])
                self.listening.set()
            elif self._on_line is not None:
                self._on_line(line)

    def finish_reading(self, timeout: float = 5.0) -> None:
        """Wait until every line the (ended) process printed is read."""
        self._reader.join(timeout)

    def stderr_tail(self, lines: int = 8) -> str:
        self._stderr.flush()
        try:
            text = self.log.read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return "\n".join(text[-lines:])

    def failure(self) -> ExperimentError:
        return ExperimentError(f"{self.name} exited with {self.process.returncode}; "
                               f"its log {self.log} ends with:\n{self.stderr_tail()}")

    def wait_listening(self, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while not self.listening.wait(0.1):
            if self.process.poll() is not None or time.monotonic() > deadline:
                if self.process.poll() is None:
                    self.stop()
                    raise ExperimentError(f"{self.name} did not bind its socket within {timeout:.0f} s "
                                          f"(log {self.log}):\n{self.stderr_tail()}")
                raise self.failure()
        return self.address

    def go(self) -> None:
        """Send the start signal (a line on stdin) to a role started with --wait-go."""
        if self.process.stdin is None:
            raise ExperimentError(f"{self.name} was started without a stdin pipe (see Spawner)")
        try:
            self.process.stdin.write(b"go\n")
            self.process.stdin.flush()
        except OSError:
            raise self.failure() from None

    def summarised(self) -> bool:
        """Whether the role printed its summary (``done``); it may still be open for its peers."""
        return any(line.get("event") == "done" for line in list(self.lines))

    def release(self) -> None:
        """Let a role started with --wait-go that printed its summary close (a second line on
        stdin): the job's close barrier, sent once every rank of the job is done, so that no
        rank closes its endpoint while a peer still waits for its answers. Best effort: a role
        that already ended needs nothing."""
        if self.process.stdin is None or self.process.poll() is not None:
            return
        try:
            self.process.stdin.write(b"close\n")
            self.process.stdin.flush()
        except OSError:
            pass

    def done(self) -> dict[str, Any]:
        for line in reversed(self.lines):
            if line.get("event") == "done":
                return line
        raise ExperimentError(f"{self.name} ended without its summary (log {self.log})")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        self.finish_reading(2)
        self._stderr.close()


@dataclass
class JobOutcome:
    """What every role of a job printed."""

    records: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    server: dict[str, Any] = field(default_factory=dict)
    worker_receive: dict[int, dict[str, Any]] = field(default_factory=dict)
    wall_s: float = 0.0


@dataclass(frozen=True)
class Placement:
    """Where the roles run: a spawner and the IP each role binds (and is reached at)."""

    ps: tuple[Spawner, str]
    workers: Sequence[tuple[Spawner, str]]
    ps_port: int = 0  # 0: any free port (loopback); on a fabric, the DLCP port 19600
    worker_port: int = 0


def run_job(config: TrainConfig, options: TransportOptions, placement: Placement, logs: Path, *,
            on_record: Callable[[dict[str, Any]], None] | None = None,
            on_ready: Callable[[], None] | None = None, start_timeout_s: float = 120.0,
            job_timeout_s: float = 900.0) -> JobOutcome:
    """Run the job to its end (see the module doc); any role failing fails the job.

    Workers start their first iteration once every role is up and `on_ready` (if given)
    returned: start-up costs stay out of the run, and so does whatever `on_ready` waits for."""
    n = len(placement.workers)
    if n < 1:
        raise ExperimentError("a training job needs at least one worker")
    roles: list[RoleProcess] = []
    try:
        spawn, ip = placement.ps
        ps = RoleProcess("parameter server", role_argv("ps", config, options, workers=n,
                                                       bind=f"{ip}:{placement.ps_port}"), spawn, logs / "ps.log")
        roles.append(ps)
        port = ps.wait_listening(start_timeout_s).rpartition(":")[2]
        for rank, (spawn, worker_ip) in enumerate(placement.workers):
            forward = on_record if rank == 0 else None
            roles.append(RoleProcess(
                f"worker {rank}", role_argv("worker", config, options, workers=n, rank=rank,
                                            bind=f"{worker_ip}:{placement.worker_port}", ps=f"{ip}:{port}",
                                            wait_go=True),
                spawn, logs / f"worker{rank}.log",
                on_line=(lambda line, f=forward: f(line) if f and line.get("event") == "iteration" else None)))
        for role in roles[1:]:
            role.wait_listening(start_timeout_s)
        if on_ready is not None:
            on_ready()
        started = time.perf_counter()
        for role in roles[1:]:
            role.go()
        deadline = time.monotonic() + job_timeout_s
        pending = list(roles)
        while pending:
            for role in list(pending):
                code = role.process.poll()
                if code is None:
                    continue
                if code != 0:
                    raise role.failure()
                pending.remove(role)
            if time.monotonic() > deadline:
                raise ExperimentError(f"the job did not finish within {job_timeout_s:.0f} s "
                                      f"(still running: {', '.join(r.name for r in pending)})")
            time.sleep(0.05)
        for role in roles:
            role.finish_reading()
        outcome = JobOutcome(wall_s=time.perf_counter() - started)
        outcome.server = ps.done()
        for rank, role in enumerate(roles[1:]):
            outcome.records[rank] = [line for line in role.lines if line.get("event") == "iteration"]
            outcome.worker_receive[rank] = role.done()["receive"]
        return outcome
    finally:
        for role in roles:
            role.stop()
