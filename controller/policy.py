"""DLCP policies: the YAML model, its validation (errors carry key paths) and its table entries.

A policy lists jobs. Each job has four switch mechanisms, each on or off on its own:

- ``priority``: its layers (tensor ids, 0 = the input-side layer) map to a queue priority
  0..7 (7 most urgent), as explicit ranges (first matching rule wins) or derived from a
  model trace (front layers first);
- ``dropping``: drop-eligible classes (layer range x magnitude-class range), each with the
  depth of its queue at which ingress drops its eligible packets before they are queued;
- ``ecn``: the depth at which egress marks the job's ECN-capable packets CE;
- ``spraying``: per-packet member choice (random or round-robin) instead of the flow hash.

Beside the jobs, ``traffic_classes`` and ``queues`` give any other traffic a queue class and a
per-queue drop/mark step, and ``profile: commodity`` makes the switches act as DSCP/WRED-ECN
switches would (controller/policy_classes.py).

See policies/default.yaml, controller/README.md and p4src/README.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from controller import policy_file
from controller.entities import TableEntry
from controller.errors import PolicyError
from controller.policy_check import Validator as _Validator
from controller.policy_classes import (
    QueueStep,
    TrafficClass,
    check_commodity,
    commodity_plan,
    parse_profile,
    parse_queues,
    parse_traffic_classes,
)
from controller.schema import P4Schema

SPRAY_MODE = "DlcpIngress.spray_mode"
LAYER_PRIORITY = "DlcpIngress.layer_priority"
DROP_CLASS = "DlcpIngress.drop_class"
ECN_THRESHOLD = "DlcpEgress.ecn_threshold"
PROFILE = "DlcpIngress.profile"
TRAFFIC_CLASS = "DlcpIngress.traffic_class"
QUEUE_RED = "DlcpIngress.queue_red"
QUEUE_ECN = "DlcpEgress.queue_ecn"
JOB_TABLES = frozenset({SPRAY_MODE, LAYER_PRIORITY, DROP_CLASS, ECN_THRESHOLD})
CLASS_TABLES = frozenset({TRAFFIC_CLASS, QUEUE_RED, QUEUE_ECN})
POLICY_TABLES = JOB_TABLES | CLASS_TABLES | {PROFILE}
SPRAY_ACTIONS = {"random": "DlcpIngress.spray_random", "round_robin": "DlcpIngress.spray_round_robin",
                 "off": "DlcpIngress.flow_hash"}
MAX_JOB_ID = 1023
MAX_QUEUE_THRESHOLD = (1 << 19) - 1


@dataclass(frozen=True)
class LayerRule:
    tensors: tuple[int, int]
    priority: int
    dscp: int = 0
    mag_class: tuple[int, int] = (0, 255)


@dataclass(frozen=True)
class DropClass:
    """Drop-eligible packets of these layers and magnitude classes are dropped in ingress
    when the queue they would join holds ``queue_threshold`` packets or more."""

    tensors: tuple[int, int]
    mag_class: tuple[int, int]
    queue_threshold: int


@dataclass(frozen=True)
class Job:
    id: int
    name: str
    workers: tuple[str, ...]
    spraying: str  # "random", "round_robin" or "off"
    layers: tuple[LayerRule, ...]
    priority: bool = True  # off: the layers are kept but not installed (default queue)
    dropping: bool = False
    drop_classes: tuple[DropClass, ...] = ()
    ecn: bool = False
    ecn_threshold: int = 0


@dataclass(frozen=True)
class Policy:
    jobs: tuple[Job, ...]
    default_priority: int | None = None
    profile: str = "dlcp"  # "dlcp" or "commodity"
    traffic_classes: tuple[TrafficClass, ...] = ()
    queues: tuple[QueueStep, ...] = ()


def _layers_from_trace(v: _Validator, spec: Any, path: str, base: Path) -> tuple[LayerRule, ...]:
    if not v.keys(spec, path, {"file", "priorities", "dscps"}, {"file", "priorities"}):
        return ()
    priorities = spec.get("priorities")
    if not isinstance(priorities, list) or not priorities:
        v.fail(f"{path}.priorities", "must be a non-empty list of priorities, most urgent (front layers) first")
        return ()
    prios = [v.int_in(p, f"{path}.priorities[{i}]", 0, 7) for i, p in enumerate(priorities)]
    dscps: list[int | None] = [0] * len(prios)
    if "dscps" in spec:
        raw = spec["dscps"]
        if not isinstance(raw, list) or len(raw) != len(prios):
            v.fail(f"{path}.dscps", f"must be a list of {len(prios)} DSCPs, one per priority")
        else:
            dscps = [v.int_in(d, f"{path}.dscps[{i}]", 0, 63) for i, d in enumerate(raw)]
    if not isinstance(spec.get("file"), str):
        v.fail(f"{path}.file", "must be a path to a trace CSV")
        return ()
    file = Path(spec["file"])
    file = file if file.is_absolute() else base / file
    try:
        sizes = trace_sizes(file)
    except (OSError, ValueError) as exc:
        v.fail(f"{path}.file", f"cannot use trace {file}: {exc}")
        return ()
    if None in prios or None in dscps:
        return ()
    return layers_by_volume(sizes, [p for p in prios if p is not None], [d for d in dscps if d is not None])


def trace_sizes(path: Path) -> list[float]:
    """Per-tensor sizes (elements) in forward order from a trace CSV (numel or *bytes column)."""
    return policy_file.trace_sizes(path)


def layers_by_volume(sizes: list[float], priorities: list[int], dscps: list[int] | None = None) -> tuple[LayerRule, ...]:
    """Split tensors, in forward order, into len(priorities) classes of about equal volume.

    Class k (tensors whose preceding volume lies in the k-th share of the total) gets
    priorities[k] (and dscps[k], default 0), so the front layers get the first (most urgent)
    priority.
    """
    dscps = dscps or [0] * len(priorities)
    total = sum(sizes) or 1.0
    classes, before = [], 0.0
    for size in sizes:
        classes.append(min(int(before / total * len(priorities)), len(priorities) - 1))
        before += size
    rules: list[LayerRule] = []
    start = 0
    for i in range(1, len(classes) + 1):
        if i == len(classes) or classes[i] != classes[start]:
            rules.append(LayerRule((start, i - 1), priorities[classes[start]], dscps[classes[start]]))
            start = i
    last = rules[-1]
    rules[-1] = LayerRule((last.tensors[0], 0xFFFF), last.priority, last.dscp)  # tensors past the trace
    return tuple(rules)


def _list(v: _Validator, raw: Any, path: str, what: str) -> list:
    if raw is None:
        return []
    if not isinstance(raw, list):
        v.fail(path, f"must be a list of {what}, got {raw!r}")
        return []
    return raw


def _parse_layers(v: _Validator, raw: dict, path: str, base: Path) -> tuple[LayerRule, ...]:
    if "layers" in raw and "layers_from_trace" in raw:
        v.fail(path, "give either layers or layers_from_trace, not both")
    layers: list[LayerRule] = []
    if "layers_from_trace" in raw:
        layers += _layers_from_trace(v, raw["layers_from_trace"], f"{path}.layers_from_trace", base)
    for j, rule in enumerate(_list(v, raw.get("layers"), f"{path}.layers", "layer rules")):
        lpath = f"{path}.layers[{j}]"
        if not v.keys(rule, lpath, {"tensors", "priority", "dscp", "mag_class"}, {"tensors", "priority"}):
            continue
        tensors = v.range_in(rule["tensors"], f"{lpath}.tensors", 0, 0xFFFF) if "tensors" in rule else None
        prio = v.int_in(rule["priority"], f"{lpath}.priority", 0, 7) if "priority" in rule else None
        dscp = v.int_in(rule.get("dscp", 0), f"{lpath}.dscp", 0, 63)
        mag = v.range_in(rule.get("mag_class", "0..255"), f"{lpath}.mag_class", 0, 255)
        if tensors and prio is not None and dscp is not None and mag:
            layers.append(LayerRule(tensors, prio, dscp, mag))
    return tuple(layers)


def _switch(v: _Validator, raw: Any, path: str) -> bool | None:
    """An on/off value (YAML on/off/true/false)."""
    if isinstance(raw, bool):
        return raw
    if raw in ("on", "off"):
        return raw == "on"
    v.fail(path, f"must be on or off, got {raw!r}")
    return None


def _mechanism(v: _Validator, raw: Any, path: str, keys: set[str]) -> tuple[bool, dict]:
    """A mechanism written ``off`` / ``on`` or as a mapping with ``enabled`` (default on)."""
    if not isinstance(raw, dict):
        return bool(_switch(v, raw, path)), {}
    if not v.keys(raw, path, keys | {"enabled"}, set()):
        return False, {}
    enabled = _switch(v, raw.get("enabled", True), f"{path}.enabled")
    return bool(enabled), raw


def _parse_dropping(v: _Validator, raw: dict, path: str) -> tuple[bool, tuple[DropClass, ...]]:
    if "dropping" not in raw:
        return False, ()
    dpath = f"{path}.dropping"
    enabled, spec = _mechanism(v, raw["dropping"], dpath, {"classes"})
    classes: list[DropClass] = []
    listed = _list(v, spec.get("classes"), f"{dpath}.classes", "drop classes")
    for j, rule in enumerate(listed):
        cpath = f"{dpath}.classes[{j}]"
        if not v.keys(rule, cpath, {"tensors", "mag_class", "queue_threshold"}, {"queue_threshold"}):
            continue
        if "queue_threshold" not in rule:
            continue
        tensors = v.range_in(rule.get("tensors", "0..65535"), f"{cpath}.tensors", 0, 0xFFFF)
        mag = v.range_in(rule.get("mag_class", "0..255"), f"{cpath}.mag_class", 0, 255)
        queue = v.int_in(rule["queue_threshold"], f"{cpath}.queue_threshold", 0, MAX_QUEUE_THRESHOLD)
        if tensors and mag and queue is not None:
            classes.append(DropClass(tensors, mag, queue))
    if enabled and not listed and isinstance(spec.get("classes"), (list, type(None))):
        # a listed but invalid class has its own problem above: only an empty list is this one
        v.fail(f"{dpath}.classes", "dropping is on but lists no drop-eligible class")
    return enabled and bool(classes), tuple(classes)


def _parse_ecn(v: _Validator, raw: dict, path: str) -> tuple[bool, int]:
    if "ecn" not in raw:
        return False, 0
    epath = f"{path}.ecn"
    enabled, spec = _mechanism(v, raw["ecn"], epath, {"queue_threshold"})
    if not spec:
        if enabled:
            v.fail(f"{epath}.queue_threshold", "is required when ecn is on")
        return False, 0
    if "queue_threshold" not in spec:
        v.fail(f"{epath}.queue_threshold", "is required")
        return False, 0
    queue = v.int_in(spec["queue_threshold"], f"{epath}.queue_threshold", 0, MAX_QUEUE_THRESHOLD)
    return enabled and queue is not None, queue or 0


def _parse_job(v: _Validator, raw: Any, path: str, base: Path, hosts: set[str] | None) -> Job | None:
    allowed = {"id", "name", "workers", "spraying", "priority", "layers", "layers_from_trace",
               "dropping", "ecn"}
    if not v.keys(raw, path, allowed, {"id"}):
        return None
    job_id = v.int_in(raw["id"], f"{path}.id", 0, MAX_JOB_ID) if "id" in raw else None
    name = raw.get("name", f"job{job_id}")
    if not isinstance(name, str):
        v.fail(f"{path}.name", f"must be a string, got {name!r}")
    workers = raw.get("workers", [])
    if not isinstance(workers, list) or not all(isinstance(w, str) for w in workers):
        v.fail(f"{path}.workers", "must be a list of host names")
        workers = []
    for j, w in enumerate(workers):
        if hosts is not None and w not in hosts:
            v.fail(f"{path}.workers[{j}]", f"no host named {w!r} in the fabric")
    spraying = raw.get("spraying", "off")
    if isinstance(spraying, bool):
        spraying = "random" if spraying else "off"
    if spraying not in ("random", "round_robin", "off"):
        v.fail(f"{path}.spraying", f"must be random, round_robin or off, got {spraying!r}")
    layers = _parse_layers(v, raw, path, base)
    priority = _switch(v, raw.get("priority", True), f"{path}.priority")
    dropping, drop_classes = _parse_dropping(v, raw, path)
    ecn, ecn_threshold = _parse_ecn(v, raw, path)
    if job_id is None:
        return None
    return Job(job_id, str(name), tuple(workers), str(spraying), layers, bool(priority),
               dropping, drop_classes, ecn, ecn_threshold)


def parse_policy(
    data: Any, source: str = "policy", *, base: Path | None = None, hosts: set[str] | None = None
) -> Policy:
    """A validated Policy; raises PolicyError listing every problem as 'key.path: reason'.

    ``base`` resolves relative trace files; ``hosts``, when given, are the names workers may use.
    """
    v = _Validator()
    data = {} if data is None else data
    top = {"version", "default_priority", "jobs", "profile", "traffic_classes", "queues"}
    if not v.keys(data, "", top, {"jobs"}):
        raise PolicyError(source, v.problems)
    if "version" in data and data["version"] != 1:
        v.fail("version", f"must be 1, got {data['version']!r}")
    default_priority = None
    if data.get("default_priority") is not None:
        default_priority = v.int_in(data["default_priority"], "default_priority", 0, 7)
    jobs: list[Job] = []
    seen: dict[int, str] = {}
    for i, raw in enumerate(_list(v, data.get("jobs"), "jobs", "jobs")):
        job = _parse_job(v, raw, f"jobs[{i}]", base or Path.cwd(), hosts)
        if job is None:
            continue
        if job.id in seen:
            v.fail(f"jobs[{i}].id", f"{job.id} is already used by {seen[job.id]}")
        seen.setdefault(job.id, f"jobs[{i}]")
        jobs.append(job)
    profile = parse_profile(v, data)
    policy = Policy(tuple(jobs), default_priority, profile, parse_traffic_classes(v, data.get("traffic_classes")),
                    parse_queues(v, data.get("queues")))
    if profile == "commodity" and not v.problems:
        check_commodity(v, policy)
    if v.problems:
        raise PolicyError(source, v.problems)
    return policy


def load_policy(path: str | Path, *, hosts: set[str] | None = None) -> Policy:
    path = Path(path)
    data = policy_file.load_yaml(path)
    return parse_policy(data, str(path), base=path.parent, hosts=hosts)


# -- table entries ---------------------------------------------------------------------------
def class_entries(classes: tuple[TrafficClass, ...], queues: tuple[QueueStep, ...],
                  schema: P4Schema) -> list[TableEntry]:
    """traffic_class entries (the first class wins), queue_red and queue_ecn entries."""
    entries: list[TableEntry] = []
    for index, c in enumerate(classes):
        match: dict[str, str | int] = {}
        for key, value in (("hdr.ipv4.dscp", c.dscp), ("hdr.ipv4.protocol", c.protocol),
                           ("meta.l4_src", c.src_port), ("meta.l4_dst", c.dst_port)):
            if value is not None:
                match[key] = value
        for key, prefix in (("hdr.ipv4.srcAddr", c.src), ("hdr.ipv4.dstAddr", c.dst)):
            if prefix is not None:
                address, length = prefix
                match[key] = f"{address}&&&{(0xFFFFFFFF << (32 - length)) & 0xFFFFFFFF:#x}"
        entries.append(TableEntry.build(schema, TRAFFIC_CLASS, match, "DlcpIngress.set_traffic_class",
                                        {"prio": c.priority}, priority=len(classes) - index))
    for q in queues:
        if q.drop:
            entries.append(TableEntry.build(schema, QUEUE_RED, {"meta.dlcp_prio": q.priority},
                                            "DlcpIngress.red_drop_above", {"queue_threshold": q.queue_threshold}))
        if q.ecn:
            entries.append(TableEntry.build(schema, QUEUE_ECN, {"meta.dlcp_prio": q.priority},
                                            "DlcpEgress.mark_above", {"queue_threshold": q.queue_threshold}))
    return entries


def policy_entries(policy: Policy, schema: P4Schema) -> list[TableEntry]:
    """The entries a policy means (same on every switch): the profile (default entry); in the
    DLCP profile each job's spray_mode, layer_priority, drop_class and ecn_threshold entries (a
    mechanism that is off writes nothing) and the traffic classes and queue steps; in the
    commodity profile the commodity view's classes and queue steps only."""
    profile_action = "DlcpIngress.profile_commodity" if policy.profile == "commodity" else "DlcpIngress.profile_dlcp"
    entries = [TableEntry.build(schema, PROFILE, action=profile_action, is_default=True)]
    if policy.profile == "commodity":
        plan = commodity_plan(policy)
        return entries + class_entries(plan.classes, plan.queues, schema)
    entries += class_entries(policy.traffic_classes, policy.queues, schema)
    if policy.default_priority is not None:
        entries.append(
            TableEntry.build(
                schema, LAYER_PRIORITY, action="DlcpIngress.set_priority",
                params={"prio": policy.default_priority, "dscp": 0}, is_default=True,
            )
        )
    for job in policy.jobs:
        if job.spraying in SPRAY_ACTIONS:
            # spraying off writes flow_hash (the table's default) too: the switch then names
            # every job, one with all mechanisms off included (policy show, counters per job)
            action = SPRAY_ACTIONS[job.spraying]
            entries.append(TableEntry.build(schema, SPRAY_MODE, {"hdr.dlcp.job_id": job.id}, action))
        for index, rule in enumerate(job.layers if job.priority else ()):
            entries.append(
                TableEntry.build(
                    schema,
                    LAYER_PRIORITY,
                    {
                        "hdr.dlcp.job_id": job.id,
                        "hdr.dlcp.tensor_id": f"{rule.tensors[0]}..{rule.tensors[1]}",
                        "hdr.dlcp.mag_class": f"{rule.mag_class[0]}..{rule.mag_class[1]}",
                    },
                    "DlcpIngress.set_priority",
                    {"prio": rule.priority, "dscp": rule.dscp},
                    priority=len(job.layers) - index,  # the first matching rule wins
                )
            )
        for index, cls in enumerate(job.drop_classes if job.dropping else ()):
            entries.append(
                TableEntry.build(
                    schema,
                    DROP_CLASS,
                    {
                        "hdr.dlcp.job_id": job.id,
                        "hdr.dlcp.tensor_id": f"{cls.tensors[0]}..{cls.tensors[1]}",
                        "hdr.dlcp.mag_class": f"{cls.mag_class[0]}..{cls.mag_class[1]}",
                    },
                    "DlcpIngress.drop_above",
                    {"queue_threshold": cls.queue_threshold},
                    priority=len(job.drop_classes) - index,  # the first matching class wins
                )
            )
        if job.ecn:
            entries.append(
                TableEntry.build(schema, ECN_THRESHOLD, {"hdr.dlcp.job_id": job.id},
                                 "DlcpEgress.mark_above", {"queue_threshold": job.ecn_threshold})
            )
    return entries


