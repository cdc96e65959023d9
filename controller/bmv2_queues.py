"""Queue rate and depth on BMv2, through its Thrift CLI (``simple_switch_CLI``).

BMv2 exposes queue rates and depths only over Thrift, never over P4Runtime, so this is a
separate, explicit path: it runs ``simple_switch_CLI --thrift-port PORT`` with
``set_queue_rate`` / ``set_queue_depth`` commands and touches nothing else.

BMv2 1.15's meaning: ``set_queue_rate R PORT`` sets *each* priority queue of the port to R
packets/s, ``set_queue_rate R PORT PRIO`` the queue of priority PRIO only; depth likewise.
The embedded target takes the same settings on its command line (``--queue-rate``,
``--queue-depth``); its port rate shared by all queues (``--port-rate``) has no BMv2
equivalent.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass

from controller.errors import ControllerError
from gradfabric.p4ref import ENV_PREFIX, find_tool

#: What the Thrift CLI prints when a command did not apply (it may still exit 0).
FAILURE_MARKS = ("Error", "Invalid", "Unknown syntax", "Traceback")


@dataclass(frozen=True)
class QueueSetting:
    port: int
    rate_pps: int | None = None
    depth_packets: int | None = None
    priority: int | None = None  # None: every priority queue of the port

    def commands(self) -> list[str]:
        suffix = f" {self.priority}" if self.priority is not None else ""
        out = []
        if self.rate_pps is not None:
            out.append(f"set_queue_rate {self.rate_pps} {self.port}{suffix}")
        if self.depth_packets is not None:
            out.append(f"set_queue_depth {self.depth_packets} {self.port}{suffix}")
        return out


def apply_queue_settings(
    thrift_port: int, settings: list[QueueSetting], *, cli: str = "simple_switch_CLI", timeout: float = 20
) -> str:
    """Run the Thrift CLI (``$GRADFABRIC_P4REF/bin``, else PATH) against one BMv2 switch;
    returns its output, raises :class:`ControllerError` with the CLI's words on failure."""
    path = find_tool(cli)
    if path is None:
        raise ControllerError(
            f"{cli} is neither under ${ENV_PREFIX}/bin nor on PATH: queue settings on BMv2 need BMv2's Thrift CLI")
    script = "\n".join(cmd for s in settings for cmd in s.commands()) + "\n"
    try:
        proc = subprocess.run([str(path), "--thrift-port", str(thrift_port)], input=script,
                              capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ControllerError(f"{cli} --thrift-port {thrift_port}: {exc}") from exc
    output = proc.stdout + proc.stderr
    if proc.returncode != 0 or any(mark in output for mark in FAILURE_MARKS):
        raise ControllerError(
            f"{cli} --thrift-port {thrift_port} failed (exit {proc.returncode}) on:\n{script}"
            f"{output.strip()[-800:]}"
        )
    return proc.stdout
