"""Immutable P4Runtime entities that encode to and decode from protobuf against a P4Schema.

Entities hold full P4Info names and canonical values, so two entries that mean the same
thing compare equal: that is what the policy diff relies on. Build them with
``TableEntry.build(schema, ...)``, which accepts names by unique suffix and values in
p4runtime-shell's syntax.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from p4.v1 import p4runtime_pb2

from controller.errors import EncodingError, SchemaError
from controller.schema import P4Schema
from controller.values import (
    Match,
    decode_int,
    decode_match,
    encode_int,
    encode_match_into,
    format_int,
    is_wildcard,
    parse_int,
    parse_match,
)

UpdateType = Literal["INSERT", "MODIFY", "DELETE"]
_UPDATE_TYPES = {
    "INSERT": p4runtime_pb2.Update.INSERT,
    "MODIFY": p4runtime_pb2.Update.MODIFY,
    "DELETE": p4runtime_pb2.Update.DELETE,
}


@dataclass(frozen=True)
class TableEntry:
    """One table entry, or a table's default entry (``is_default``; no match, no priority)."""

    table: str
    match: tuple[tuple[str, Match], ...] = ()
    action: str | None = None
    params: tuple[tuple[str, int], ...] = ()
    priority: int = 0
    is_default: bool = False

    @classmethod
    def build(
        cls,
        schema: P4Schema,
        table: str,
        match: Mapping[str, str | int | Match] | None = None,
        action: str | None = None,
        params: Mapping[str, str | int] | None = None,
        priority: int = 0,
        *,
        is_default: bool = False,
    ) -> TableEntry:
        info = schema.tables[table]
        fields: dict[int, tuple[str, Match]] = {}
        for name, spec in (match or {}).items():
            f = info.field(name)
            m = parse_match(spec, f.match_type, f.bitwidth, f"{info.name} match {f.name}")
            if not is_wildcard(m, f.bitwidth):
                fields[f.id] = (f.name, m)
        if is_default and fields:
            raise EncodingError(f"default entry of {info.name} cannot have match fields")
        for f in info.match_fields:
            if f.match_type == "exact" and f.id not in fields and not is_default:
                raise EncodingError(f"{info.name}: exact match field {f.name} needs a value")
        if info.needs_priority and not is_default and priority <= 0:
            raise EncodingError(f"{info.name}: entries need a priority > 0 (table has ternary/range keys)")
        if not info.needs_priority and priority:
            raise EncodingError(f"{info.name}: entries take no priority (exact/lpm keys only)")
        action_name = None
        param_values: list[tuple[str, int]] = []
        if action is not None:
            a = schema.actions[action]
            schema.table_action_check(info, a, default=is_default)
            action_name = a.name
            given = dict(params or {})
            for p in a.params:
                if p.name not in given:
                    raise EncodingError(f"{info.name} action {a.name}: parameter {p.name} is missing")
                param_values.append((p.name, parse_int(given.pop(p.name), p.bitwidth, f"{a.name} param {p.name}")))
            if given:
                raise SchemaError(f"action {a.name} has no parameter(s) {', '.join(sorted(given))}")
        elif not is_default:
            raise EncodingError(f"{info.name}: an entry needs an action")
        return cls(
            table=info.name,
            match=tuple(fields[k] for k in sorted(fields)),
            action=action_name,
            params=tuple(param_values),
            priority=priority,
            is_default=is_default,
        )

    @property
    def key(self) -> tuple:
        """What identifies the entry in its table (P4Runtime: match and priority)."""
        return (self.table, "default") if self.is_default else (self.table, self.match, self.priority)

    def encode(self, schema: P4Schema) -> p4runtime_pb2.Entity:
        entity = p4runtime_pb2.Entity()
        self.encode_into(entity, schema)
        return entity

    def encode_into(self, entity: p4runtime_pb2.Entity, schema: P4Schema) -> None:
        """Fill ``entity.table_entry`` in place."""
        info = schema.tables[self.table]
        te = entity.table_entry
        te.table_id = info.id
        if self.priority:
            te.priority = self.priority
        if self.is_default:
            te.is_default_action = True
        for name, m in self.match:
            f = info.field(name)
            encode_match_into(te.match.add(), f.id, m, f.bitwidth, name)
        if self.action is not None:
            a = schema.actions[self.action]
            action = te.action.action
            action.action_id = a.id
            for name, value in self.params:
                p = a.param(name)
                param = action.params.add()
                param.param_id = p.id
                param.value = encode_int(value, p.bitwidth, name)

    @classmethod
    def decode(cls, schema: P4Schema, entity: p4runtime_pb2.Entity | p4runtime_pb2.TableEntry) -> TableEntry:
        te = entity.table_entry if isinstance(entity, p4runtime_pb2.Entity) else entity
        info = schema.tables.by_id(te.table_id)
        fields = []
        for fm in sorted(te.match, key=lambda x: x.field_id):
            f = info.field_by_id(fm.field_id)
            m = decode_match(fm, f.bitwidth, f"{info.name} match {f.name}")
            if not is_wildcard(m, f.bitwidth):
                fields.append((f.name, m))
        action_name = None
        params: list[tuple[str, int]] = []
        if te.HasField("action") and te.action.WhichOneof("type") == "action":
            a = schema.actions.by_id(te.action.action.action_id)
            action_name = a.name
            got = {p.param_id: p.value for p in te.action.action.params}
            params = [(p.name, decode_int(got.get(p.id, b"\x00"), p.bitwidth, p.name)) for p in a.params]
        return cls(
            table=info.name,
            match=tuple(fields),
            action=action_name,
            params=tuple(params),
            priority=te.priority,
            is_default=te.is_default_action,
        )

    def text(self, schema: P4Schema) -> str:
        """One line in p4runtime-shell's value syntax."""
        info = schema.tables[self.table]
        parts = [self.table]
        if self.is_default:
            parts.append("default")
        for name, m in self.match:
            f = info.field(name)
            parts.append(f"{name}={m.text(f.bitwidth, name)}")
        if self.priority:
            parts.append(f"priority={self.priority}")
        if self.action:
            a = schema.actions[self.action]
            args = ", ".join(f"{n}={format_int(v, a.param(n).bitwidth, n)}" for n, v in self.params)
            parts.append(f"-> {self.action}({args})")
        return " ".join(parts)


