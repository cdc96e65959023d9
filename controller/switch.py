"""One switch's session: connect and arbitrate, keep the pipeline loaded, write and read
entities, and reconcile after a restart (the pipeline, the baseline entries such as the
fabric's routes, and every entry this session owns are put back, and said so in ``restored``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from p4.v1 import p4runtime_pb2

from controller.arbitration import ElectionId
from controller.counter_wire import counter_cells
from controller.diff import compute_diff
from controller.entities import (
    CounterEntry,
    DirectCounterEntry,
    Entity,
    MulticastGroupEntry,
    PacketOut,
    TableEntry,
    Update,
    decode_entity,
)
from controller.errors import ArbitrationRefused, ConnectionFailed, NotPrimary
from controller.pipeline import Pipeline
from controller.request_log import RequestLog
from controller.schema import P4Schema
from controller.transport import Transport

T = TypeVar("T")

#: Updates per Write request: large enough to amortise the RPC, small enough for gRPC limits.
BATCH_SIZE = 2000


@dataclass(frozen=True)
class SwitchStatus:
    name: str
    address: str
    reachable: bool
    primary: bool
    pipeline_loaded: bool
    detail: str = ""


class SwitchSession:
    """A P4Runtime session with one switch; many may exist side by side."""

    def __init__(
        self,
        name: str,
        address: str,
        device_id: int,
        pipeline: Pipeline,
        *,
        election_id: ElectionId | None = None,
        request_log: str | None = None,
        connect_timeout: float = 5.0,
        reconnect_timeout: float = 20.0,
    ) -> None:
        self.name = name
        self.address = address
        self.device_id = device_id
        self.pipeline = pipeline
        self.election_id = election_id or ElectionId.new()
        self.transport = Transport(name, address, device_id, RequestLog(request_log))
        self.connect_timeout = connect_timeout
        self.reconnect_timeout = reconnect_timeout
        #: What this session wants on the switch, by entity key: restored by reconcile().
        self.owned: dict[tuple, Entity] = {}
        self.connected = False
        self.pipeline_pushes = 0
        #: Whether (re)connecting loads the pipeline when the switch lacks it (reads only: False).
        self.load_pipeline = True
        #: Entries the switch holds whatever this session writes (the fabric's routes): restored
        #: with the owned ones after a reconnect, by a session that loads the pipeline.
        self.baseline: list[Entity] = []
        #: What reconnects put back, one line each (read and cleared by the caller).
        self.restored: list[str] = []
        self.reconnects = 0
        self._pushed = False

    @property
    def schema(self) -> P4Schema:
        return self.pipeline.schema

    # -- lifecycle ------------------------------------------------------------------------
    def connect(self, *, load_pipeline: bool | None = None) -> None:
        """Connect, become primary and (unless told not to) make sure the pipeline is ours."""
        primary = self.transport.open(self.election_id, timeout=self.connect_timeout)
        if not primary:
            self.transport.close()
            raise NotPrimary(
                f"{self.name}: not primary at {self.address} (another controller holds a higher election id)"
            )
        self.connected = True
        self._pushed = False
        if self.load_pipeline if load_pipeline is None else load_pipeline:
            self._pushed = self.ensure_pipeline()

    def claim(self) -> None:
        """Be primary on the switch now (connecting if needed); raises NotPrimary when another
        controller has taken it over."""
        self._with_reconnect(lambda: None)
        if not self.transport.primary:
            raise NotPrimary(f"{self.name}: another controller has taken over {self.address} (higher election id)")

    def close(self) -> None:
        self.transport.close()
        self.connected = False

    def __enter__(self) -> SwitchSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def pipeline_loaded(self) -> bool:
        loaded = self.transport.get_pipeline(p4runtime_pb2.GetForwardingPipelineConfigRequest.P4INFO_AND_COOKIE)
        return self.pipeline.matches(loaded)

    def ensure_pipeline(self) -> bool:
        """Load our pipeline unless the switch already runs it; returns whether it was pushed."""
        if self.pipeline_loaded():
            return False
        self.transport.set_pipeline(self.pipeline.config())
        self.pipeline_pushes += 1
        return True

    def reconnect(self) -> None:
        """Reconnect with exponential backoff (0.1 s doubling to 2 s) until reconnect_timeout."""
        self.close()
        deadline = time.monotonic() + self.reconnect_timeout
        delay = 0.1
        while True:
            try:
                self.connect()
                break
            except (ArbitrationRefused, NotPrimary):
                raise
            except ConnectionFailed:
                if time.monotonic() + delay > deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 2.0)
        self.reconnects += 1
        self._restore()

    def _restore(self, first: bool = False) -> None:
        """Reconcile after a (re)connect and note what was put back; the baseline only after a
        reconnect (on a first connect it is the caller's to write, and to report)."""
        updates = self.reconcile(with_baseline=not first)
        if updates or (self._pushed and not first):
            tables = sorted({u.entity.table for u in updates if isinstance(u.entity, TableEntry)})
            what = f"{len(updates)} update(s)" + (f" to {', '.join(tables)}" if tables else "")
            if first:
                self.restored.append(f"{self.name}: {'pipeline loaded, ' if self._pushed else ''}{what} restored")
            else:
                pipeline = "pipeline reloaded, " if self._pushed else ""
                self.restored.append(f"{self.name}: switch lost its state (restarted?): {pipeline}{what} restored")

    def intended(self, with_baseline: bool = True) -> list[Entity]:
        """What the switch should hold: the baseline (when this session maintains the switch),
        overridden by what this session owns."""
        wanted = {e.key: e for e in self.baseline} if self.load_pipeline and with_baseline else {}
        wanted.update(self.owned)
        return list(wanted.values())

    def reconcile(self, with_baseline: bool = True) -> list[Update]:
        """Put back every intended entry the switch lost (and remove strays in those tables)."""
        intended = self.intended(with_baseline)
        tables = frozenset(e.table for e in intended if isinstance(e, TableEntry))
        actual = self._read_tables(tables) + self._read_defaults(intended)
        if any(isinstance(e, MulticastGroupEntry) for e in intended):
            actual += self._read_multicast()
        updates = compute_diff(intended, actual)
        self._write(updates)
        return updates

    def _with_reconnect(self, operation: Callable[[], T]) -> T:
        """Run an operation; a lost session (switch restarted) is reconnected, reconciled and retried once."""
        if not self.connected:
            self.connect()
            if self.owned:
                self._restore(first=True)
        elif not self.transport.stream_open:
            self.reconnect()
        try:
            return operation()
        except ConnectionFailed:
            self.reconnect()
            return operation()

    def status(self) -> SwitchStatus:
        """Reachable, primary and pipeline loaded; never raises for an unreachable switch."""
        try:
            if not (self.connected and self.transport.stream_open):
                self.close()
                self.connected = self.transport.open(self.election_id, timeout=self.connect_timeout)
            primary = self.transport.primary
            loaded = self.pipeline_loaded()
        except ConnectionFailed as exc:
            return SwitchStatus(self.name, self.address, False, False, False, str(exc))
        detail = "" if primary else "another controller is primary"
        return SwitchStatus(self.name, self.address, True, primary, loaded, detail)

    # -- writes ---------------------------------------------------------------------------
    def _write(self, updates: Sequence[Update]) -> None:
        for start in range(0, len(updates), BATCH_SIZE):
            batch = updates[start : start + BATCH_SIZE]
            request = p4runtime_pb2.WriteRequest()
            for u in batch:
                u.encode_into(request.updates.add(), self.schema)
            self.transport.write(request, lambda i, b=batch: b[i].describe(self.schema))
            for u in batch:
                if u.type == "DELETE":
                    self.owned.pop(u.entity.key, None)
                else:
                    self.owned[u.entity.key] = u.entity

    def write(self, updates: Sequence[Update]) -> None:
        """Write updates in batches; what succeeded becomes owned (deleted: disowned)."""
        if updates:
            self._with_reconnect(lambda: self._write(updates))

    def write_plan(self, plan: Sequence[Update], desired: Iterable[Entity], tables: frozenset[str]) -> list[Update]:
        """Write ``plan`` (the updates from ``tables`` as read before to ``desired``); when the
        switch restarted meanwhile, the plan is made again from what it holds now."""
        desired = list(desired)
        reconnects = self.reconnects

        def run() -> list[Update]:
            updates = list(plan)
            if self.reconnects != reconnects:
                actual = self._read_tables(tables) + self._read_defaults(desired)
                updates = compute_diff(desired, actual, tables)
            self._write(updates)
            return updates

        return self._with_reconnect(run)

    def sync(self, desired: Iterable[Entity], tables: frozenset[str]) -> list[Update]:
        """Make ``tables`` hold exactly ``desired``; returns the updates written (none if equal)."""
        desired = list(desired)

        def run() -> list[Update]:
            actual = self._read_tables(tables) + self._read_defaults(desired)
            updates = compute_diff(desired, actual, tables)
            self._write(updates)
            return updates

        updates = self._with_reconnect(run)
        for key in [k for k, e in self.owned.items() if isinstance(e, TableEntry) and e.table in tables]:
            del self.owned[key]
        self.owned.update((e.key, e) for e in desired)
        return updates

    # -- reads ----------------------------------------------------------------------------
    def _read_tables(self, tables: Iterable[str]) -> list[Entity]:
        requests = [
            p4runtime_pb2.Entity(table_entry=p4runtime_pb2.TableEntry(table_id=self.schema.tables[t].id))
            for t in sorted(tables)
        ]
        if not requests:
            return []
        found = self.transport.read(requests, ", ".join(sorted(tables)))
        return [decode_entity(self.schema, e) for e in found]

    def _read_defaults(self, entities: Iterable[Entity]) -> list[Entity]:
        tables = sorted({e.table for e in entities if isinstance(e, TableEntry) and e.is_default})
        found: list[Entity] = []
        for t in tables:
            request = p4runtime_pb2.Entity(
                table_entry=p4runtime_pb2.TableEntry(table_id=self.schema.tables[t].id, is_default_action=True)
            )
            found += [decode_entity(self.schema, e) for e in self.transport.read([request], f"{t} default")]
        return found

    def snapshot(self, tables: frozenset[str], defaults_of: Iterable[Entity] = ()) -> list[Entity]:
        """Entries of ``tables`` plus the default entries of the tables ``defaults_of`` sets."""
        defaults_of = list(defaults_of)
        return self._with_reconnect(lambda: self._read_tables(tables) + self._read_defaults(defaults_of))

    def _read_multicast(self) -> list[Entity]:
        request = MulticastGroupEntry(0).encode()
        return [decode_entity(self.schema, e) for e in self.transport.read([request], "multicast groups")]

    def read_multicast_groups(self) -> list[MulticastGroupEntry]:
        return [e for e in self._with_reconnect(self._read_multicast) if isinstance(e, MulticastGroupEntry)]

    def send_packet(self, packet: PacketOut) -> None:
        """Send a packet out of the switch's CPU port (metadata per the program's packet_out header)."""
        encoded = packet.encode(self.schema)
        self._with_reconnect(lambda: self.transport.send_packet(encoded))

    def read_entries(self, tables: Iterable[str] | None = None) -> list[TableEntry]:
        """Entries of the given tables (names resolve by suffix), or of every table."""
        names = [self.schema.tables[t].name for t in tables] if tables else [t.name for t in self.schema.tables]
        return [e for e in self._with_reconnect(lambda: self._read_tables(names)) if isinstance(e, TableEntry)]

    def read_default(self, table: str) -> TableEntry:
        """The default entry of a table (name resolves by suffix)."""
        probe = TableEntry(self.schema.tables[table].name, is_default=True)
        found = self._with_reconnect(lambda: self._read_defaults([probe]))
        return next(e for e in found if isinstance(e, TableEntry))

    def read_counter(self, counter: str, indices: Iterable[int] | None = None, *,
                     skip_zero: bool = False) -> list[CounterEntry]:
        """Cells of an indexed counter: the given indices (one request), or every cell;
        ``skip_zero`` leaves out cells with no packets and no bytes.

        The replies are decoded from their bytes (:mod:`controller.counter_wire`), not parsed
        into protobuf messages: a whole counter of thousands of cells costs a few ms, not tenths of s."""
        name = self.schema.counters[counter].name
        cells: list[int | None] = [None] if indices is None else list(indices)
        requests = [CounterEntry(name, i).encode(self.schema) for i in cells]
        if not requests:
            return []
        replies = self._with_reconnect(lambda: self.transport.read_raw(requests, f"counter {name}"))
        by_id = self.schema.counters.by_id
        names: dict[int, str] = {}
        out = []
        for reply in replies:
            for counter_id, index, packets, nbytes in counter_cells(reply, skip_zero=skip_zero,
                                                                    where=f"{self.name}: Read counter {name}"):
                cell_counter = names.get(counter_id)
                if cell_counter is None:
                    cell_counter = names[counter_id] = by_id(counter_id).name
                out.append(CounterEntry(cell_counter, index, packets, nbytes))
        return out

    def read_direct_counters(self, counter: str) -> list[DirectCounterEntry]:
        request = DirectCounterEntry(self.schema.direct_counters[counter].name).encode(self.schema)
        found = self._with_reconnect(lambda: self.transport.read([request], f"direct counter {counter}"))
        return [DirectCounterEntry.decode(self.schema, e) for e in found]
