"""The P4Info index: resolves names, aliases and unique name suffixes to P4Info objects."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

from google.protobuf import text_format
from p4.config.v1 import p4info_pb2

from controller.errors import SchemaError

T = TypeVar("T")


def _suffixes(name: str) -> list[str]:
    """Every dot-separated suffix of a name: 'a.b.c' -> ['a.b.c', 'b.c', 'c']."""
    parts = name.split(".")
    return [".".join(parts[i:]) for i in range(len(parts))]


class NameIndex(Generic[T]):
    """Objects of one kind, found by id, full name, alias or a unique suffix of the name."""

    def __init__(self, kind: str, items: list[tuple[int, str, str, T]]) -> None:
        self.kind = kind
        self._by_id: dict[int, T] = {}
        self._by_name: dict[str, T] = {}
        self._names: dict[int, str] = {}
        candidates: dict[str, list[T]] = {}
        for obj_id, name, alias, obj in items:
            self._by_id[obj_id] = obj
            self._names[obj_id] = name
            self._by_name[name] = obj
            keys = set(_suffixes(name)) | ({alias} if alias else set())
            for key in keys:
                candidates.setdefault(key, []).append(obj)
        self._by_suffix = {k: v[0] for k, v in candidates.items() if len(v) == 1}
        self._ambiguous = {k for k, v in candidates.items() if len(v) > 1}

    def __getitem__(self, name: str) -> T:
        if name in self._by_name:
            return self._by_name[name]
        if name in self._by_suffix:
            return self._by_suffix[name]
        if name in self._ambiguous:
            raise SchemaError(f"{self.kind} name {name!r} is ambiguous; use the full name")
        known = ", ".join(sorted(self._by_name)) or "none"
        raise SchemaError(f"no {self.kind} named {name!r} (known: {known})")

    def by_id(self, obj_id: int) -> T:
        try:
            return self._by_id[obj_id]
        except KeyError:
            raise SchemaError(f"no {self.kind} with id {obj_id:#x}") from None

    def name_of(self, obj_id: int) -> str:
        return self._names.get(obj_id, f"{self.kind}#{obj_id:#x}")

    def __iter__(self):
        return iter(self._by_id.values())

    def __len__(self) -> int:
        return len(self._by_id)


@dataclass(frozen=True)
class MatchFieldInfo:
    id: int
    name: str
    bitwidth: int
    match_type: str  # "exact", "lpm", "ternary", "range", "optional"


@dataclass(frozen=True)
class ParamInfo:
    id: int
    name: str
    bitwidth: int


@dataclass(frozen=True)
class ActionInfo:
    id: int
    name: str
    params: tuple[ParamInfo, ...]

    def param(self, name: str) -> ParamInfo:
        for p in self.params:  # a handful of parameters: a scan beats a dict here
            if p.name == name:
                return p
        raise SchemaError(
            f"action {self.name} has no parameter {name!r} (has: {', '.join(p.name for p in self.params) or 'none'})"
        )

    def param_by_id(self, param_id: int) -> ParamInfo:
        for p in self.params:
            if p.id == param_id:
                return p
        raise SchemaError(f"action {self.name} has no parameter id {param_id}")


@dataclass(frozen=True)
class TableInfo:
    id: int
    name: str
    match_fields: tuple[MatchFieldInfo, ...]
    action_ids: tuple[int, ...]
    default_only_action_ids: tuple[int, ...]
    direct_counter_id: int | None
    size: int

    @property
    def needs_priority(self) -> bool:
        """Tables with ternary, range or optional keys order their entries by priority."""
        return any(f.match_type in ("ternary", "range", "optional") for f in self.match_fields)

    def field(self, name: str) -> MatchFieldInfo:
        for f in self.match_fields:
            if f.name == name:
                return f
        matches = [f for f in self.match_fields if f.name == name or name in _suffixes(f.name)]
        if len(matches) == 1:
            return matches[0]
        known = ", ".join(f.name for f in self.match_fields)
        if not matches:
            raise SchemaError(f"table {self.name} has no match field {name!r} (has: {known})")
        raise SchemaError(f"match field {name!r} of table {self.name} is ambiguous (has: {known})")

    def field_by_id(self, field_id: int) -> MatchFieldInfo:
        for f in self.match_fields:
            if f.id == field_id:
                return f
        raise SchemaError(f"table {self.name} has no match field id {field_id}")


@dataclass(frozen=True)
class CounterInfo:
    id: int
    name: str
    size: int
    unit: str  # "bytes", "packets", "both"


@dataclass(frozen=True)
class DirectCounterInfo:
    id: int
    name: str
    table_id: int


_MATCH_TYPES = {
    p4info_pb2.MatchField.EXACT: "exact",
    p4info_pb2.MatchField.LPM: "lpm",
    p4info_pb2.MatchField.TERNARY: "ternary",
    p4info_pb2.MatchField.RANGE: "range",
    p4info_pb2.MatchField.OPTIONAL: "optional",
}
_UNITS = {
    p4info_pb2.CounterSpec.BYTES: "bytes",
    p4info_pb2.CounterSpec.PACKETS: "packets",
    p4info_pb2.CounterSpec.BOTH: "both",
}


class P4Schema:
    """Everything the controller needs to know of one P4 program, indexed by name and id."""

    def __init__(self, p4info: p4info_pb2.P4Info) -> None:
        self.p4info = p4info
        self.actions: NameIndex[ActionInfo] = NameIndex(
            "action",
            [
                (
                    a.preamble.id,
                    a.preamble.name,
                    a.preamble.alias,
                    ActionInfo(
                        a.preamble.id,
                        a.preamble.name,
                        tuple(ParamInfo(p.id, p.name, p.bitwidth) for p in a.params),
                    ),
                )
                for a in p4info.actions
            ],
        )
        tables = []
        for t in p4info.tables:
            default_only = tuple(
                r.id for r in t.action_refs if r.scope == p4info_pb2.ActionRef.DEFAULT_ONLY
            )
            direct = [
                i for i in t.direct_resource_ids if any(d.preamble.id == i for d in p4info.direct_counters)
            ]
            info = TableInfo(
                id=t.preamble.id,
                name=t.preamble.name,
                match_fields=tuple(
                    MatchFieldInfo(f.id, f.name, f.bitwidth, _MATCH_TYPES.get(f.match_type, "exact"))
                    for f in t.match_fields
                ),
                action_ids=tuple(r.id for r in t.action_refs),
                default_only_action_ids=default_only,
                direct_counter_id=direct[0] if direct else None,
                size=t.size,
            )
            tables.append((t.preamble.id, t.preamble.name, t.preamble.alias, info))
        self.tables: NameIndex[TableInfo] = NameIndex("table", tables)
        self.counters: NameIndex[CounterInfo] = NameIndex(
            "counter",
            [
                (
                    c.preamble.id,
                    c.preamble.name,
                    c.preamble.alias,
                    CounterInfo(c.preamble.id, c.preamble.name, c.size, _UNITS.get(c.spec.unit, "both")),
                )
                for c in p4info.counters
            ],
        )
        self.direct_counters: NameIndex[DirectCounterInfo] = NameIndex(
            "direct counter",
            [
                (
                    c.preamble.id,
                    c.preamble.name,
                    c.preamble.alias,
                    DirectCounterInfo(c.preamble.id, c.preamble.name, c.direct_table_id),
                )
                for c in p4info.direct_counters
            ],
        )

    @classmethod
    def from_text(cls, text: str) -> P4Schema:
        try:
            return cls(text_format.Parse(text, p4info_pb2.P4Info()))
        except text_format.ParseError as exc:
            raise SchemaError(f"P4Info text does not parse: {exc}") from exc

    @classmethod
    def load(cls, path: str | Path) -> P4Schema:
        """Read a P4Info file: text format (.txt, .txtpb, .pb.txt) or binary otherwise."""
        path = Path(path)
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise SchemaError(f"cannot read P4Info {path}: {exc.strerror}") from exc
        if path.suffix in (".txt", ".txtpb", ".txtproto") or path.name.endswith(".pb.txt"):
            try:
                return cls.from_text(data.decode())
            except SchemaError as exc:
                raise SchemaError(f"{path}: {exc}") from exc
        p4info = p4info_pb2.P4Info()
        p4info.ParseFromString(data)
        return cls(p4info)

    def table_action_check(self, table: TableInfo, action: ActionInfo, *, default: bool) -> None:
        """Raise unless the action may be used in the table (as an entry or as its default)."""
        if action.id not in table.action_ids:
            allowed = ", ".join(self.actions.name_of(i) for i in table.action_ids)
            raise SchemaError(f"action {action.name} is not an action of table {table.name} (allowed: {allowed})")
        if not default and action.id in table.default_only_action_ids:
            raise SchemaError(f"action {action.name} is default-only in table {table.name}")
