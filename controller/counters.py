"""Counter snapshots of the DLCP program, gathered per switch and rendered as tables."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from rich.table import Table

from controller.switch import SwitchSession
from controller.target_control import queue_drops

PORT_TX = "DlcpEgress.port_tx"
INGRESS_DROPS = "DlcpIngress.ingress_drops"
ECN_MARKS = "DlcpEgress.ecn_marks"
JOB_RX = "DlcpIngress.job_rx"
ECMP_MEMBER_COUNTER = "DlcpIngress.ecmp_member_counter"
DROP_REASONS = {
    (INGRESS_DROPS, 1): "no_route",
    (INGRESS_DROPS, 2): "ttl_expired",
    (INGRESS_DROPS, 3): "parser_error",
    (INGRESS_DROPS, 6): "magnitude_threshold",  # early drop of an eligible class (before the queue)
}
PRIORITIES = 8


@dataclass
class SwitchCounters:
    """Non-zero counters of one switch: (packets, bytes) by what they count."""

    port_prio: dict[tuple[int, int], tuple[int, int]] = field(default_factory=dict)
    drops: dict[str, tuple[int, int]] = field(default_factory=dict)
    ecn_marks: dict[int, tuple[int, int]] = field(default_factory=dict)
    job_rx: dict[int, tuple[int, int]] = field(default_factory=dict)
    ecmp: dict[tuple[int, int], tuple[int, int]] = field(default_factory=dict)
    #: Packets the traffic manager dropped, by (port, priority, reason); None when the target
    #: does not expose them (BMv2 counts no queue drops).
    queue_drops: dict[tuple[int, int, str], int] | None = None

    def minus(self, before: SwitchCounters) -> SwitchCounters:
        def sub(now: dict, old: dict) -> dict:
            out = {}
            for k, (p, b) in now.items():
                op, ob = old.get(k, (0, 0))
                if p - op or b - ob:
                    out[k] = (p - op, b - ob)
            return out

        queue_drops = None
        if self.queue_drops is not None:
            old = before.queue_drops or {}
            queue_drops = {k: n - old.get(k, 0) for k, n in self.queue_drops.items() if n - old.get(k, 0)}
        return SwitchCounters(
            sub(self.port_prio, before.port_prio),
            sub(self.drops, before.drops),
            sub(self.ecn_marks, before.ecn_marks),
            sub(self.job_rx, before.job_rx),
            sub(self.ecmp, before.ecmp),
            queue_drops,
        )


def policy_jobs(session: SwitchSession) -> list[int]:
    """Job ids that the switch's policy tables name."""
    from controller.policy import POLICY_TABLES

    jobs = set()
    for entry in session.read_entries(sorted(POLICY_TABLES)):
        for name, m in entry.match:
            if name == "hdr.dlcp.job_id":
                jobs.add(m.value)  # type: ignore[union-attr]
    return sorted(jobs)


def gather(
    session: SwitchSession, ports: Iterable[int] | None = None, jobs: Iterable[int] | None = None,
    *, with_queue_drops: bool = True,
) -> SwitchCounters:
    """Read the counters of one switch: only the cells of ``ports`` and ``jobs`` when given
    (reading every cell of ``port_tx`` costs a switch thousands of entities)."""
    out = SwitchCounters()
    if with_queue_drops:
        out.queue_drops = queue_drops(session.address)
    cells = None if ports is None else [p * PRIORITIES + q for p in ports for q in range(PRIORITIES)]
    for c in session.read_counter(PORT_TX, cells):
        if c.packets or c.bytes:
            out.port_prio[(c.index // PRIORITIES, c.index % PRIORITIES)] = (c.packets, c.bytes)
    for name in (INGRESS_DROPS,):
        for c in session.read_counter(name):
            reason = DROP_REASONS.get((name, c.index), f"{name.split('.')[-1]}[{c.index}]")
            if c.packets or c.bytes or (name, c.index) in DROP_REASONS:
                out.drops[reason] = (c.packets, c.bytes)
    job_cells = None if jobs is None else list(jobs)
    for name, target in ((ECN_MARKS, out.ecn_marks), (JOB_RX, out.job_rx)):
        for c in session.read_counter(name, job_cells):
            if c.packets or c.bytes:
                target[c.index] = (c.packets, c.bytes)
    for d in session.read_direct_counters(ECMP_MEMBER_COUNTER):
        assert d.entry is not None
        match = {name: m.value for name, m in d.entry.match}  # type: ignore[union-attr]
        out.ecmp[(match.get("meta.ecmp_group_id", 0), match.get("meta.ecmp_member", 0))] = (d.packets, d.bytes)
    return out


def render(counters: dict[str, SwitchCounters], title_suffix: str = "",
           per_second: float | None = None) -> list[Table]:
    """Readable tables: per port and priority, drops by reason, spraying balance, per job.

    With ``per_second`` (the seconds the counts cover), packets and bytes are shown as rates.
    Tables without a row are left out.
    """
    unit = "/s" if per_second else ""

    def amount(value: int) -> str:
        return f"{value / per_second:,.1f}" if per_second else f"{value:,}"

    ports = Table(title=f"transmitted per port and priority{title_suffix}")
    for col in ("switch", "port", "priority", f"packets{unit}", f"bytes{unit}"):
        ports.add_column(col, justify="left" if col == "switch" else "right")
    drops = Table(title=f"drops by reason{title_suffix}")
    for col in ("switch", "reason", f"packets{unit}", f"bytes{unit}"):
        drops.add_column(col)
    ecmp = Table(title=f"spraying balance per ECMP group{title_suffix}")
    for col in ("switch", "group", "member", f"packets{unit}", "share"):
        ecmp.add_column(col)
    jobs = Table(title=f"per job{title_suffix}")
    for col in ("switch", "job", f"received packets{unit}", f"ECN-marked packets{unit}"):
        jobs.add_column(col)
    queues = Table(title=f"queue drops per port and priority (traffic manager){title_suffix}")
    for col in ("switch", "port", "priority", "reason", f"packets{unit}"):
        queues.add_column(col, justify="left" if col in ("switch", "reason") else "right")
    for name, c in counters.items():
        for (port, prio), (p, b) in sorted(c.port_prio.items()):
            ports.add_row(name, str(port), str(prio), amount(p), amount(b))
        for reason, (p, b) in c.drops.items():
            drops.add_row(name, reason, amount(p), amount(b))
        totals: dict[int, int] = {}
        for (group, _), (p, _) in c.ecmp.items():
            totals[group] = totals.get(group, 0) + p
        for (group, member), (p, _) in sorted(c.ecmp.items()):
            share = f"{100 * p / totals[group]:.1f}%" if totals[group] else "-"
            ecmp.add_row(name, str(group), str(member), amount(p), share)
        for job in sorted(set(c.job_rx) | set(c.ecn_marks)):
            jobs.add_row(name, str(job), amount(c.job_rx.get(job, (0, 0))[0]), amount(c.ecn_marks.get(job, (0, 0))[0]))
        for (port, prio, reason), n in sorted((c.queue_drops or {}).items()):
            queues.add_row(name, str(port), str(prio), reason, amount(n))
    return [t for t in (ports, queues, drops, ecmp, jobs) if t.row_count]
