"""Translation between P4Runtime entities and the pipeline's tables and entries.

Values travel as P4Runtime byte strings: big-endian, any length on input as long as the value
fits the field's width, the canonical (shortest) form on output.
"""

from __future__ import annotations

from typing import Any

import grpc
from p4.v1 import p4runtime_pb2

from p4switch import tables
from p4switch.server import wire
from p4switch.server.errors import RpcError, invalid, not_found, out_of_range, unimplemented
from p4switch.server.schema import ActionInfo, MatchFieldInfo, ParamInfo, Schema, TableInfo
from p4switch.server.validate import check_field_match


def to_int(data: bytes, bitwidth: int, what: str) -> int:
    """A byte string as an integer that must fit ``bitwidth`` bits (else OUT_OF_RANGE, as the
    P4Runtime specification's Bytestrings section says; so is an empty string)."""
    if not data:
        raise out_of_range(f"{what}: empty byte string")
    value = int.from_bytes(data, "big")
    if bitwidth and value >> bitwidth:
        raise out_of_range(f"{what}: value {value:#x} does not fit in {bitwidth} bits")
    return value


def to_bytes(value: int, bitwidth: int = 0) -> bytes:
    """The canonical byte string of a value (at least one byte)."""
    del bitwidth  # canonical form does not depend on the width
    return value.to_bytes(max(1, (value.bit_length() + 7) // 8), "big")


def key_field_ids(info: TableInfo, table: tables.Table) -> list[int]:
    """P4Info match field ids in the pipeline table's key order."""
    by_name = {m.name: m.id for m in info.match_fields.values()}
    ids = [by_name.get(k.name) for k in table.keys]
    if all(i is not None for i in ids) and len(ids) == len(by_name):
        return [i for i in ids if i is not None]
    if len(table.keys) == len(info.match_fields):
        return list(info.match_fields)
    raise RpcError(
        grpc.StatusCode.INTERNAL,
        f"table {info.name}: P4Info match fields do not match the pipeline's keys",
    )


def field_match(field: MatchFieldInfo, kind: str | None, first: bytes, second: Any) -> tables.FieldMatch:
    """A pipeline field match from P4Runtime values: ``first`` is the value (or a range's low
    end), ``second`` the mask, high end or prefix length."""
    what = f"match field {field.name}"
    if kind != field.match_kind:
        raise invalid(f"{what} is {field.match_kind}, got a {kind} match")
    width = field.bitwidth
    if kind == "exact":
        return tables.Exact(to_int(first, width, what))
    if kind == "lpm":
        if not 0 <= second <= width:
            raise invalid(f"{what}: prefix length {second} out of 0..{width}")
        value = to_int(first, width, what)
        check_field_match(field, kind, value, second)
        return tables.Lpm(value, second)
    if kind == "ternary":
        value, mask = to_int(first, width, what), to_int(second, width, what)
        check_field_match(field, kind, value, mask)
        return tables.Ternary(value, mask)
    if kind == "range":
        low, high = to_int(first, width, what), to_int(second, width, what)
        check_field_match(field, kind, low, high)
        return tables.Range(low, high)
    if kind == "optional":
        return tables.Optional(to_int(first, width, what))
    raise unimplemented(f"{what}: match kind {kind} is not supported")


def match_values(fm: p4runtime_pb2.FieldMatch) -> wire.MatchValues:
    """(field id, kind, first, second) of a protobuf field match, as :mod:`wire` decodes them."""
    kind = fm.WhichOneof("field_match_type")
    if kind == "exact":
        return fm.field_id, kind, fm.exact.value, b""
    if kind == "lpm":
        return fm.field_id, kind, fm.lpm.value, fm.lpm.prefix_len
    if kind == "ternary":
        return fm.field_id, kind, fm.ternary.value, fm.ternary.mask
    if kind == "range":
        return fm.field_id, kind, fm.range.low, fm.range.high
    if kind == "optional":
        return fm.field_id, kind, fm.optional.value, b""
    return fm.field_id, kind, b"", b""


def action_from_values(
    schema: Schema, info: TableInfo | None, action_id: int, params: list[tuple[int, bytes]]
) -> tuple[str, tuple[int, ...]]:
    """Action name and arguments (in P4Info parameter order) of a P4Runtime action."""
    action_info = schema.action(action_id)
    if info is not None and action_id not in info.action_ids:
        raise invalid(f"action {action_info.name} is not an action of table {info.name}")
    given: dict[int, int] = {}
    for param_id, value in params:
        spec = action_info.params.get(param_id)
        if spec is None:
            raise invalid(f"action {action_info.name}: unknown parameter id {param_id}")
        if param_id in given:
            raise invalid(f"action {action_info.name}: parameter {spec.name} given twice")
        given[param_id] = to_int(value, spec.bitwidth, f"action {action_info.name} parameter {spec.name}")
    if len(given) != len(action_info.params):
        missing = [p.name for pid, p in action_info.params.items() if pid not in given]
        raise invalid(f"action {action_info.name}: missing parameter(s) {', '.join(missing)}")
    return action_info.name, tuple(given[pid] for pid in action_info.params)


def action_from_proto(
    schema: Schema, info: TableInfo | None, action: p4runtime_pb2.Action
) -> tuple[str, tuple[int, ...]]:
    """Action name and arguments (in P4Info parameter order) of a P4Runtime action."""
    return action_from_values(schema, info, action.action_id, [(p.param_id, p.value) for p in action.params])


def find_action(schema: Schema, name: str) -> ActionInfo:
    """The P4Info action of a pipeline action name (or of its last name component)."""
    candidates = [a for a in schema.actions.values() if a.name == name] or [
        a for a in schema.actions.values() if a.name.split(".")[-1] == name.split(".")[-1]]
    if not candidates:
        raise RpcError(grpc.StatusCode.INTERNAL, f"action {name!r} is not in the P4Info")
    return candidates[0]


def action_to_proto(schema: Schema, name: str, args: tuple[int, ...]) -> p4runtime_pb2.Action:
    """A P4Runtime action from a pipeline action name and arguments."""
    action_info = find_action(schema, name)
    out = p4runtime_pb2.Action(action_id=action_info.id)
    params: list[ParamInfo] = list(action_info.params.values())
    for spec, arg in zip(params, args):
        out.params.add(param_id=spec.id, value=to_bytes(arg, spec.bitwidth))
    return out


_TE, _FM = p4runtime_pb2.TableEntry, p4runtime_pb2.FieldMatch
_TE_TABLE_ID = wire.tag(_TE, "table_id", wire.VARINT)
_TE_MATCH = wire.tag(_TE, "match", wire.LENGTH)
_TE_ACTION = wire.tag(_TE, "action", wire.LENGTH)
_TE_PRIORITY = wire.tag(_TE, "priority", wire.VARINT)
_TE_COUNTER_DATA = wire.tag(_TE, "counter_data", wire.LENGTH)
_TE_IS_CONST = wire.tag(_TE, "is_const", wire.VARINT) + b"\x01"
_COUNT_BYTES = wire.tag(p4runtime_pb2.CounterData, "byte_count", wire.VARINT)
_COUNT_PACKETS = wire.tag(p4runtime_pb2.CounterData, "packet_count", wire.VARINT)
_FM_FIELD_ID = wire.tag(_FM, "field_id", wire.VARINT)
_FM_EXACT, _FM_LPM = wire.tag(_FM, "exact", wire.LENGTH), wire.tag(_FM, "lpm", wire.LENGTH)
_FM_TERNARY, _FM_RANGE = wire.tag(_FM, "ternary", wire.LENGTH), wire.tag(_FM, "range", wire.LENGTH)
_FM_OPTIONAL = wire.tag(_FM, "optional", wire.LENGTH)
_VALUE = wire.tag(_FM.Exact, "value", wire.LENGTH)  # field 1 of Exact, LPM, Ternary, Optional
_SECOND = wire.tag(_FM.Ternary, "mask", wire.LENGTH)  # field 2 of Ternary and Range
_PREFIX_LEN = wire.tag(_FM.LPM, "prefix_len", wire.VARINT)
_TA_ACTION = wire.tag(p4runtime_pb2.TableAction, "action", wire.LENGTH)
_TA_MEMBER = wire.tag(p4runtime_pb2.TableAction, "action_profile_member_id", wire.VARINT)
_TA_GROUP = wire.tag(p4runtime_pb2.TableAction, "action_profile_group_id", wire.VARINT)
_ACTION_ID = wire.tag(p4runtime_pb2.Action, "action_id", wire.VARINT)
_ACTION_PARAM = wire.tag(p4runtime_pb2.Action, "params", wire.LENGTH)
_PARAM_ID = wire.tag(p4runtime_pb2.Action.Param, "param_id", wire.VARINT)
_PARAM_VALUE = wire.tag(p4runtime_pb2.Action.Param, "value", wire.LENGTH)
assert _VALUE == wire.tag(_FM.Range, "low", wire.LENGTH) and _SECOND == wire.tag(_FM.Range, "high", wire.LENGTH)


class TableCodec:
    """One table's P4Runtime translation, with the look-ups done once: key order, field
    widths and kinds, and the bytes that stay the same from entry to entry."""

    def __init__(self, schema: Schema, info: TableInfo, table: tables.Table) -> None:
        self.schema = schema
        self.info = info
        self.table = table
        self.key_ids = key_field_ids(info, table)
        self._field_keys = [_FM_FIELD_ID + wire.varint(fid) for fid in self.key_ids]
        self._table_id = _TE_TABLE_ID + wire.varint(info.id)
        self._suffix = _TE_IS_CONST if table.is_const else b""
        self._actions: dict[str, tuple[bytes, list[bytes]]] = {}

    # -- decoding ---------------------------------------------------------------------------

    def match(self, matches: list[wire.MatchValues]) -> tuple[tables.FieldMatch | None, ...]:
        """The pipeline match tuple of P4Runtime field matches (absent fields are wildcards)."""
        info = self.info
        given: dict[int, tables.FieldMatch] = {}
        for field_id, kind, first, second in matches:
            field = info.match_fields.get(field_id)
            if field is None:
                raise invalid(f"table {info.name}: unknown match field id {field_id}")
            if field_id in given:
                raise invalid(f"table {info.name}: match field {field.name} given twice")
            given[field_id] = field_match(field, kind, first, second)
        return tuple(given.get(fid) for fid in self.key_ids)

    def entry(self, matches: list[wire.MatchValues], priority: int, action_id: int | None,
              params: list[tuple[int, bytes]]) -> tables.TableEntry:
        """A pipeline entry; ``action_id`` None means the entry has no action."""
        match = self.match(matches)
        if action_id is None:
            raise invalid(f"table {self.info.name}: the entry has no action")
        name, args = action_from_values(self.schema, self.info, action_id, params)
        return tables.TableEntry(match=match, priority=priority, action=name, args=args)

    def match_from_proto(self, matches: Any) -> tuple[tables.FieldMatch | None, ...]:
        return self.match([match_values(fm) for fm in matches])

    def entry_from_proto(self, msg: p4runtime_pb2.TableEntry) -> tables.TableEntry:
        """A pipeline entry from a P4Runtime table entry (which must carry a direct action)."""
        match = self.match_from_proto(msg.match)
        kind = msg.action.WhichOneof("type")
        if kind is None:
            raise invalid(f"table {self.info.name}: the entry has no action")
        if kind == "action":
            name, args = action_from_proto(self.schema, self.info, msg.action.action)
            return tables.TableEntry(match=match, priority=msg.priority, action=name, args=args)
        if kind == "action_profile_action_set":
            raise unimplemented(f"table {self.info.name}: one-shot action sets are not supported "
                                "(insert members and groups, then name them)")
        profile = self.table.profile
        if profile is None:
            raise invalid(f"table {self.info.name} has no action profile: give an action")
        if kind == "action_profile_member_id":
            member_id = msg.action.action_profile_member_id
            if member_id not in profile.members:
                raise not_found(f"table {self.info.name}: {profile.name} has no member {member_id}")
            return tables.TableEntry(match, msg.priority, "", (), member_id=member_id)
        group_id = msg.action.action_profile_group_id
        if not profile.with_selector:
            raise invalid(f"table {self.info.name}: {profile.name} is not an action selector (no groups)")
        if group_id not in profile.groups:
            raise not_found(f"table {self.info.name}: {profile.name} has no group {group_id}")
        return tables.TableEntry(match, msg.priority, "", (), group_id=group_id)

    # -- encoding ---------------------------------------------------------------------------

    def encode(self, entry: tables.TableEntry, counters: tuple[int, int] | None = None,
               mark_const: bool = True) -> bytes:
        """The serialized ``TableEntry`` of a pipeline entry, as protobuf would write it, with
        ``counter_data`` when ``counters`` (packets, bytes) are given and ``is_const`` for the
        entries of a const table unless ``mark_const`` is False."""
        parts = [self._table_id]
        for key, m in zip(self._field_keys, entry.match):
            if m is None:
                continue
            if type(m) is tables.Exact:
                body = _FM_EXACT, wire.delimited(_VALUE, to_bytes(m.value))
            elif type(m) is tables.Lpm:
                if m.prefix_len == 0:
                    continue
                body = _FM_LPM, wire.delimited(_VALUE, to_bytes(m.value)) + _PREFIX_LEN + wire.varint(m.prefix_len)
            elif type(m) is tables.Ternary:
                if m.mask == 0:
                    continue
                body = _FM_TERNARY, wire.delimited(_VALUE, to_bytes(m.value)) + wire.delimited(_SECOND, to_bytes(m.mask))
            elif type(m) is tables.Range:
                body = _FM_RANGE, wire.delimited(_VALUE, to_bytes(m.low)) + wire.delimited(_SECOND, to_bytes(m.high))
            else:
                body = _FM_OPTIONAL, wire.delimited(_VALUE, to_bytes(m.value))
            parts.append(wire.delimited(_TE_MATCH, key + wire.delimited(*body)))
        if entry.member_id is not None:
            parts.append(wire.delimited(_TE_ACTION, _TA_MEMBER + wire.varint(entry.member_id)))
        elif entry.group_id is not None:
            parts.append(wire.delimited(_TE_ACTION, _TA_GROUP + wire.varint(entry.group_id)))
        else:
            parts.append(wire.delimited(_TE_ACTION, self._direct_action(entry)))
        if entry.priority:
            parts.append(_TE_PRIORITY + wire.varint(entry.priority))
        if counters is not None:
            packets, nbytes = counters
            data = (_COUNT_BYTES + wire.varint(nbytes) if nbytes else b"") + (
                _COUNT_PACKETS + wire.varint(packets) if packets else b"")
            parts.append(wire.delimited(_TE_COUNTER_DATA, data))
        if mark_const:
            parts.append(self._suffix)
        return b"".join(parts)

    def _direct_action(self, entry: tables.TableEntry) -> bytes:
        """The serialized ``TableAction`` of an entry's direct action."""
        action = self._actions.get(entry.action)
        if action is None:
            info = find_action(self.schema, entry.action)
            action = (_ACTION_ID + wire.varint(info.id),
                      [_PARAM_ID + wire.varint(p.id) for p in info.params.values()])
            self._actions[entry.action] = action
        head, param_ids = action
        body = head + b"".join(wire.delimited(_ACTION_PARAM, pid + wire.delimited(_PARAM_VALUE, to_bytes(arg)))
                               for pid, arg in zip(param_ids, entry.args))
        return wire.delimited(_TA_ACTION, body)


def pack_fields(values: list[tuple[int, int]]) -> bytes:
    """Values of (value, bitwidth) pairs packed big-endian in order, as a header is."""
    total = sum(w for _, w in values)
    if total % 8:
        raise invalid(f"packet metadata of {total} bits is not a whole number of bytes")
    acc = 0
    for value, width in values:
        acc = (acc << width) | (value & ((1 << width) - 1))
    return acc.to_bytes(total // 8, "big")


def unpack_fields(data: bytes, widths: list[int]) -> list[int]:
    """The inverse of :func:`pack_fields` over the first bytes of ``data``."""
    total = sum(widths)
    nbytes = total // 8
    acc = int.from_bytes(data[:nbytes], "big")
    out = []
    shift = total
    for width in widths:
        shift -= width
        out.append((acc >> shift) & ((1 << width) - 1))
    return out
