"""What a running fabric made, recorded as it is made, so that it can always be removed.

The launcher writes ``build/fabric-state.json`` before it creates anything and updates it
as processes start. :func:`stop_fabric` (``gradfabric stop``, ``make stop``) reads it and
removes exactly those processes and interfaces, also when the launcher crashed or was
killed. Nothing else on the machine is touched: processes are matched by pid *and* start
time, interfaces by the names the fabric gave them.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from mininet_topos.switches import process_start_time

STATE_FILE = "fabric-state.json"


@dataclass
class TrackedProcess:
    pid: int
    start_time: int
    what: str
    #: Signal the whole process group (a node shell and what runs under it).
    group: bool = True
    #: A host's network namespace (inode) and its interface: every process still in that
    #: namespace (told apart from a later namespace by the interface) is stopped too.
    netns: int | None = None
    netns_iface: str | None = None
    #: The polite signal first (node shells exit on SIGHUP, switches on SIGTERM), then SIGKILL.
    stop_signal: str = "SIGTERM"

    def alive(self) -> bool:
        return process_start_time(self.pid) == self.start_time


@dataclass
class FabricState:
    """Processes and root-namespace interfaces of one fabric."""

    path: Path
    processes: list[TrackedProcess] = field(default_factory=list)
    interfaces: list[str] = field(default_factory=list)

    @classmethod
    def load(cls, path: Path) -> FabricState | None:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        return cls(
            path=path,
            processes=[TrackedProcess(**p) for p in data.get("processes", [])],
            interfaces=[str(i) for i in data.get("interfaces", [])],
        )

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = {
            "processes": [asdict(p) for p in self.processes],
            "interfaces": self.interfaces,
        }
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1))
        tmp.replace(self.path)

    def track(self, pid: int | None, what: str, group: bool = True, netns_iface: str | None = None,
              stop_signal: str = "SIGTERM") -> None:
        """Record a process (if it is running) and save at once.

        ``netns_iface``: the process heads a network namespace of its own (a host) that
        holds this interface, so whatever else runs in that namespace is stopped with it.
        """
        if pid is None:
            return
        start = process_start_time(pid)
        if start is None:
            return
        ns = netns_inode(pid) if netns_iface else None
        if ns == netns_inode(os.getpid()):
            ns = None  # never the root namespace
        self.processes.append(TrackedProcess(pid, start, what, group, ns, netns_iface if ns else None,
                                             stop_signal))
        self.save()


def netns_inode(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:
        return None


def pids_in_netns(inode: int, iface: str) -> list[int]:
    """Every process whose network namespace is ``inode`` and holds interface ``iface``."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or netns_inode(int(entry.name)) != inode:
            continue
        try:
            devices = (entry / "net" / "dev").read_text()
        except OSError:
            continue
        if any(line.strip().startswith(f"{iface}:") for line in devices.splitlines()):
            pids.append(int(entry.name))
    return pids


def interface_exists(name: str) -> bool:
    return Path(f"/sys/class/net/{name}").exists()


def stop_process(proc: TrackedProcess, timeout: float = 5.0) -> bool:
    """Its stop signal, then SIGKILL after ``timeout``; True if it was running."""
    if not proc.alive():
        return False
    for sig in (signal.Signals[proc.stop_signal], signal.SIGKILL):
        try:
            if proc.group:
                os.killpg(proc.pid, sig)
            else:
                os.kill(proc.pid, sig)
        except ProcessLookupError:
            return True
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if not proc.alive():
                return True
            time.sleep(0.05)
    return True


def remove(state: FabricState) -> list[str]:
    """Stop every tracked process and delete every tracked interface; returns what it did."""
    done: list[str] = []
    # The launcher first (so it does not react to its switches going away), then the rest.
    for proc in state.processes:
        if proc.pid != os.getpid() and stop_process(proc):
            done.append(f"stopped {proc.what} (pid {proc.pid})")
        if proc.netns is not None and proc.netns_iface:
            stray = pids_in_netns(proc.netns, proc.netns_iface)
            for pid in stray:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            if stray:
                done.append(f"stopped {len(stray)} process(es) left in the namespace of {proc.what}")
    for name in state.interfaces:
        if interface_exists(name):
            subprocess.run(["ip", "link", "del", name], capture_output=True, check=False)
            done.append(f"deleted interface {name}")
    state.path.unlink(missing_ok=True)
    return done


def stop_fabric(build_dir: Path) -> list[str] | None:
    """Remove the fabric recorded under ``build_dir``; None if there is no record."""
    state = FabricState.load(build_dir / STATE_FILE)
    if state is None:
        return None
    return remove(state)
