"""All-or-nothing writes across switches: a refusal on one switch rolls back the others."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from controller.entities import TableEntry
from controller.errors import WriteRefused
from controller.fabric_controller import ApplyFailed, FabricController
from controller.switch import SwitchSession
from tests.controller_helpers import pipeline, schema
from tests.fake_p4runtime import FakeSwitch

S = schema()
TABLES = frozenset({"DlcpIngress.spray_mode", "DlcpIngress.layer_priority"})


def spray(job: int, action: str = "spray_random") -> TableEntry:
    return TableEntry.build(S, "spray_mode", {"job_id": job}, action)


@pytest.fixture
def fabric() -> Iterator[tuple[list[FakeSwitch], FabricController]]:
    fakes = [FakeSwitch(device_id=i + 1).start() for i in range(3)]
    controller = FabricController(
        SwitchSession(f"s{i + 1}", f.address, i + 1, pipeline(), reconnect_timeout=2) for i, f in enumerate(fakes)
    )
    yield fakes, controller
    controller.close()
    for f in fakes:
        f.stop()


def stored(fake: FakeSwitch) -> set[TableEntry]:
    from p4.v1 import p4runtime_pb2

    return {TableEntry.decode(S, p4runtime_pb2.Entity(table_entry=te)) for te in fake.entries()}


def test_apply_twice_writes_nothing_the_second_time(fabric) -> None:
    fakes, controller = fabric
    desired = {f"s{i + 1}": [spray(1), spray(2)] for i in range(3)}
    assert controller.apply(desired, TABLES).total == 6
    before = [f.servicer.write_requests for f in fakes]
    assert controller.apply(desired, TABLES).total == 0
    assert [f.servicer.write_requests for f in fakes] == before


def test_refusal_on_second_switch_rolls_back_the_first(fabric) -> None:
    fakes, controller = fabric
    old = [spray(1), spray(2, "flow_hash"), spray(5)]
    controller.apply({name: old for name in ("s1", "s2", "s3")}, TABLES)
    default = TableEntry.build(S, "layer_priority", action="set_priority", params={"prio": 4, "dscp": 0}, is_default=True)
    new = [spray(1, "spray_round_robin"), spray(3), default]
    fakes[1].servicer.refuse = lambda u: "RESOURCE_EXHAUSTED: table full" if TableEntry.decode(S, u.entity) == spray(3) else None
    with pytest.raises(ApplyFailed) as err:
        controller.apply({name: new for name in ("s1", "s2", "s3")}, TABLES)
    assert isinstance(err.value.cause, WriteRefused)
    assert "s2 refused 1 update(s): INSERT DlcpIngress.spray_mode hdr.dlcp.job_id=3" in str(err.value)
    assert "RESOURCE_EXHAUSTED table full" in str(err.value)
    assert "rolled back: s2" in str(err.value) and "s1" in str(err.value)
    for fake in fakes:
        assert stored(fake) == set(old)
        assert not fake.servicer.defaults or fake.servicer.defaults[S.tables["layer_priority"].id].action.action.action_id == 0
    assert fakes[2].servicer.write_requests == 1, "the third switch was never touched"


def test_refusal_on_first_switch_leaves_everything(fabric) -> None:
    fakes, controller = fabric
    fakes[0].servicer.refuse = lambda u: "INVALID_ARGUMENT: nope"
    with pytest.raises(ApplyFailed, match="s1 refused 2 update"):
        controller.apply({"s1": [spray(1), spray(2)], "s2": [spray(1)]}, TABLES)
    assert all(stored(f) == set() for f in fakes)
