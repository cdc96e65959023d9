"""One switch session against the fake P4Runtime server: pipeline, writes, errors, restarts."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from controller.arbitration import ElectionId
from controller.entities import TableEntry, Update
from controller.errors import ConnectionFailed, WriteRefused
from controller.switch import SwitchSession
from tests.controller_helpers import pipeline, schema
from tests.fake_p4runtime import FakeSwitch

S = schema()
TABLES = frozenset({"DlcpIngress.spray_mode"})


def spray(job: int, action: str = "spray_random") -> TableEntry:
    return TableEntry.build(S, "spray_mode", {"job_id": job}, action)


@pytest.fixture
def fake() -> Iterator[FakeSwitch]:
    with FakeSwitch(device_id=1) as switch:
        yield switch


@pytest.fixture
def session(fake: FakeSwitch, tmp_path: Path) -> Iterator[SwitchSession]:
    s = SwitchSession("s1", fake.address, 1, pipeline(), request_log=str(tmp_path / "s1.log"), reconnect_timeout=5)
    yield s
    s.close()


def test_election_ids_are_unique_and_increasing() -> None:
    ids = [ElectionId.new() for _ in range(200)]
    assert len(set(ids)) == 200
    assert ids == sorted(ids)
    assert all(i.high > 0 for i in ids)


def test_connect_loads_pipeline_once(fake: FakeSwitch, session: SwitchSession) -> None:
    session.connect()
    assert fake.servicer.pipeline_sets == 1
    again = SwitchSession("s1", fake.address, 1, pipeline())
    again.connect()
    again.close()
    assert fake.servicer.pipeline_sets == 1, "a switch already running the pipeline is left alone"


def test_sync_writes_only_differences(fake: FakeSwitch, session: SwitchSession) -> None:
    session.connect()
    first = session.sync([spray(1), spray(2)], TABLES)
    assert [u.type for u in first] == ["INSERT", "INSERT"]
    assert session.sync([spray(1), spray(2)], TABLES) == []
    changed = session.sync([spray(1, "spray_round_robin"), spray(3)], TABLES)
    assert sorted(u.type for u in changed) == ["DELETE", "INSERT", "MODIFY"]
    assert {TableEntry.decode(S, te) for te in map(_entity, fake.entries())} == {spray(1, "spray_round_robin"), spray(3)}


def _entity(te):  # a stored TableEntry message as an Entity message
    from p4.v1 import p4runtime_pb2

    return p4runtime_pb2.Entity(table_entry=te)


def test_refused_write_names_the_entry(fake: FakeSwitch, session: SwitchSession) -> None:
    session.connect()
    session.write([Update("INSERT", spray(1))])
    with pytest.raises(WriteRefused) as err:
        session.write([Update("INSERT", spray(2)), Update("INSERT", spray(1))])
    message = str(err.value)
    assert "s1 refused 1 update(s)" in message
    assert "INSERT DlcpIngress.spray_mode hdr.dlcp.job_id=1 -> DlcpIngress.spray_random()" in message
    assert "ALREADY_EXISTS" in message


def test_request_log_names_entities(fake: FakeSwitch, session: SwitchSession, tmp_path: Path) -> None:
    session.connect()
    session.write([Update("INSERT", spray(7))])
    log = (tmp_path / "s1.log").read_text()
    assert "SetForwardingPipelineConfig" in log
    assert "INSERT DlcpIngress.spray_mode hdr.dlcp.job_id=7" in log


def test_higher_election_id_takes_over(fake: FakeSwitch, session: SwitchSession) -> None:
    session.connect()
    newer = SwitchSession("s1", fake.address, 1, pipeline())
    newer.connect()
    older = SwitchSession("s1", fake.address, 1, pipeline(), election_id=ElectionId(1, 1))
    with pytest.raises(ConnectionFailed, match="not primary"):
        older.connect()
    newer.close()
    older.close()


def test_restart_is_reconciled(fake: FakeSwitch, session: SwitchSession) -> None:
    session.connect()
    session.sync([spray(1), spray(2)], TABLES)
    fake.restart()
    assert fake.entries() == []
    entries = session.read_entries(["spray_mode"])  # the failed read reconnects and reconciles
    assert set(entries) == {spray(1), spray(2)}
    assert fake.servicer.pipeline_sets == 1 and len(fake.entries()) == 2


def test_unreachable_switch_fails_after_backoff(tmp_path: Path) -> None:
    fake = FakeSwitch().start()
    address = fake.address
    fake.stop()
    session = SwitchSession("s9", address, 9, pipeline(), connect_timeout=0.3, reconnect_timeout=0.5)
    with pytest.raises(ConnectionFailed, match=f"s9: no P4Runtime server at {address}"):
        session.read_entries(["spray_mode"])
    assert not session.status().reachable


def test_multicast_groups_are_owned_and_reconciled(fake: FakeSwitch, session: SwitchSession) -> None:
    from controller.entities import MulticastGroupEntry

    session.connect()
    group = MulticastGroupEntry(3, ((1, 0), (2, 0), (4, 0)))
    session.write([Update("INSERT", group), Update("INSERT", spray(1))])
    assert session.read_multicast_groups() == [group]
    assert session.reconcile() == [], "nothing lost, nothing written"
    fake.restart()
    assert session.read_multicast_groups() == [group]
    assert set(session.read_entries(["spray_mode"])) == {spray(1)}


def test_status_tells_backup_from_unreachable(fake: FakeSwitch, session: SwitchSession) -> None:
    session.connect()
    older = SwitchSession("s1", fake.address, 1, pipeline(), election_id=ElectionId(1, 1))
    status = older.status()
    older.close()
    assert (status.reachable, status.primary, status.pipeline_loaded) == (True, False, True)
    assert "another controller is primary" in status.detail
