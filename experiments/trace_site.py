"""What a trace run measures on the booted fabric (:class:`TraceSite`) and from ``/proc``:
switch and host counters, queue drops per queue, ``nstat`` TCP retransmissions and timeouts of
every host, CPU time and CPU wait of processes with their descendants, and a run's CPU marks
(:func:`cpu_marks`). :mod:`experiments.trace_sweep` takes a sample before and after each run.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from experiments.runner import PlannedRun
from experiments.trace_configs import TraceScenario

CPU_BOUND = 0.85
NSTAT_KEYS = ("TcpRetransSegs", "TcpExtTCPTimeouts")


def _cpu_ticks(pid: int) -> int:
    """CPU ticks (user + system) of `pid` and all its descendants."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(entry))
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except (OSError, IndexError, ValueError):
            pass
        todo += children.get(p, [])
    return total


def _nstat(node: Any) -> dict[str, int]:
    out = node.cmd("nstat -az " + " ".join(NSTAT_KEYS))
    figures = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] in NSTAT_KEYS and parts[1].isdigit():
            figures[parts[0]] = int(parts[1])
    return figures


class TraceSite:
    """A booted fabric seen by the trace experiment (hosts, switches, counters)."""

    def __init__(self, fabric: Any) -> None:
        from experiments.sites import FabricSite

        self.fabric = fabric
        self.base = FabricSite(fabric)

    def hosts(self) -> list[str]:
        return [h.name[len(self.fabric.options.prefix):] for h in self.fabric.spec.hosts]

    def snapshot(self) -> dict[str, Any]:
        """Counters now, and CPU ticks and thread waits of every switch process (with its descendants)."""
        from mininet_topos.builder import host_link_drops

        switches = {sw.name: sw.process.pid for sw in self.fabric.net.switches if getattr(sw, "process", None)}
        counters = self.base.counters()
        return {"t": time.monotonic(), "counters": counters, "host_drops": host_link_drops(self.fabric),
                "nstat": {h: _nstat(self.fabric.node(h)) for h in self.hosts()},
                **process_sample({name: pid for name, pid in switches.items() if pid})}

    def figures(self, before: dict[str, Any], after: dict[str, Any], job_ids: list[int]) -> dict[str, Any]:
        switch_cpu, switch_wait = process_figures(before, after)
        queue_drops = 0
        for name, now in after["counters"].items():
            old = before["counters"].get(name)
            if now.queue_drops is not None:
                prev = (old.queue_drops or {}) if old is not None else {}
                queue_drops += sum(n - prev.get(k, 0) for k, n in now.queue_drops.items())
        nstat = {key: sum(after["nstat"][h].get(key, 0) - before["nstat"][h].get(key, 0) for h in after["nstat"])
                 for key in NSTAT_KEYS}
        return {**self.base.switch_figures(before["counters"], after["counters"], job_ids),
                "queue_drops": queue_drops, "queue_drops_by_queue": queue_drops_by_queue(before, after),
                "host_qdisc_drops": sum(after["host_drops"].values()) - sum(before["host_drops"].values()),
                "tcp_retransmitted": nstat["TcpRetransSegs"], "tcp_timeouts": nstat["TcpExtTCPTimeouts"],
                "switch_cpu": switch_cpu, "switch_cpu_wait": switch_wait,
                "switch_wait_per_slice_ns": wait_slices(before, after)}

    def switch_state(self, sc: TraceScenario, run: PlannedRun) -> dict[str, Any]:
        """This run's flow-hash seeds and lossy links on the switches (:mod:`experiments.trace_links`)."""
        from experiments import trace_links
        from gradfabric import fabric as fabric_file

        description, prefix = self.fabric.description_path, self.fabric.options.prefix
        spec = fabric_file.load(description)
        seeds = trace_links.draw_hash_seeds([sw.name[len(prefix):] for sw in spec.switches], sc.name, run.seed)
        named = [(prefix + a, prefix + b) for a, b in sc.lossy_links]
        lossy = trace_links.lossy_ports(spec.links, named) if named else {}
        trace_links.set_run_state(description, {prefix + n: s for n, s in seeds.items()}, lossy, sc.link_loss)
        return {"hash_seeds": seeds, "lossy_ports": lossy}

    def link_drops(self, lossy: dict[str, list[int]]) -> dict[str, dict[int, int]]:
        from experiments import trace_links

        return trace_links.link_drops(self.fabric.description_path, lossy)

    def default_congestion(self, host: str) -> str:
        """The TCP congestion control `host`'s new sockets get (its namespace's sysctl)."""
        return str(self.fabric.node(host).cmd("sysctl -n net.ipv4.tcp_congestion_control")).strip()

    def set_rto_min(self, hosts: list[str], rto_s: float | None) -> None:
        """``rto_min`` on every route of these hosts (None: the Linux default)."""
        for h in hosts:
            node = self.fabric.node(h)
            for line in node.cmd("ip route show").splitlines():
                route = line.split(" rto_min")[0].strip()
                if route:
                    extra = f" rto_min {rto_s * 1e3:g}ms" if rto_s is not None else ""
                    node.cmd(f"ip route replace {route}{extra}")


