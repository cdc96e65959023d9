"""Many switches at once: connect, read, and apply desired state all or nothing.

Writers exclude each other by election id: an apply first becomes primary on every switch
it will touch, so a controller started later (a higher id) fences it out everywhere before
reading, and a fenced-out apply neither writes nor rolls back where it lost the switch. A
switch that restarts during an apply gets its whole intended state back (pipeline, the
fabric's routes, the entries being applied), and the result says so.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from controller.arbitration import ElectionId
from controller.diff import compute_diff
from controller.entities import Entity, Update
from controller.errors import ControllerError, FabricRoutingError, NotPrimary
from controller.pipeline import Pipeline
from controller.switch import SwitchSession, SwitchStatus
from gradfabric.fabric import Fabric, Switch

T = TypeVar("T")


def controller_log_path(fabric: Fabric, switch: Switch) -> Path:
    """The controller's request log of a switch: ``<name>-controller.log`` beside the switch's own
    P4Runtime log (``request_log`` in the fabric description, written by the switch itself)."""
    return fabric.path(switch.request_log).with_name(f"{switch.name}-controller.log")


class ApplyFailed(ControllerError):
    """A write refused on one switch; what had been written was rolled back."""

    def __init__(self, cause: ControllerError, rolled_back: list[str], rollback_errors: list[str],
                 superseded: list[str] | None = None, restored: list[str] | None = None) -> None:
        self.cause = cause
        self.rolled_back = rolled_back
        self.rollback_errors = rollback_errors
        self.superseded = superseded or []
        self.restored = restored or []
        text = f"{cause}; nothing applied (rolled back: {', '.join(rolled_back) or 'nothing to undo'})"
        if self.superseded:
            text = (f"{cause}; another controller took over {', '.join(self.superseded)}: its writes stand there "
                    f"(rolled back elsewhere: {', '.join(rolled_back) or 'nothing to undo'})")
        if rollback_errors:
            text = f"{cause}; ROLLBACK INCOMPLETE: " + "; ".join(rollback_errors)
        if self.restored:
            text += "; " + "; ".join(self.restored)
        super().__init__(text)


@dataclass(frozen=True)
class ApplyResult:
    """Updates written per switch (empty lists when the fabric already matched)."""

    updates: dict[str, list[Update]]
    #: What switches that lost their state (restarted) were given back, one line each.
    restored: tuple[str, ...] = ()

    @property
    def total(self) -> int:
        return sum(len(u) for u in self.updates.values())


class FabricController:
    """Sessions with every switch of a fabric; one election id for the whole controller."""

    def __init__(self, sessions: Iterable[SwitchSession]) -> None:
        self.sessions: dict[str, SwitchSession] = {s.name: s for s in sessions}

    @classmethod
    def for_fabric(
        cls, fabric: Fabric, pipeline: Pipeline, *, connect_timeout: float = 5.0, request_logs: bool = True
    ) -> FabricController:
        election_id = ElectionId.new()
        controller = cls(
            SwitchSession(
                sw.name,
                sw.grpc_addr,
                sw.device_id,
                pipeline,
                election_id=election_id,
                request_log=str(controller_log_path(fabric, sw)) if request_logs and sw.request_log else None,
                connect_timeout=connect_timeout,
            )
            for sw in fabric.switches
        )
        from controller.routing import route_entries

        try:
            routes = route_entries(fabric, pipeline.schema)
        except FabricRoutingError:
            routes = {}  # a fabric without routes: nothing to restore but what is written
        for name, entries in routes.items():
            controller.sessions[name].baseline = list(entries)
        return controller

    def __getitem__(self, name: str) -> SwitchSession:
        try:
            return self.sessions[name]
        except KeyError:
            raise ControllerError(f"no switch named {name!r} (fabric has: {', '.join(self.sessions)})") from None

    def close(self) -> None:
        for session in self.sessions.values():
            session.close()

    def __enter__(self) -> FabricController:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def status(self) -> list[SwitchStatus]:
        """Every switch's status, probed in parallel (a dead switch costs one timeout, not one each)."""
        return self.each(lambda session: session.status())

    def each(self, work: Callable[[SwitchSession], T], names: Iterable[str] | None = None) -> list[T]:
        """``work(session)`` for every named switch (default all), in parallel, in fabric order."""
        sessions = [self[n] for n in names] if names is not None else list(self.sessions.values())
        if not sessions:
            return []
        with ThreadPoolExecutor(max_workers=len(sessions), thread_name_prefix="switch") as pool:
            return list(pool.map(work, sessions))

    def apply(self, desired: Mapping[str, list[Entity]], tables: frozenset[str]) -> ApplyResult:
        """Make ``tables`` on every listed switch hold exactly ``desired``, or change nothing.

        Each switch is read first (a snapshot); the diffs are written switch by switch; when
        a switch refuses, every switch touched so far is written back to its snapshot.
        """
        for name in desired:
            self[name].claim()  # primary everywhere first: a concurrent apply is fenced out before we read
        snapshots: dict[str, list[Entity]] = {}
        plans: dict[str, list[Update]] = {}
        for name, entities in desired.items():
            session = self[name]
            snapshot = session.snapshot(tables, entities)
            snapshots[name] = snapshot
            plans[name] = compute_diff(entities, snapshot, tables)
        touched: list[str] = []
        for name, updates in plans.items():
            if not updates:
                continue
            touched.append(name)
            try:
                plans[name] = self[name].write_plan(updates, desired[name], tables)
            except ControllerError as exc:
                raise self._rollback(exc, touched, snapshots, tables) from exc
        for name, entities in desired.items():
            owned = self[name].owned
            for key in [k for k, e in owned.items() if getattr(e, "table", None) in tables]:
                del owned[key]
            owned.update((e.key, e) for e in entities)
        for name in desired:  # a switch that restarted after its writes gets them back now
            session = self[name]
            if session.connected and not session.transport.stream_open:
                session.reconnect()
        return ApplyResult(plans, self._drain_restored())

    def _drain_restored(self) -> tuple[str, ...]:
        lines: list[str] = []
        for session in self.sessions.values():
            lines += session.restored
            session.restored = []
        return tuple(lines)

    def _rollback(
        self, cause: ControllerError, touched: list[str], snapshots: dict[str, list[Entity]], tables: frozenset[str]
    ) -> ApplyFailed:
        rolled_back, errors, superseded = [], [], []
        for name in reversed(touched):
            session = self[name]
            try:
                now = session.snapshot(tables, snapshots[name])
                undo = compute_diff(snapshots[name], now, tables)
                session.write(undo)
                rolled_back.append(f"{name} ({len(undo)} update(s))")
            except NotPrimary:
                superseded.append(name)  # what is there now is the other controller's: leave it
            except ControllerError as exc:
                errors.append(f"{name}: {exc}")
        if isinstance(cause, NotPrimary):
            superseded += [n for n in self.sessions if n not in touched and n in str(cause).split(":")[0]]
        return ApplyFailed(cause, rolled_back, errors, superseded, list(self._drain_restored()))
