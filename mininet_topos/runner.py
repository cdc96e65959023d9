"""`gradfabric run`: boot, program, banner, then the Mininet CLI or a scenario; `gradfabric stop`."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from mininet_topos import cleanup
from mininet_topos.banner import boot_banner
from mininet_topos.builder import unemulated
from mininet_topos.console import FabricCLI
from mininet_topos.launcher import Fabric, LaunchOptions
from mininet_topos.programming import program_fabric


class Terminated(SystemExit):
    """SIGTERM or SIGHUP reached the launcher: leave through the normal teardown."""


@contextmanager
def teardown_on_signals() -> Iterator[None]:
    """Turn SIGTERM/SIGHUP into an exception while the fabric runs, so it is torn down."""

    def handler(signum: int, _frame: object) -> None:
        raise Terminated(128 + signum)

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def run(options: LaunchOptions, *, interactive: bool, scenario: Path | None = None) -> int:
    """Boot the fabric, program it, then hand over; everything is removed on the way out."""
    with teardown_on_signals(), Fabric(options) as fabric:
        if fabric.p4:
            options.progress("programming the switches (pipeline, routes, policy)")
            program_fabric(fabric.description_path, options.policy)
        assert fabric.description is not None
        warnings = [f"kernel has no netem, link not emulated: {w}" for w in unemulated(fabric.spec)]
        warnings += fabric.notes
        print(boot_banner(fabric.description.to_dict(), options.workdir, pcap=options.pcap,
                          description_path=fabric.description_path,
                          policy=options.policy if fabric.p4 else None, warnings=warnings,
                          interactive=interactive),
              flush=True)
        assert fabric.net is not None
        if interactive:
            FabricCLI(fabric.net, options.workdir)
            return 0
        if scenario is not None:
            run_scenario(fabric, scenario)
            return 0
        loss = fabric.net.pingAll(timeout=2)
        print(f"pingall: {loss:g}% loss", flush=True)
        return 0 if loss == 0 else 1


def run_scenario(fabric: Fabric, scenario: Path) -> None:
    """Run a file of Mininet CLI commands; the CLI's input is an idle pipe, not the terminal."""
    read_fd, write_fd = os.pipe()
    with os.fdopen(read_fd) as idle, os.fdopen(write_fd, "w"):
        FabricCLI(fabric.net, fabric.options.workdir, stdin=idle, script=str(scenario))


def stop(workdir: Path) -> list[str] | None:
    """Remove the fabric recorded under ``workdir``; None when none is recorded."""
    return cleanup.stop_fabric(workdir / "build")