def queue_drops_by_queue(before: dict[str, Any], after: dict[str, Any]) -> dict[str, int]:
    """The run's tail drops per queue, ``switch:port:priority`` (which egress ports and classes filled)."""
    out: dict[str, int] = {}
    for name, now in after["counters"].items():
        old = before["counters"].get(name)
        prev = (old.queue_drops or {}) if old is not None else {}
        for key, n in (now.queue_drops or {}).items():
            if n > prev.get(key, 0):
                queue = f"{name}:{key[0]}:{key[1]}"
                out[queue] = out.get(queue, 0) + n - prev.get(key, 0)
    return dict(sorted(out.items()))


def process_sample(pids: dict[str, int]) -> dict[str, Any]:
    """CPU ticks and per-thread schedstat of named processes, each with its descendants."""
    from experiments.training.cpu import tree_thread_stats

    return {"t": time.monotonic(), "cpu_ticks": {name: _cpu_ticks(pid) for name, pid in pids.items()},
            "threads": {name: tree_thread_stats([pid]) for name, pid in pids.items()}}


def process_figures(before: dict[str, Any], after: dict[str, Any]) -> tuple[dict[str, float], dict[str, float | None]]:
    """CPU use (share of one core) and CPU wait share of each process between two :func:`process_sample`."""
    seconds = max(1e-9, after["t"] - before["t"])
    hz = os.sysconf("SC_CLK_TCK")
    cpu = {n: round((after["cpu_ticks"][n] - before["cpu_ticks"].get(n, 0)) / hz / seconds, 3)
           for n in after["cpu_ticks"]}
    return cpu, _waits(before["threads"], after["threads"], seconds)


def wait_slices(before: dict[str, Any], after: dict[str, Any]) -> dict[str, float | None]:
    """Mean wait per timeslice (ns, :func:`experiments.training.cpu.wait_per_slice`) of each
    process's busiest thread between two :func:`process_sample`."""
    from experiments.training.cpu import wait_per_slice

    out = {}
    for name, threads in after["threads"].items():
        ns = wait_per_slice(before["threads"].get(name, {}), threads)
        out[name] = round(ns) if ns is not None else None
    return out


def _waits(before: dict[str, Any], after: dict[str, Any], seconds: float) -> dict[str, float | None]:
    from experiments.training.cpu import wait_share

    out = {}
    for name, threads in after.items():
        share = wait_share(before.get(name, {}), threads, seconds)
        out[name] = round(share, 3) if share is not None else None
    return out


def cpu_marks(jobs: dict[str, Any], figures: dict[str, Any], starved_share: float) -> dict[str, Any]:
    """A run's per-process CPU figures and marks (module doc): the largest CPU use (share of
    one core) and wait share over the measured ranks (their own reports), the switches and the
    bulk ranks (``/proc``), ``cpu_bound`` above 0.85 and ``cpu_starved`` above `starved_share`;
    ``max_starvation`` is the earlier summed figure of the measured ranks."""
    ranks = [r for j in jobs.values() for r in j["ranks"].values()]
    cpu = [r["cpu_share"] for r in ranks if r.get("cpu_share") is not None]
    cpu += [x for key in ("switch_cpu", "other_cpu") for x in figures.get(key, {}).values() if x is not None]
    wait = [r["cpu_wait_share"] for r in ranks if r.get("cpu_wait_share") is not None]
    wait += [x for key in ("switch_cpu_wait", "other_cpu_wait") for x in figures.get(key, {}).values() if x is not None]
    summed = [r["starvation"] for r in ranks if r.get("starvation") is not None]
    return {"max_cpu_share": max(cpu) if cpu else None, "cpu_bound": bool(cpu) and max(cpu) > CPU_BOUND,
            "max_cpu_wait_share": max(wait) if wait else None,
            "cpu_starved": bool(wait) and max(wait) > starved_share,
            "max_starvation": max(summed) if summed else None}