@dataclass(frozen=True)
class CounterEntry:
    """An indexed counter cell (``index`` None in a read request means every cell)."""

    counter: str
    index: int | None = None
    packets: int = 0
    bytes: int = 0

    def encode(self, schema: P4Schema) -> p4runtime_pb2.Entity:
        info = schema.counters[self.counter]
        ce = p4runtime_pb2.CounterEntry(counter_id=info.id)
        if self.index is not None:
            if not 0 <= self.index < info.size:
                raise EncodingError(f"counter {info.name}: index {self.index} is not in 0..{info.size - 1}")
            ce.index.index = self.index
        return p4runtime_pb2.Entity(counter_entry=ce)

    @classmethod
    def decode(cls, schema: P4Schema, entity: p4runtime_pb2.Entity) -> CounterEntry:
        ce = entity.counter_entry
        return cls(
            counter=schema.counters.by_id(ce.counter_id).name,
            index=ce.index.index,
            packets=ce.data.packet_count,
            bytes=ce.data.byte_count,
        )


@dataclass(frozen=True)
class DirectCounterEntry:
    """The direct counter of one table entry (``entry`` None in a read means every entry)."""

    counter: str
    entry: TableEntry | None = None
    packets: int = 0
    bytes: int = 0

    def encode(self, schema: P4Schema) -> p4runtime_pb2.Entity:
        info = schema.direct_counters[self.counter]
        dc = p4runtime_pb2.DirectCounterEntry()
        if self.entry is not None:
            dc.table_entry.CopyFrom(self.entry.encode(schema).table_entry)
        else:
            dc.table_entry.table_id = info.table_id
        return p4runtime_pb2.Entity(direct_counter_entry=dc)

    @classmethod
    def decode(cls, schema: P4Schema, entity: p4runtime_pb2.Entity) -> DirectCounterEntry:
        dc = entity.direct_counter_entry
        table = schema.tables.by_id(dc.table_entry.table_id)
        if table.direct_counter_id is None:
            raise SchemaError(f"table {table.name} has no direct counter")
        return cls(
            counter=schema.direct_counters.by_id(table.direct_counter_id).name,
            entry=TableEntry.decode(schema, dc.table_entry),
            packets=dc.data.packet_count,
            bytes=dc.data.byte_count,
        )


