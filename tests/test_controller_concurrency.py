"""Two controllers applying at once, and switches restarting during an apply, against the
embedded P4Runtime server running the DLCP program (in-process, loopback, no namespaces)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from controller.entities import TableEntry
from controller.errors import ControllerError
from controller.fabric_controller import ApplyFailed, FabricController
from controller.pipeline import Pipeline
from controller.policy import POLICY_TABLES
from controller.routing import ROUTE_TABLES, route_entries
from controller.schema import P4Schema
from gradfabric.fabric import Fabric
from gradfabric.paths import ROOT
from p4switch.device_config import device_config_bytes
from p4switch.frontend import load_program
from p4switch.p4info import build_p4info
from p4switch.server import P4RuntimeServer
from tests.controller_helpers import leaf_spine

_PROGRAM = load_program(ROOT / "p4src" / "dlcp.p4")
PIPELINE = Pipeline(P4Schema(build_p4info(_PROGRAM)), device_config_bytes(_PROGRAM))
S = PIPELINE.schema
SPRAY = "DlcpIngress.spray_mode"
LPM = "DlcpIngress.ipv4_lpm"


@dataclass
class Target:
    lock: threading.RLock = field(default_factory=threading.RLock)

    def install(self, pipeline: Any) -> None:
        pass

    def packet_out(self, frame: bytes) -> None:
        pass


class Switches:
    """Embedded P4Runtime servers (device ids 1..n) that can be restarted with their state lost."""

    def __init__(self, count: int) -> None:
        self.servers = [self._start(i + 1, "127.0.0.1:0") for i in range(count)]

    @staticmethod
    def _start(device_id: int, address: str) -> P4RuntimeServer:
        server = P4RuntimeServer(Target(), device_id, address)
        server.start()
        return server

    def restart(self, index: int) -> None:
        old = self.servers[index]
        old.stop(0)
        self.servers[index] = self._start(index + 1, old.address)

    def entries(self, index: int, table: str) -> list[Any]:
        store = self.servers[index].servicer.store
        return [] if store is None else store.pipeline.tables[table].entries()

    def stop(self) -> None:
        for server in self.servers:
            server.stop(0)


@pytest.fixture
def bed(tmp_path: Path) -> Iterator[tuple[Switches, Fabric]]:
    switches = Switches(2)
    fabric = leaf_spine(leaves=1, spines=1, hosts_per_leaf=2, addrs=[s.address for s in switches.servers])
    yield switches, fabric
    switches.stop()


def controller(fabric: Fabric) -> FabricController:
    made = FabricController.for_fabric(fabric, PIPELINE, connect_timeout=3, request_logs=False)
    for session in made.sessions.values():
        session.reconnect_timeout = 5
    return made


def policy(action: str) -> dict[str, list[TableEntry]]:
    entries = [TableEntry.build(S, "spray_mode", {"job_id": job}, action) for job in (1, 2, 3)]
    return {"s1": entries, "s2": entries}


def spray_actions(switches: Switches) -> set[str]:
    return {e.action for i in range(2) for e in switches.entries(i, SPRAY)}


def before_first_write(session: Any, hook: Callable[[], None]) -> None:
    """Run ``hook`` once, just before the session's next Write request goes out."""
    transport = session.transport
    original = transport.write

    def write(*args: Any, **kwargs: Any) -> Any:
        transport.write = original
        hook()
        return original(*args, **kwargs)

    transport.write = write


def test_a_preempted_controller_writes_nothing(bed: tuple[Switches, Fabric]) -> None:
    switches, fabric = bed
    first = controller(fabric)
    first.apply(policy("DlcpIngress.spray_random"), POLICY_TABLES)
    with controller(fabric) as second:  # started later: a higher election id
        second.apply(policy("DlcpIngress.spray_round_robin"), POLICY_TABLES)
    with pytest.raises(ControllerError):
        first.apply(policy("DlcpIngress.flow_hash"), POLICY_TABLES)
    first.close()
    assert spray_actions(switches) == {"DlcpIngress.spray_round_robin"}


def test_a_rollback_never_undoes_another_controllers_writes(bed: tuple[Switches, Fabric]) -> None:
    switches, fabric = bed
    first = controller(fabric)
    first.apply(policy("DlcpIngress.spray_random"), POLICY_TABLES)

    def second_run() -> None:  # a second apply, whole, between the first run's two switches
        with controller(fabric) as second:
            second.apply(policy("DlcpIngress.spray_round_robin"), POLICY_TABLES)

    before_first_write(first["s2"], second_run)
    with pytest.raises(ApplyFailed) as failed:
        first.apply(policy("DlcpIngress.flow_hash"), POLICY_TABLES)
    first.close()
    assert spray_actions(switches) == {"DlcpIngress.spray_round_robin"}
    assert "another controller took over" in str(failed.value)


def test_a_switch_restarted_during_apply_gets_its_whole_state_back(bed: tuple[Switches, Fabric]) -> None:
    switches, fabric = bed
    with controller(fabric) as routes:  # `gradfabric routes`, earlier and in another process
        routes.apply(route_entries(fabric, S), ROUTE_TABLES)
    expected_routes = len(switches.entries(1, LPM))
    assert expected_routes > 0
    with controller(fabric) as run:  # `gradfabric policy apply`
        before_first_write(run["s2"], lambda: switches.restart(1))
        result = run.apply(policy("DlcpIngress.spray_random"), POLICY_TABLES)
    assert len(switches.entries(1, LPM)) == expected_routes
    assert spray_actions(switches) == {"DlcpIngress.spray_random"}
    assert len(switches.entries(1, SPRAY)) == 3
    assert any(line.startswith("s2: switch lost its state") and "pipeline reloaded" in line
               for line in result.restored), result.restored