# -- what switches hold ----------------------------------------------------------------------
def mechanisms_held(entries: list[TableEntry]) -> dict[int, dict[str, str]]:
    """Per job id, each mechanism's state as read back from policy entries (for ``policy show``)."""
    jobs: dict[int, dict[str, str]] = {}
    counts: dict[tuple[int, str], int] = {}
    for entry in entries:
        job_ids = [m.value for name, m in entry.match if name == "hdr.dlcp.job_id"]  # type: ignore[union-attr]
        if entry.is_default or entry.table not in POLICY_TABLES or not job_ids:
            continue
        job_id = int(job_ids[0])
        state = jobs.setdefault(job_id, dict.fromkeys(("priority", "dropping", "ecn", "spraying"), "off"))
        mode = (entry.action or "").rsplit(".", 1)[-1]
        if entry.table == SPRAY_MODE:
            state["spraying"] = {"spray_random": "random", "spray_round_robin": "round_robin"}.get(mode, "off")
        elif entry.table == ECN_THRESHOLD:
            state["ecn"] = f"on (depth >= {dict(entry.params).get('queue_threshold')})"
        else:
            knob, noun = ("priority", "layer rule") if entry.table == LAYER_PRIORITY else ("dropping", "class")
            n = counts[(job_id, knob)] = counts.get((job_id, knob), 0) + 1
            state[knob] = f"on ({n} {noun}{'es' if noun == 'class' and n > 1 else 's' if n > 1 else ''})"
    return dict(sorted(jobs.items()))


