"""Run p4c's BMv2 STF driver (``run-bmv2-test.py``) with a barrier after control-plane commands.

Executed by the STF python (the one with ``ply`` and ``scapy``), never imported by the
project: ``python stf_bmv2_shim.py SCALE QUEUE_DEPTH DRIVER ARGS...``.

p4c's driver writes every control-plane command into simple_switch_CLI's stdin and then sleeps
1 s before the next packet, hoping the CLI has installed the entries by then; on a loaded machine
it may not have, and packets meet empty tables. The shim makes the wait exact: before the first
packet after any command it writes a line the CLI cannot parse (a token); the CLI answers every
line in order and each table command is a synchronous Thrift call, so once the CLI's
``Unknown syntax: TOKEN`` reply is read, every earlier command has been applied. The CLI's
output is still copied to the driver's stdout.

It also multiplies every sleep of the driver's module by SCALE: p4c's driver sleeps 2 s between
the last packet and stopping the switch, which may not drain thousands of packets on a loaded
machine.

The driver writes packets into simple_switch's input fifos as fast as it can. BMv2's input
buffer applies back pressure, but its egress queues (64 packets by default) drop when full, so
on a loaded machine a port that receives hundreds of packets loses some, depending on thread
timing. When QUEUE_DEPTH is not 0, the shim sends ``set_queue_depth QUEUE_DEPTH`` (every port
and priority) to simple_switch_CLI before the STF file's first command.

The driver's parsing, compilation, CLI commands and packet comparison are p4c's own, unchanged.
"""

from __future__ import annotations

import itertools
import os
import runpy
import subprocess
import sys
import threading
import time
import types
from pathlib import Path

BARRIER_TIMEOUT_S = 120.0


class CliReplies:
    """Copies a CLI process's stdout to ours and lets a caller wait for a token in it."""

    def __init__(self, proc: subprocess.Popen) -> None:  # type: ignore[type-arg]
        self._seen: set[str] = set()
        self._cond = threading.Condition()
        self._proc = proc
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self._proc.stdout is not None
        for raw in self._proc.stdout:
            line = raw.decode("utf8", "replace")
            sys.stdout.write(line)
            with self._cond:
                self._seen.update(word for word in line.split() if word.startswith("gf_barrier_"))
                self._cond.notify_all()
        with self._cond:
            self._seen.add("<eof>")
            self._cond.notify_all()

    def wait(self, token: str, timeout_s: float) -> bool:
        """True once `token` was echoed; False on timeout or when the CLI exited first."""
        with self._cond:
            return self._cond.wait_for(lambda: token in self._seen or "<eof>" in self._seen,
                                       timeout_s) and token in self._seen


def main() -> None:
    scale = float(sys.argv[1])
    queue_depth = int(sys.argv[2])
    driver = sys.argv[3]
    sys.argv = [driver, *sys.argv[4:]]
    sys.path.insert(0, str(Path(driver).resolve().parent))
    import bmv2stf  # noqa: E402  (p4c's module, beside the driver)

    slow = types.SimpleNamespace(**{k: getattr(time, k) for k in dir(time) if not k.startswith("__")})
    slow.sleep = lambda seconds: time.sleep(seconds * scale)
    bmv2stf.time = slow

    replies: dict[int, CliReplies] = {}
    real_popen = subprocess.Popen

    def popen(args, *rest, **kwargs):  # type: ignore[no-untyped-def]
        is_cli = kwargs.get("stdin") == subprocess.PIPE and any(
            str(a).endswith("_CLI") for a in (args if isinstance(args, list) else [args]))
        if is_cli:  # line-buffered replies: the CLI is a Python program writing to a pipe
            kwargs["stdout"] = subprocess.PIPE
            kwargs["env"] = dict(kwargs.get("env") or os.environ, PYTHONUNBUFFERED="1")
        proc = real_popen(args, *rest, **kwargs)
        if is_cli:
            replies[id(proc.stdin)] = CliReplies(proc)
        return proc

    bmv2stf.subprocess = types.SimpleNamespace(**{k: getattr(subprocess, k) for k in dir(subprocess)
                                                  if not k.startswith("__")})
    bmv2stf.subprocess.Popen = popen
    tokens = itertools.count()
    run_command = bmv2stf.RunBMV2.execute_stf_command

    def execute(self, stf_entry):  # type: ignore[no-untyped-def]
        if queue_depth and not getattr(self, "_queues_set", False):
            self._queues_set = True
            self.do_cli_command(f"set_queue_depth {queue_depth}")
        if stf_entry and stf_entry[0] == "packet" and getattr(self, "packetDelay", 0):
            cli = replies.get(id(self.cli_stdin))
            if cli is not None:
                token = f"gf_barrier_{next(tokens)}"
                self.cli_stdin.write(bytes(token + "\n", encoding="utf8"))
                self.cli_stdin.flush()
                if cli.wait(token, BARRIER_TIMEOUT_S):
                    self.packetDelay = 0
                else:
                    sys.stdout.write(f"stf shim: simple_switch_CLI did not answer {token} "
                                     f"within {BARRIER_TIMEOUT_S:.0f} s\n")
        return run_command(self, stf_entry)

    bmv2stf.RunBMV2.execute_stf_command = execute
    runpy.run_path(driver, run_name="__main__")


if __name__ == "__main__":
    main()
