"""Policies through P4Runtime into the embedded switch, then packets through its pipeline: the
traffic classes, the commodity profile and the way back to the DLCP profile."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from controller.policy import POLICY_TABLES, load_policy, parse_policy, policy_entries
from controller.routing import ROUTE_TABLES, route_entries
from hosts.wire import DLCP, DLCP_PORT
from tests.controller_helpers import leaf_spine
from tests.test_controller_concurrency import PIPELINE, Switches, controller

POLICIES = Path(__file__).resolve().parent.parent / "controller" / "policies"
SRC, DST = "10.0.1.1", "10.0.1.2"   # h11 -> h12, both on s1 (port 2 for h12)


@pytest.fixture
def switch() -> Iterator[tuple[Switches, object]]:
    switches = Switches(2)
    fabric = leaf_spine(leaves=1, spines=1, hosts_per_leaf=2, addrs=[s.address for s in switches.servers])
    with controller(fabric) as made:
        made.apply(route_entries(fabric, PIPELINE.schema), ROUTE_TABLES)
        yield switches, made
    switches.stop()


def apply(made, policy) -> None:
    entries = policy_entries(policy, PIPELINE.schema)
    made.apply({name: entries for name in made.sessions}, POLICY_TABLES)


def dlcp(tensor: int, *, dscp: int, ecn: int, eligible: bool = False) -> bytes:
    return bytes(Ether(src="00:00:0a:00:01:01", dst="00:00:00:00:01:01")
                 / IP(src=SRC, dst=DST, tos=(dscp << 2) | ecn) / UDP(sport=40000, dport=DLCP_PORT)
                 / DLCP(version=1, flags=1 if eligible else 0, job_id=1, tensor_id=tensor, count=1,
                        mag_class=100 if eligible else 140) / Raw(bytes(4)))


def tcp(dscp: int) -> bytes:
    return bytes(Ether(src="00:00:0a:00:01:01", dst="00:00:00:00:01:01")
                 / IP(src=SRC, dst=DST, tos=dscp << 2) / TCP(sport=43000, dport=5000) / Raw(b"gloo"))


def through(switches: Switches, frame: bytes, depth: int = 0) -> int | None:
    """The queue priority ``frame`` joins on s1 when that queue holds ``depth`` packets (the
    depth estimate ingress reads), or None when s1 drops it in ingress."""
    pipeline = switches.servers[0].servicer.store.pipeline
    for prio in range(8):
        pipeline.registers["queue_depth"].write(2 * 8 + prio, depth)
    jobs = pipeline.ingress(frame, 1, 0)
    if not jobs:
        return None
    (job,) = jobs
    return int(job.priority)


def test_policies_reach_the_pipeline_in_both_profiles(switch) -> None:
    switches, made = switch
    default = load_policy(POLICIES / "default.yaml")
    gloo = parse_policy({"jobs": [{"id": 1, "layers": [{"tensors": "0..15", "priority": 7, "dscp": 46}]}],
                         "traffic_classes": [{"name": "gloo", "dscp": 18, "protocol": "tcp", "priority": 6}]})
    apply(made, gloo)
    assert through(switches, tcp(18)) == 6                   # gloo's TCP in its class
    assert through(switches, tcp(0)) == 0
    assert through(switches, dlcp(3, dscp=18, ecn=2)) == 7   # DLCP: its own layer rules

    apply(made, default)
    # tensor 3 is a front layer: queue 7 in the DLCP profile whatever DSCP the host marked
    assert through(switches, dlcp(3, dscp=34, ecn=2)) == 7
    assert through(switches, tcp(18)) == 0                    # the gloo class is gone

    apply(made, load_policy(POLICIES / "commodity.yaml"))
    assert through(switches, dlcp(3, dscp=34, ecn=2)) == 5   # the DSCP decides
    assert through(switches, dlcp(3, dscp=46, ecn=2)) == 7
    # queue 7's step is 24 packets (the front-layer class): Not-ECT dropped from 24, ECT kept;
    # the DLCP eligible bit plays no part
    assert through(switches, dlcp(3, dscp=46, ecn=0), depth=23) == 7
    assert through(switches, dlcp(3, dscp=46, ecn=0), depth=24) is None
    assert through(switches, dlcp(3, dscp=46, ecn=2, eligible=True), depth=24) == 7

    apply(made, default)                                       # back: the profile default is written again
    assert through(switches, dlcp(3, dscp=34, ecn=2)) == 7
    assert through(switches, dlcp(3, dscp=46, ecn=0), depth=24) == 7            # not eligible: kept
    assert through(switches, dlcp(3, dscp=46, ecn=2, eligible=True), depth=24) is None  # its drop class
