"""A policy as a SONiC config_db.json fragment (field names and value formats of
sonic-net/sonic-buildimage src/sonic-yang-models: sonic-dscp-tc-map, sonic-tc-queue-map,
sonic-scheduler, sonic-wred-profile, sonic-queue, sonic-port-qos-map).

- ``DSCP_TO_TC_MAP``: every DSCP 0..63 to its traffic class (the queue priority; DSCPs no class
  names go to 0), ``TC_TO_QUEUE_MAP``: traffic class k to queue k;
- ``SCHEDULER``: ``STRICT`` for the queues the jobs and traffic classes use, ``DWRR`` for the rest;
- ``WRED_PROFILE`` per queue with a step: green WRED on, ``ecn_green`` when ECN-capable packets
  are to be marked, min = max = the threshold in bytes, drop probability 100 (the step the P4
  program makes; WRED acts on the average queue length of most ASICs);
- ``QUEUE`` ``PORT|q`` entries naming the scheduler and WRED profile, ``PORT_QOS_MAP`` per port.

config_db values are strings. Not-ECT early drop differs between ASICs: check it with the
switch's WRED counters (``show queue wredcounters``) before relying on it.
"""

from __future__ import annotations

import json

from controller.policy import Policy
from controller.render import PACKET_BYTES, Rendered, checked_plan

MAP_NAME = "GRADFABRIC"
STRICT = "GRADFABRIC_STRICT"
BEST_EFFORT = "GRADFABRIC_BEST_EFFORT"
QUEUES = 8
#: SN2100-style port names (the DLCP testbed's switch): Ethernet0, Ethernet4, ... Ethernet60.
DEFAULT_PORTS = tuple(f"Ethernet{4 * i}" for i in range(16))

ASIC_NOTE = ("Not-ECT early drop differs between ASICs (some drop Not-ECT packets at the WRED "
             "thresholds, some only tail-drop them when ECN is on): check it with the switch's WRED "
             "counters (show queue wredcounters) under load before relying on it")


def render_sonic(policy: Policy, ports: tuple[str, ...] = DEFAULT_PORTS,
                 packet_bytes: int = PACKET_BYTES) -> Rendered:
    """The config_db fragment (JSON text) and notes."""
    plan = checked_plan(policy)
    notes = [ASIC_NOTE]
    dscp_map = plan.dscp_map()
    for c in plan.classes:
        if not c.dscp_only:
            notes.append(f"{c.path} ({c.name}): matches more than DSCP; a DSCP_TO_TC_MAP cannot express it "
                         "(it needs an ACL rule setting the traffic class): left out")
    strict = sorted(({c.priority for c in plan.classes} | set(plan.job_queues)) - {0})
    steps = {q.priority: q for q in plan.queues if q.drop or q.ecn}
    wred: dict[str, dict[str, str]] = {}
    for prio, q in sorted(steps.items()):
        threshold = str(q.queue_threshold * packet_bytes)
        wred[f"GRADFABRIC_Q{prio}"] = {
            "wred_green_enable": "true",
            "ecn": "ecn_green" if q.ecn else "ecn_none",
            "green_min_threshold": threshold,
            "green_max_threshold": threshold,
            "green_drop_probability": "100",
        }
        if q.ecn and not q.drop:
            notes.append(f"queue {prio}: marks ECN-capable packets but drops no Not-ECT packet early; "
                         "WRED with ECN still drops Not-ECT packets at its thresholds on most ASICs")
    queue: dict[str, dict[str, str]] = {}
    for port in ports:
        for prio in range(QUEUES):
            entry = {"scheduler": STRICT if prio in strict else BEST_EFFORT}
            if prio in steps:
                entry["wred_profile"] = f"GRADFABRIC_Q{prio}"
            queue[f"{port}|{prio}"] = entry
    fragment = {
        "DSCP_TO_TC_MAP": {MAP_NAME: {str(d): str(dscp_map.get(d, 0)) for d in range(64)}},
        "TC_TO_QUEUE_MAP": {MAP_NAME: {str(tc): str(tc) for tc in range(QUEUES)}},
        "SCHEDULER": {STRICT: {"type": "STRICT"}, BEST_EFFORT: {"type": "DWRR", "weight": "1"}},
        "WRED_PROFILE": wred,
        "QUEUE": queue,
        "PORT_QOS_MAP": {port: {"dscp_to_tc_map": MAP_NAME, "tc_to_queue_map": MAP_NAME} for port in ports},
    }
    if not strict:
        del fragment["SCHEDULER"][STRICT]
    return Rendered(json.dumps(fragment, indent=2) + "\n", notes)
