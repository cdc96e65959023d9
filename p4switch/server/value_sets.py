"""Parser value sets over P4Runtime (``ValueSetEntry``), against the pipeline's
:class:`~p4switch.externs.ValueSet`.

A value set is written whole: only MODIFY, which replaces every member (an empty list clears
the set); INSERT and DELETE are INVALID_ARGUMENT, as the specification says. Members match
the set's fields by P4Info match field id; a ternary, LPM or range field left out is a
wildcard, an exact one may not be left out. More members than the set's size:
RESOURCE_EXHAUSTED.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
from p4.v1 import p4runtime_pb2

from p4switch.externs import ValueSet, ValueSetError
from p4switch.server import codec
from p4switch.server.errors import RpcError, invalid, not_found
from p4switch.server.schema import MatchFieldInfo, Schema, ValueSetInfo

MODIFY = p4runtime_pb2.Update.MODIFY


class ValueSetEntities:
    """The value sets of one pipeline seen through one P4Info."""

    def __init__(self, schema: Schema, pipeline: Any) -> None:
        self.schema = schema
        self.pipeline = pipeline

    def _value_set(self, value_set_id: int) -> tuple[ValueSetInfo, ValueSet]:
        info = self.schema.value_sets.get(value_set_id)
        if info is None:
            raise not_found(f"unknown value set id {value_set_id}")
        found = getattr(self.pipeline, "value_sets", {}).get(info.name)
        if found is None:
            raise RpcError(grpc.StatusCode.INTERNAL, f"value set {info.name} is in the P4Info but not in the pipeline")
        if len(found.fields) != len(info.match_fields):
            raise RpcError(grpc.StatusCode.INTERNAL, f"value set {info.name}: P4Info fields do not match the program")
        return info, found

    def write(self, kind: int, msg: p4runtime_pb2.ValueSetEntry) -> None:
        info, value_set = self._value_set(msg.value_set_id)
        if kind != MODIFY:
            raise invalid(f"value set {info.name}: value sets are written with MODIFY only (the whole set)")
        if len(msg.members) > info.size:
            raise RpcError(grpc.StatusCode.RESOURCE_EXHAUSTED,
                           f"value set {info.name}: {len(msg.members)} members, the set holds {info.size}")
        staged = ValueSet(value_set.name, value_set.fields, value_set.size)
        try:
            for member in msg.members:
                staged.add(self._member(info, member))
        except ValueSetError as exc:
            raise invalid(str(exc)) from exc
        value_set.replace(staged.members)  # all or nothing

    @staticmethod
    def _member(info: ValueSetInfo, member: p4runtime_pb2.ValueSetMember) -> tuple:
        given: dict[int, tuple[str | None, bytes, Any]] = {}
        for fm in member.match:
            field_id, kind, first, second = codec.match_values(fm)
            if field_id not in info.match_fields:
                raise invalid(f"value set {info.name}: unknown match field id {field_id}")
            if field_id in given:
                raise invalid(f"value set {info.name}: match field {field_id} given twice")
            given[field_id] = (kind, first, second)
        items: list[Any] = []
        for field_id, field in info.match_fields.items():
            items.append(_item(info, field, given.get(field_id)))
        return tuple(items)

    def read(self, query: p4runtime_pb2.ValueSetEntry) -> Iterator[p4runtime_pb2.Entity]:
        ids = [query.value_set_id] if query.value_set_id else sorted(self.schema.value_sets)
        for value_set_id in ids:
            info, value_set = self._value_set(value_set_id)
            msg = p4runtime_pb2.ValueSetEntry(value_set_id=info.id)
            for stored in value_set.members:
                member = msg.members.add()
                for (field_id, field), (a, b) in zip(info.match_fields.items(), stored):
                    _encode(member, field_id, field, a, b)
            yield p4runtime_pb2.Entity(value_set_entry=msg)


def _item(info: ValueSetInfo, field: MatchFieldInfo, given: tuple[str | None, bytes, Any] | None) -> Any:
    """The :meth:`ValueSet.add` item of one field: a value, (value, mask) or (low, high)."""
    width, kind = field.bitwidth, field.match_kind
    top = (1 << width) - 1
    what = f"value set {info.name} field {field.name}"
    if given is None:
        if kind == "exact":
            raise invalid(f"{what}: an exact field cannot be left out")
        return (0, top) if kind == "range" else (0, 0)
    given_kind, first, second = given
    if given_kind != kind:
        raise invalid(f"{what} is {kind}, got a {given_kind} match")
    if kind == "exact":
        return codec.to_int(first, width, what)
    if kind == "lpm":
        if not 0 <= second <= width:
            raise invalid(f"{what}: prefix length {second} out of 0..{width}")
        mask = top ^ ((1 << (width - second)) - 1)
        value = codec.to_int(first, width, what)
        if value & ~mask:
            raise invalid(f"{what}: value {value:#x} has bits set beyond /{second}")
        return (value, mask)
    if kind in ("ternary", "range"):
        a, b = codec.to_int(first, width, what), codec.to_int(second, width, what)
        if kind == "ternary" and a & ~b:
            raise invalid(f"{what}: value {a:#x} has bits outside mask {b:#x}")
        if kind == "range" and a > b:
            raise invalid(f"{what}: low {a} is above high {b}")
        return (a, b)
    raise invalid(f"{what}: match kind {kind} is not supported in value sets")


def _encode(member: p4runtime_pb2.ValueSetMember, field_id: int, field: MatchFieldInfo, a: int, b: int) -> None:
    """One stored field of a member as a FieldMatch (don't-care fields are left out)."""
    kind, top = field.match_kind, (1 << field.bitwidth) - 1
    if kind == "exact":
        member.match.add(field_id=field_id).exact.value = codec.to_bytes(a)
    elif kind == "lpm" and b:
        fm = member.match.add(field_id=field_id)
        fm.lpm.value, fm.lpm.prefix_len = codec.to_bytes(a), bin(b).count("1")
    elif kind == "ternary" and b:
        fm = member.match.add(field_id=field_id)
        fm.ternary.value, fm.ternary.mask = codec.to_bytes(a), codec.to_bytes(b)
    elif kind == "range" and (a, b) != (0, top):
        fm = member.match.add(field_id=field_id)
        fm.range.low, fm.range.high = codec.to_bytes(a), codec.to_bytes(b)