@dataclass(frozen=True)
class MulticastGroupEntry:
    """A multicast group of the packet replication engine: (egress port, instance) replicas."""

    group_id: int
    replicas: tuple[tuple[int, int], ...] = ()

    @property
    def key(self) -> tuple:
        return ("multicast", self.group_id)

    def encode(self, schema: P4Schema | None = None) -> p4runtime_pb2.Entity:
        entity = p4runtime_pb2.Entity()
        self.encode_into(entity, schema)
        return entity

    def encode_into(self, entity: p4runtime_pb2.Entity, schema: P4Schema | None = None) -> None:
        group = entity.packet_replication_engine_entry.multicast_group_entry
        group.multicast_group_id = self.group_id
        for port, instance in self.replicas:
            group.replicas.add(egress_port=port, instance=instance)

    @classmethod
    def decode(cls, schema: P4Schema | None, entity: p4runtime_pb2.Entity) -> MulticastGroupEntry:
        group = entity.packet_replication_engine_entry.multicast_group_entry
        return cls(group.multicast_group_id, tuple((r.egress_port, r.instance) for r in group.replicas))


@dataclass(frozen=True)
class PacketOut:
    """A packet sent from the controller through the switch's CPU port."""

    payload: bytes
    metadata: tuple[tuple[str, int], ...] = field(default=())

    def encode(self, schema: P4Schema) -> p4runtime_pb2.PacketOut:
        packet = p4runtime_pb2.PacketOut(payload=self.payload)
        header = next((h for h in schema.p4info.controller_packet_metadata if h.preamble.name == "packet_out"), None)
        if self.metadata and header is None:
            raise SchemaError("the program has no packet_out controller header")
        for name, value in self.metadata:
            assert header is not None
            meta = next((m for m in header.metadata if m.name == name), None)
            if meta is None:
                raise SchemaError(f"packet_out header has no field {name!r}")
            packet.metadata.add(
                metadata_id=meta.id, value=encode_int(parse_int(value, meta.bitwidth, name), meta.bitwidth, name)
            )
        return packet


Entity = TableEntry | MulticastGroupEntry


@dataclass(frozen=True)
class Update:
    """One write: insert, modify or delete an entity."""

    type: UpdateType
    entity: Entity

    def encode(self, schema: P4Schema) -> p4runtime_pb2.Update:
        update = p4runtime_pb2.Update()
        self.encode_into(update, schema)
        return update

    def encode_into(self, update: p4runtime_pb2.Update, schema: P4Schema) -> None:
        update.type = _UPDATE_TYPES[self.type]
        self.entity.encode_into(update.entity, schema)

    def describe(self, schema: P4Schema) -> str:
        if isinstance(self.entity, TableEntry):
            return f"{self.type} {self.entity.text(schema)}"
        return f"{self.type} multicast group {self.entity.group_id}"


def decode_entity(schema: P4Schema, entity: p4runtime_pb2.Entity) -> Entity:
    kind = entity.WhichOneof("entity")
    if kind == "table_entry":
        return TableEntry.decode(schema, entity)
    if kind == "packet_replication_engine_entry":
        return MulticastGroupEntry.decode(schema, entity)
    raise EncodingError(f"unsupported entity kind {kind}")
