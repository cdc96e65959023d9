"""A policy rendered for switches and hosts that are not programmable: SONiC's config_db and
Linux tc. Both render the policy's commodity view (controller/policy_classes.py): DSCP classes,
strict-priority queues and one drop/mark threshold per queue; what they cannot express comes
back as notes (controller/README.md: what a commodity switch cannot express)."""

from __future__ import annotations

from dataclasses import dataclass, field

from controller.errors import PolicyError
from controller.policy import Policy
from controller.policy_check import Validator
from controller.policy_classes import CommodityPlan, check_commodity, commodity_plan

#: Bytes per packet used to turn the policy's thresholds (packets) into bytes: a DLCP data
#: packet of 361 float32 values is 1,500 bytes on the wire (IPv4).
PACKET_BYTES = 1500


@dataclass(frozen=True)
class Rendered:
    """The rendered configuration and the notes about what it leaves out or approximates."""

    text: str
    notes: list[str] = field(default_factory=list)


def checked_plan(policy: Policy, source: str = "policy") -> CommodityPlan:
    """The policy's commodity view; PolicyError when DSCP classes cannot express it (one DSCP
    to two queues, layer rules split by magnitude), whatever the policy's profile."""
    v = Validator()
    check_commodity(v, policy)
    if v.problems:
        raise PolicyError(source, v.problems)
    return commodity_plan(policy)
