"""The diff: deletes, then modifies, then inserts; only managed tables; defaults only modified."""

from __future__ import annotations

from controller.diff import compute_diff
from controller.entities import TableEntry
from tests.controller_helpers import schema

S = schema()
SPRAY = frozenset({"DlcpIngress.spray_mode"})


def spray(job: int, action: str = "spray_random") -> TableEntry:
    return TableEntry.build(S, "spray_mode", {"job_id": job}, action)


def route(ip: str) -> TableEntry:
    return TableEntry.build(S, "ipv4_lpm", {"dstAddr": f"{ip}/32"}, "drop_no_route")


def test_equal_state_gives_no_updates() -> None:
    assert compute_diff([spray(1), spray(2)], [spray(2), spray(1)], SPRAY) == []


def test_order_and_kinds() -> None:
    updates = compute_diff([spray(1, "flow_hash"), spray(3)], [spray(1), spray(2)], SPRAY)
    assert [(u.type, u.entity) for u in updates] == [
        ("DELETE", spray(2)),
        ("MODIFY", spray(1, "flow_hash")),
        ("INSERT", spray(3)),
    ]


def test_entries_of_other_tables_are_left_alone() -> None:
    assert compute_diff([spray(1)], [spray(1), route("10.0.0.1")], SPRAY) == []
    assert [u.type for u in compute_diff([], [spray(1), route("10.0.0.1")], None)] == ["DELETE", "DELETE"]


def test_priority_is_part_of_the_key() -> None:
    def layer(priority: int) -> TableEntry:
        return TableEntry.build(
            S, "layer_priority", {"job_id": 1, "tensor_id": "0..3"}, "set_priority", {"prio": 7, "dscp": 0}, priority=priority
        )

    updates = compute_diff([layer(2)], [layer(1)], frozenset({"DlcpIngress.layer_priority"}))
    assert [(u.type, u.entity.priority) for u in updates] == [("DELETE", 1), ("INSERT", 2)]


def test_default_entries_are_modified_never_inserted_or_deleted() -> None:
    table = frozenset({"DlcpIngress.layer_priority"})
    wanted = TableEntry.build(S, "layer_priority", action="set_priority", params={"prio": 3, "dscp": 0}, is_default=True)
    held = TableEntry.build(S, "layer_priority", action="set_priority", params={"prio": 0, "dscp": 0}, is_default=True)
    assert [(u.type, u.entity) for u in compute_diff([wanted], [held], table)] == [("MODIFY", wanted)]
    assert compute_diff([], [held], table) == [], "a default the policy does not set is left as it is"
