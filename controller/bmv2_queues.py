"""Queue rate and depth on BMv2, through its Thrift CLI (``simple_switch_CLI``).

BMv2 exposes queue rates and depths only over Thrift, never over P4Runtime, so this is a
separate, explicit path: it runs ``simple_switch_CLI --thrift-port PORT`` with
``set_queue_rate`` / ``set_queue_depth`` commands and touches nothing else. The embedded
target takes the same settings on its command line (``--queue-rate``, ``--queue-depth``).
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass

from controller.errors import ControllerError


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
    """Run the Thrift CLI against one BMv2 switch; returns its output, raises on failure."""
    if shutil.which(cli) is None:
        raise ControllerError(f"{cli} not found on PATH: queue settings on BMv2 need BMv2's Thrift CLI")
    script = "\n".join(cmd for s in settings for cmd in s.commands()) + "\n"
    proc = subprocess.run(
        [cli, "--thrift-port", str(thrift_port)], input=script, capture_output=True, text=True, timeout=timeout
    )
    if proc.returncode != 0 or "Error" in proc.stdout:
        raise ControllerError(
            f"{cli} --thrift-port {thrift_port} failed ({proc.returncode}): "
            f"{(proc.stderr or proc.stdout).strip()[-500:]}"
        )
    return proc.stdout
