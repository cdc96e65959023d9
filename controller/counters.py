"""Counter snapshots of the DLCP program, gathered per switch, rendered as tables or JSON.

Drop reasons take the program's own names: index ``N`` of ``ingress_drops`` is the
``const bit<32> DROP_<NAME> = N`` of the P4 source, lower-cased (``DROP_EARLY`` is shown as
``magnitude_threshold``, the mechanism it counts). The traffic manager's queue drops come from
the embedded target's control channel; BMv2 keeps no count of them (:data:`BMV2_QUEUE_NOTE`).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.table import Table

from controller.errors import ControllerError, SchemaError
from controller.switch import SwitchSession
from controller.target_control import queue_drops
from gradfabric.paths import P4SRC

PORT_TX = "DlcpEgress.port_tx"
INGRESS_DROPS = "DlcpIngress.ingress_drops"
ECN_MARKS = "DlcpEgress.ecn_marks"
JOB_RX = "DlcpIngress.job_rx"
EARLY_DROPS = "DlcpIngress.early_drops"
ECMP_MEMBER_COUNTER = "DlcpIngress.ecmp_member_counter"
#: Per queue (``egress_port * 8 + priority``), in programs with traffic classes: packets a
#: class's RED step dropped early, and ECN-capable packets marked because they found their
#: queue at the class's threshold. Read when the program has them.
QUEUE_RED_DROPS = "DlcpIngress.queue_red_drops"
QUEUE_ECN_MARKS = "DlcpEgress.queue_ecn_marks"
#: Sprayed DLCP packets per ECMP member (``group_id * SPRAY_MEMBERS + member``): the spraying
#: balance apart from the flow-hashed traffic the member's direct counter also counts.
SPRAYED_MEMBER = "DlcpIngress.sprayed_member"
SPRAY_MEMBERS = 16
SPRAY_GROUPS = 1024
PRIORITIES = 8
#: The shipped program, whose drop reasons name ``ingress_drops`` cells when no source is given.
DEFAULT_SOURCE = P4SRC / "dlcp.p4"
#: Program constants shown under another name: the DLCP mechanism an early drop stands for.
RENAMED = {"early": "magnitude_threshold"}
_DROP_CONST = re.compile(r"^\s*const\s+bit<\d+>\s+DROP_([A-Z0-9_]+)\s*=\s*(\d+)\s*;", re.MULTILINE)
BMV2_QUEUE_NOTE = (
    "queue drops: not counted on BMv2 (simple_switch 1.15 tail-drops at a full queue without a "
    "counter; its debug log names each dropped packet). What it reports is the program's counters: "
    "drops in ingress by reason, early drops and ECN marks per job and per queue (a mark: the packet "
    "found its queue at the threshold), packets sent per port and priority")


@functools.lru_cache(maxsize=8)
def drop_reason_names(source: Path | None = None) -> dict[int, str]:
    """``ingress_drops`` index -> reason, from the ``DROP_*`` constants of the P4 source
    (``DROP_REASONS``, the counter's size, is not a reason)."""
    path = source or DEFAULT_SOURCE
    try:
        text = path.read_text()
    except OSError as exc:
        raise ControllerError(f"cannot read the program {path} for its drop reasons: {exc.strerror}") from exc
    names = {}
    for name, value in _DROP_CONST.findall(text):
        if name != "REASONS":
            names[int(value)] = RENAMED.get(name.lower(), name.lower())
    return names


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
    early_drops: dict[int, tuple[int, int]] = field(default_factory=dict)
    #: Per (port, priority): the program's RED drops and ECN marks of traffic classes.
    queue_red: dict[tuple[int, int], tuple[int, int]] = field(default_factory=dict)
    queue_marks: dict[tuple[int, int], tuple[int, int]] = field(default_factory=dict)
    #: Per (group, member): sprayed DLCP packets only.
    sprayed: dict[tuple[int, int], tuple[int, int]] = field(default_factory=dict)

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
            sub(self.early_drops, before.early_drops),
            sub(self.queue_red, before.queue_red),
            sub(self.queue_marks, before.queue_marks),
            sub(self.sprayed, before.sprayed),
        )

    def went_backwards(self) -> bool:
        """True for a difference with a negative count: the switch was restarted (or its
        counters written) in between, so the difference means nothing."""
        pairs = [*self.port_prio.values(), *self.drops.values(), *self.ecn_marks.values(),
                 *self.job_rx.values(), *self.ecmp.values(), *self.early_drops.values(),
                 *self.queue_red.values(), *self.queue_marks.values(), *self.sprayed.values()]
        return any(p < 0 or b < 0 for p, b in pairs) or any(n < 0 for n in (self.queue_drops or {}).values())


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
    *, with_queue_drops: bool = True, reasons: dict[int, str] | None = None,
) -> SwitchCounters:
    """Read the counters of one switch: only the cells of ``ports`` and ``jobs`` when given
    (reading every cell of ``port_tx`` costs a switch thousands of entities). ``reasons``
    names the cells of ``ingress_drops`` (default: the shipped program's, see
    :func:`drop_reason_names`); a named reason is shown even at zero."""
    if reasons is None:
        reasons = drop_reason_names()
    out = SwitchCounters()
    if with_queue_drops:
        out.queue_drops = queue_drops(session.address)
    cells = None if ports is None else [p * PRIORITIES + q for p in ports for q in range(PRIORITIES)]
    for c in session.read_counter(PORT_TX, cells, skip_zero=True):
        if c.packets or c.bytes:
            out.port_prio[(c.index // PRIORITIES, c.index % PRIORITIES)] = (c.packets, c.bytes)
    for name, per_queue in ((QUEUE_RED_DROPS, out.queue_red), (QUEUE_ECN_MARKS, out.queue_marks)):
        if not _has_counter(session, name):
            continue
        for c in session.read_counter(name, cells, skip_zero=True):
            if c.packets or c.bytes:
                per_queue[(c.index // PRIORITIES, c.index % PRIORITIES)] = (c.packets, c.bytes)
    for c in session.read_counter(INGRESS_DROPS):
        assert c.index is not None
        if c.packets or c.bytes or c.index in reasons:
            out.drops[reasons.get(c.index, f"ingress_drops[{c.index}]")] = (c.packets, c.bytes)
    job_cells = None if jobs is None else list(jobs)
    for name, target in ((ECN_MARKS, out.ecn_marks), (JOB_RX, out.job_rx), (EARLY_DROPS, out.early_drops)):
        for c in session.read_counter(name, job_cells, skip_zero=True):
            if c.packets or c.bytes:
                assert c.index is not None
                target[c.index] = (c.packets, c.bytes)
    for d in session.read_direct_counters(ECMP_MEMBER_COUNTER):
        assert d.entry is not None
        match = {name: m.value for name, m in d.entry.match}  # type: ignore[union-attr]
        out.ecmp[(match.get("meta.ecmp_group_id", 0), match.get("meta.ecmp_member", 0))] = (d.packets, d.bytes)
    spray_cells = [g * SPRAY_MEMBERS + m for g, m in out.ecmp if g < SPRAY_GROUPS and m < SPRAY_MEMBERS]
    if spray_cells and _has_counter(session, SPRAYED_MEMBER):
        for c in session.read_counter(SPRAYED_MEMBER, spray_cells, skip_zero=True):
            if c.packets or c.bytes:
                assert c.index is not None
                out.sprayed[divmod(c.index, SPRAY_MEMBERS)] = (c.packets, c.bytes)
    return out


def _has_counter(session: SwitchSession, name: str) -> bool:
    try:
        session.schema.counters[name]
    except SchemaError:
        return False
    return True


# -- JSON ------------------------------------------------------------------------------------
def to_json(c: SwitchCounters) -> dict[str, Any]:
    """One switch's counters as plain JSON: lists of records, each naming what it counts."""
    jobs = sorted(set(c.job_rx) | set(c.ecn_marks) | set(c.early_drops))
    return {
        "ports": [{"port": port, "priority": prio, "packets": p, "bytes": b}
                  for (port, prio), (p, b) in sorted(c.port_prio.items())],
        "drops": [{"reason": reason, "packets": p, "bytes": b} for reason, (p, b) in c.drops.items()],
        "queue_drops": None if c.queue_drops is None else [
            {"port": port, "priority": prio, "reason": reason, "packets": n}
            for (port, prio, reason), n in sorted(c.queue_drops.items())],
        "ecmp": [{"group": g, "member": m, "packets": p, "bytes": b,
                  "sprayed_packets": c.sprayed.get((g, m), (0, 0))[0], "sprayed_bytes": c.sprayed.get((g, m), (0, 0))[1]}
                 for (g, m), (p, b) in sorted(c.ecmp.items())],
        "queues": [{"port": port, "priority": prio,
                    "ecn_marked_packets": c.queue_marks.get((port, prio), (0, 0))[0],
                    "ecn_marked_bytes": c.queue_marks.get((port, prio), (0, 0))[1],
                    "red_dropped_packets": c.queue_red.get((port, prio), (0, 0))[0],
                    "red_dropped_bytes": c.queue_red.get((port, prio), (0, 0))[1]}
                   for port, prio in sorted(set(c.queue_marks) | set(c.queue_red))],
        "jobs": [{"job": job,
                  "received_packets": c.job_rx.get(job, (0, 0))[0], "received_bytes": c.job_rx.get(job, (0, 0))[1],
                  "ecn_marked_packets": c.ecn_marks.get(job, (0, 0))[0],
                  "ecn_marked_bytes": c.ecn_marks.get(job, (0, 0))[1],
                  "early_dropped_packets": c.early_drops.get(job, (0, 0))[0],
                  "early_dropped_bytes": c.early_drops.get(job, (0, 0))[1]} for job in jobs],
    }


def from_json(data: dict[str, Any], where: str = "snapshot") -> SwitchCounters:
    """The inverse of :func:`to_json`; a malformed record is a :class:`ControllerError` naming it."""
    try:
        out = SwitchCounters(
            port_prio={(r["port"], r["priority"]): (r["packets"], r["bytes"]) for r in data["ports"]},
            drops={r["reason"]: (r["packets"], r["bytes"]) for r in data["drops"]},
            ecmp={(r["group"], r["member"]): (r["packets"], r["bytes"]) for r in data["ecmp"]},
        )
        out.sprayed = {(r["group"], r["member"]): (r["sprayed_packets"], r["sprayed_bytes"])
                       for r in data["ecmp"] if r.get("sprayed_packets") or r.get("sprayed_bytes")}
        if data["queue_drops"] is not None:
            out.queue_drops = {(r["port"], r["priority"], r["reason"]): r["packets"] for r in data["queue_drops"]}
        for r in data["jobs"]:
            for key, target in (("received", out.job_rx), ("ecn_marked", out.ecn_marks),
                                ("early_dropped", out.early_drops)):
                if r[f"{key}_packets"] or r[f"{key}_bytes"]:
                    target[r["job"]] = (r[f"{key}_packets"], r[f"{key}_bytes"])
        for r in data.get("queues", []):
            for key, target in (("ecn_marked", out.queue_marks), ("red_dropped", out.queue_red)):
                if r[f"{key}_packets"] or r[f"{key}_bytes"]:
                    target[(r["port"], r["priority"])] = (r[f"{key}_packets"], r[f"{key}_bytes"])
    except (KeyError, TypeError) as exc:
        raise ControllerError(f"{where}: not a counters snapshot of `gradfabric counters --json` "
                              f"(missing or malformed {exc})") from None
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
    for col in ("switch", "group", "member", f"packets{unit}", "share", f"sprayed DLCP packets{unit}", "sprayed share"):
        ecmp.add_column(col)
    jobs = Table(title=f"per job{title_suffix}")
    for col in ("switch", "job", f"received packets{unit}", f"ECN-marked packets{unit}", f"early-dropped packets{unit}"):
        jobs.add_column(col)
    queues = Table(title=f"queue drops per port and priority (traffic manager){title_suffix}")
    for col in ("switch", "port", "priority", "reason", f"packets{unit}"):
        queues.add_column(col, justify="left" if col in ("switch", "reason") else "right")
    classes = Table(title=f"per queue, traffic classes: ECN marks and RED drops (program counters){title_suffix}")
    for col in ("switch", "port", "priority", f"ECN-marked packets{unit}", f"RED-dropped packets{unit}"):
        classes.add_column(col, justify="left" if col == "switch" else "right")
    for name, c in counters.items():
        for port, prio in sorted(set(c.queue_marks) | set(c.queue_red)):
            classes.add_row(name, str(port), str(prio), amount(c.queue_marks.get((port, prio), (0, 0))[0]),
                            amount(c.queue_red.get((port, prio), (0, 0))[0]))
        for (port, prio), (p, b) in sorted(c.port_prio.items()):
            ports.add_row(name, str(port), str(prio), amount(p), amount(b))
        for reason, (p, b) in c.drops.items():
            drops.add_row(name, reason, amount(p), amount(b))
        totals: dict[int, int] = {}
        sprayed: dict[int, int] = {}
        for (group, member), (p, _) in c.ecmp.items():
            totals[group] = totals.get(group, 0) + p
            sprayed[group] = sprayed.get(group, 0) + c.sprayed.get((group, member), (0, 0))[0]
        for (group, member), (p, _) in sorted(c.ecmp.items()):
            share = f"{100 * p / totals[group]:.1f}%" if totals[group] else "-"
            own = c.sprayed.get((group, member), (0, 0))[0]
            own_share = f"{100 * own / sprayed[group]:.1f}%" if sprayed[group] else "-"
            ecmp.add_row(name, str(group), str(member), amount(p), share, amount(own), own_share)
        for job in sorted(set(c.job_rx) | set(c.ecn_marks) | set(c.early_drops)):
            jobs.add_row(name, str(job), *(amount(d.get(job, (0, 0))[0]) for d in (c.job_rx, c.ecn_marks, c.early_drops)))
        for (port, prio, reason), n in sorted((c.queue_drops or {}).items()):
            queues.add_row(name, str(port), str(prio), reason, amount(n))
    return [t for t in (ports, queues, classes, drops, ecmp, jobs) if t.row_count]
