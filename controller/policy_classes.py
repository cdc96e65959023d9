"""Traffic classes, per-queue RED/ECN steps and the commodity view of a policy.

- ``traffic_classes``: any IPv4 traffic that the DLCP tables do not handle (all traffic in the
  commodity profile) goes to a queue priority by DSCP and, optionally, protocol, addresses and
  ports (``DlcpIngress.traffic_class``), so gloo/TCP can run in a priority class;
- ``queues``: per queue priority, the step a commodity WRED/ECN profile makes: Not-ECT packets
  are dropped early (``DlcpIngress.queue_red``) and ECN-capable ones marked CE
  (``DlcpEgress.queue_ecn``) once the queue holds ``queue_threshold`` packets;
- the **commodity view** (:func:`commodity_plan`): what a switch with DSCP queues and WRED/ECN
  can do with a policy: each job's layer rules become DSCP classes (the hosts mark the rule's
  ``dscp``), each queue a job uses gets one threshold (the smallest of its drop classes' and
  its ECN threshold). It is what the commodity profile installs and what ``policy render``
  writes for SONiC and Linux.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from controller.policy_check import Validator

PROFILES = ("dlcp", "commodity")
PROTOCOLS = {"tcp": 6, "udp": 17}
MAX_QUEUE_THRESHOLD = (1 << 19) - 1
ALL_MAGNITUDES = (0, 255)


@dataclass(frozen=True)
class TrafficClass:
    """Packets matching every given field go to queue ``priority`` (None: any value)."""

    priority: int
    name: str = ""
    dscp: int | None = None
    protocol: int | None = None
    src: tuple[int, int] | None = None   # (address, prefix length)
    dst: tuple[int, int] | None = None
    src_port: int | None = None
    dst_port: int | None = None
    path: str = ""                       # where the policy defines it (for messages)

    @property
    def dscp_only(self) -> bool:
        """True when DSCP is the only field: what a DSCP-to-queue map can express."""
        return self.dscp is not None and all(
            v is None for v in (self.protocol, self.src, self.dst, self.src_port, self.dst_port))


@dataclass(frozen=True)
class QueueStep:
    """At ``queue_threshold`` packets in queue ``priority``: drop Not-ECT, mark ECN-capable."""

    priority: int
    queue_threshold: int
    drop: bool = True
    ecn: bool = True


@dataclass(frozen=True)
class CommodityPlan:
    """What a DSCP/WRED-ECN switch installs for a policy."""

    classes: tuple[TrafficClass, ...]   # match order: the first matching class wins
    queues: tuple[QueueStep, ...]
    job_queues: frozenset[int]          # queue priorities the jobs' packets use

    def dscp_map(self) -> dict[int, int]:
        """DSCP -> queue priority of the DSCP-only classes (first definition wins)."""
        out: dict[int, int] = {}
        for c in self.classes:
            if c.dscp_only and c.dscp is not None:
                out.setdefault(c.dscp, c.priority)
        return out


class Policy(Protocol):
    """What the commodity view reads of a policy (controller.policy.Policy; a protocol, so
    this module does not import the one that imports it)."""

    jobs: tuple[Any, ...]
    traffic_classes: tuple[TrafficClass, ...]
    queues: tuple[QueueStep, ...]


# -- parsing -------------------------------------------------------------------------------
def parse_profile(v: Validator, data: dict) -> str:
    profile = data.get("profile", "dlcp")
    if profile not in PROFILES:
        v.fail("profile", f"must be dlcp or commodity, got {profile!r}")
        return "dlcp"
    return str(profile)


def _port(v: Validator, value: Any, path: str) -> int | None:
    return v.int_in(value, path, 0, 0xFFFF)


def parse_traffic_classes(v: Validator, raw: Any) -> tuple[TrafficClass, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        v.fail("traffic_classes", f"must be a list of traffic classes, got {raw!r}")
        return ()
    classes: list[TrafficClass] = []
    fields = {"name", "priority", "dscp", "protocol", "src", "dst", "src_port", "dst_port"}
    for i, item in enumerate(raw):
        path = f"traffic_classes[{i}]"
        if not v.keys(item, path, fields, {"priority"}):
            continue
        before = len(v.problems)
        prio = v.int_in(item["priority"], f"{path}.priority", 0, 7) if "priority" in item else None
        dscp = v.int_in(item["dscp"], f"{path}.dscp", 0, 63) if "dscp" in item else None
        protocol = None
        if "protocol" in item:
            name = item["protocol"]
            protocol = PROTOCOLS.get(name) if isinstance(name, str) else v.int_in(name, f"{path}.protocol", 0, 255)
            if isinstance(name, str) and protocol is None:
                v.fail(f"{path}.protocol", f"must be tcp, udp or a number 0..255, got {name!r}")
        src = v.prefix(item["src"], f"{path}.src") if "src" in item else None
        dst = v.prefix(item["dst"], f"{path}.dst") if "dst" in item else None
        sport = _port(v, item["src_port"], f"{path}.src_port") if "src_port" in item else None
        dport = _port(v, item["dst_port"], f"{path}.dst_port") if "dst_port" in item else None
        if (sport is not None or dport is not None) and protocol not in (6, 17):
            v.fail(path, "ports need protocol: tcp or udp")
        if not set(item) - {"name", "priority"}:
            v.fail(path, "matches nothing: give dscp and/or protocol, src, dst, src_port, dst_port")
        name = item.get("name", f"class{i}")
        if not isinstance(name, str):
            v.fail(f"{path}.name", f"must be a string, got {name!r}")
        if len(v.problems) == before and prio is not None:
            classes.append(TrafficClass(prio, str(name), dscp, protocol, src, dst, sport, dport, path))
    return tuple(classes)


def parse_queues(v: Validator, raw: Any) -> tuple[QueueStep, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        v.fail("queues", f"must be a list of queue steps, got {raw!r}")
        return ()
    steps: list[QueueStep] = []
    seen: dict[int, str] = {}
    for i, item in enumerate(raw):
        path = f"queues[{i}]"
        if not v.keys(item, path, {"priority", "queue_threshold", "drop", "ecn"}, {"priority", "queue_threshold"}):
            continue
        before = len(v.problems)
        prio = v.int_in(item["priority"], f"{path}.priority", 0, 7) if "priority" in item else None
        depth = (v.int_in(item["queue_threshold"], f"{path}.queue_threshold", 0, MAX_QUEUE_THRESHOLD)
                 if "queue_threshold" in item else None)
        flags = {}
        for key in ("drop", "ecn"):
            value = item.get(key, True)
            if value in ("on", "off"):
                value = value == "on"
            if not isinstance(value, bool):
                v.fail(f"{path}.{key}", f"must be on or off, got {value!r}")
            flags[key] = bool(value)
        if prio is not None and prio in seen:
            v.fail(f"{path}.priority", f"queue {prio} is already set by {seen[prio]}")
        if prio is not None:
            seen.setdefault(prio, path)
        if len(v.problems) == before and prio is not None and depth is not None:
            steps.append(QueueStep(prio, depth, flags["drop"], flags["ecn"]))
    return tuple(steps)


# -- the commodity view --------------------------------------------------------------------
def commodity_plan(policy: Policy) -> CommodityPlan:
    """The classes and queue steps a DSCP/WRED-ECN switch installs for ``policy``.

    Explicit traffic classes first, then each job's layer rules as DSCP classes (priority on)
    in file order; explicit ``queues`` entries, then one step per queue a job uses: the
    smallest of the thresholds of the drop classes sharing layers with that queue's rules
    (dropping on) and the job's ECN threshold (ecn on).
    """
    classes = list(policy.traffic_classes)
    job_queues: set[int] = set()
    derived: dict[int, QueueStep] = {}
    for j, job in enumerate(policy.jobs):
        queues = {rule.priority for rule in job.layers} if job.priority and job.layers else {0}
        job_queues |= queues
        for k, rule in enumerate(job.layers if job.priority else ()):
            classes.append(TrafficClass(rule.priority, f"{job.name} tensors {rule.tensors[0]}..{rule.tensors[1]}",
                                        dscp=rule.dscp, path=f"jobs[{j}].layers[{k}]"))
        for prio in queues:
            # the drop classes that share layers with the rules of this queue
            spans = [r.tensors for r in job.layers if r.priority == prio] if job.priority else [(0, 0xFFFF)]
            depths = [c.queue_threshold for c in job.drop_classes if job.dropping
                      and any(c.tensors[0] <= hi and lo <= c.tensors[1] for lo, hi in spans)]
            depths += [job.ecn_threshold] if job.ecn else []
            if not depths:
                continue
            old = derived.get(prio)
            step = QueueStep(prio, min(depths), job.dropping, job.ecn)
            if old is not None:
                step = QueueStep(prio, min(old.queue_threshold, step.queue_threshold),
                                 old.drop or step.drop, old.ecn or step.ecn)
            derived[prio] = step
    explicit = {q.priority: q for q in policy.queues}
    queues = sorted({**derived, **explicit}.values(), key=lambda q: q.priority)
    return CommodityPlan(tuple(classes), tuple(queues), frozenset(job_queues))


def check_commodity(v: Validator, policy: Policy) -> None:
    """Problems that keep ``policy`` from being expressed by DSCP classes and queue steps:
    two classes giving one DSCP different queues, and layer rules split by magnitude."""
    for j, job in enumerate(policy.jobs):
        for k, rule in enumerate(job.layers if job.priority else ()):
            if rule.mag_class != ALL_MAGNITUDES:
                v.fail(f"jobs[{j}].layers[{k}].mag_class",
                       "a commodity switch classes by DSCP only: layer rules cannot split by magnitude")
    first: dict[int, TrafficClass] = {}
    for c in commodity_plan(policy).classes:
        if not c.dscp_only or c.dscp is None:
            continue
        seen = first.setdefault(c.dscp, c)
        if seen.priority != c.priority:
            v.fail(f"{c.path}.dscp", f"DSCP {c.dscp} already goes to queue {seen.priority} ({seen.path}); "
                   f"a commodity switch classes by DSCP only, so it cannot also go to queue {c.priority}")
