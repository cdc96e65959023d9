"""Where the experiment's jobs run: the emulated fabric (Mininet hosts, switch policies,
counters, background traffic) or loopback (the runner's own tests: no switch, no traffic)."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any, Protocol

from experiments.background import BackgroundTraffic, Flow
from experiments.configs import Configuration
from experiments.errors import ExperimentError
from experiments.training.processes import Spawner, local_spawner
from hosts.wire import DLCP_PORT


class Site(Protocol):
    dlcp_port: int

    def spawner(self, host: str) -> Spawner: ...

    def ip(self, host: str) -> str: ...

    def rendezvous_port(self, job_id: int) -> int: ...

    def apply(self, config: Configuration, job_ids: Sequence[int], folder: Path) -> None: ...

    def counters(self) -> Any: ...

    def switch_figures(self, before: Any, after: Any, job_ids: Sequence[int]) -> dict[str, int]: ...

    def background(self, flows: Sequence[Flow]) -> AbstractContextManager[BackgroundTraffic | None]: ...


class LoopbackSite:
    """Every role on this machine at 127.0.0.1; policies, counters and traffic are no-ops."""

    dlcp_port = 0

    def spawner(self, host: str) -> Spawner:
        return local_spawner

    def ip(self, host: str) -> str:
        return "127.0.0.1"

    def rendezvous_port(self, job_id: int) -> int:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return int(s.getsockname()[1])

    def apply(self, config: Configuration, job_ids: Sequence[int], folder: Path) -> None:
        config.write_policy(folder, job_ids)

    def counters(self) -> Any:
        return None

    def switch_figures(self, before: Any, after: Any, job_ids: Sequence[int]) -> dict[str, int]:
        return {}

    def background(self, flows: Sequence[Flow]) -> AbstractContextManager[BackgroundTraffic | None]:
        return nullcontext(None)


class FabricSite:
    """The Mininet hosts of a booted fabric (``mininet_topos.launcher.Fabric``)."""

    dlcp_port = DLCP_PORT

    def __init__(self, fabric: Any) -> None:
        self.fabric = fabric

    def popen(self, host: str, argv: list[str]) -> subprocess.Popen:
        return self.fabric.node(host).popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                            stdin=subprocess.DEVNULL, text=True)

    def ip(self, host: str) -> str:
        return str(self.fabric.node(host).IP())

    def spawner(self, host: str) -> Spawner:
        node = self.fabric.node(host)
        return lambda argv, stderr: node.popen(argv, stdout=subprocess.PIPE, stderr=stderr, stdin=subprocess.PIPE)

    def rendezvous_port(self, job_id: int) -> int:
        return 29500 + job_id

    def apply(self, config: Configuration, job_ids: Sequence[int], folder: Path) -> None:
        from controller.cli import run
        from gradfabric.errors import GradfabricError

        policy = config.write_policy(folder, job_ids)
        try:
            code = run(["policy", "apply", str(policy), "--fabric", str(self.fabric.description_path),
                        "--timeout", "20"])
        except GradfabricError as exc:
            raise ExperimentError(f"`gradfabric policy apply {policy}` failed: {exc}") from exc
        if code != 0:
            raise ExperimentError(f"`gradfabric policy apply {policy}` failed (exit {code}); its message is above")

    def counters(self) -> Any:
        from experiments import switch_counters

        return switch_counters.snapshot(self.fabric.description_path)

    def switch_figures(self, before: Any, after: Any, job_ids: Sequence[int]) -> dict[str, int]:
        from experiments import switch_counters

        marks = 0
        figures = switch_counters.SwitchFigures(0, 0)
        for job_id in job_ids:
            figures = switch_counters.difference(before, after, job_id)
            marks += figures.ecn_marks  # the rest is not per job: the same for every job id
        return {"magnitude_drops": figures.magnitude_drops, "ecn_marks": marks,
                "queue_red_drops": figures.queue_red_drops, "queue_ecn_marks": figures.queue_ecn_marks,
                "sprayed_packets": figures.sprayed_packets, "sprayed_members": figures.sprayed_members,
                **{f"tx_packets_priority_{p}": n for p, n in figures.tx_by_priority.items()}}

    def background(self, flows: Sequence[Flow]) -> AbstractContextManager[BackgroundTraffic | None]:
        if not flows:
            return nullcontext(None)
        return BackgroundTraffic(self, flows)