def describe_held(entries: list[TableEntry], profile: TableEntry | None) -> list[str]:
    """Lines for ``policy show``: the profile, each job's mechanisms (a job with every
    mechanism off said so), the traffic classes and the queue steps."""
    commodity = profile is not None and (profile.action or "").endswith("profile_commodity")
    lines = [("profile: commodity (every packet classed by DSCP, queue steps only; "
              "DLCP jobs' own tables unused)") if commodity else
             "profile: dlcp (DLCP jobs by their own tables; other traffic by traffic class)"]
    for job_id, state in mechanisms_held(entries).items():
        if all(v == "off" for v in state.values()):
            lines.append(f"  job {job_id}: every mechanism off (priority, dropping, ecn, spraying): "
                         "default queue, flow hash, no early drop, no ECN mark")
        else:
            lines.append(f"  job {job_id}: " + "  ".join(f"{k}={v}" for k, v in state.items()))
    classes = sorted((e for e in entries if e.table == TRAFFIC_CLASS), key=lambda e: -e.priority)
    for e in classes:
        fields = ", ".join(f"{name.rsplit('.', 1)[-1]}={_ternary_text(m)}" for name, m in e.match) or "any packet"
        lines.append(f"  traffic class: {fields} -> queue {dict(e.params).get('prio')}")
    steps: dict[int, list[str]] = {}
    for e in entries:
        if e.table in (QUEUE_RED, QUEUE_ECN):
            queue = int(dict((n, m.value) for n, m in e.match)["meta.dlcp_prio"])  # type: ignore[union-attr]
            what = "drop Not-ECT" if e.table == QUEUE_RED else "mark ECT"
            steps.setdefault(queue, []).append(f"{what} at depth >= {dict(e.params).get('queue_threshold')}")
    for queue, what in sorted(steps.items()):
        lines.append(f"  queue {queue}: " + ", ".join(sorted(what)))  # drop, then mark
    return lines


def _ternary_text(m: object) -> str:
    """A ternary value as 'value' (all bits) or 'value&&&mask'."""
    value, mask = getattr(m, "value", m), getattr(m, "mask", None)
    if mask is None or ((mask + 1) & mask) == 0 and mask.bit_length() in (3, 6, 8, 16, 32):
        return str(value)
    return f"{value:#x}&&&{mask:#x}"
