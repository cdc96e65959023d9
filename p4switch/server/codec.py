"""Translation between P4Runtime entities and the pipeline's tables and entries.

Values travel as P4Runtime byte strings: big-endian, any length on input as long as the value
fits the field's width, the canonical (shortest) form on output.
"""

from __future__ import annotations

import grpc
from p4.v1 import p4runtime_pb2

from p4switch import tables
from p4switch.server.errors import RpcError, invalid, out_of_range, unimplemented
from p4switch.server.schema import MatchFieldInfo, ParamInfo, Schema, TableInfo


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


def _field_match(field: MatchFieldInfo, fm: p4runtime_pb2.FieldMatch) -> tables.FieldMatch:
    what = f"match field {field.name}"
    kind = fm.WhichOneof("field_match_type")
    if kind != field.match_kind:
        raise invalid(f"{what} is {field.match_kind}, got a {kind} match")
    width = field.bitwidth
    if kind == "exact":
        return tables.Exact(to_int(fm.exact.value, width, what))
    if kind == "lpm":
        if not 0 <= fm.lpm.prefix_len <= width:
            raise invalid(f"{what}: prefix length {fm.lpm.prefix_len} out of 0..{width}")
        return tables.Lpm(to_int(fm.lpm.value, width, what), fm.lpm.prefix_len)
    if kind == "ternary":
        return tables.Ternary(to_int(fm.ternary.value, width, what), to_int(fm.ternary.mask, width, what))
    if kind == "range":
        return tables.Range(to_int(fm.range.low, width, what), to_int(fm.range.high, width, what))
    if kind == "optional":
        return tables.Optional(to_int(fm.optional.value, width, what))
    raise unimplemented(f"{what}: match kind {kind} is not supported")


def match_from_proto(
    schema: Schema, info: TableInfo, table: tables.Table, matches: list[p4runtime_pb2.FieldMatch]
) -> tuple[tables.FieldMatch | None, ...]:
    """The pipeline match tuple of a P4Runtime match list (absent fields are wildcards)."""
    del schema
    given: dict[int, tables.FieldMatch] = {}
    for fm in matches:
        field = info.match_fields.get(fm.field_id)
        if field is None:
            raise invalid(f"table {info.name}: unknown match field id {fm.field_id}")
        if fm.field_id in given:
            raise invalid(f"table {info.name}: match field {field.name} given twice")
        given[fm.field_id] = _field_match(field, fm)
    return tuple(given.get(fid) for fid in key_field_ids(info, table))


def match_to_proto(
    info: TableInfo, table: tables.Table, match: tuple[tables.FieldMatch | None, ...]
) -> list[p4runtime_pb2.FieldMatch]:
    """P4Runtime field matches of a pipeline match tuple; wildcards are left out."""
    out = []
    for fid, m in zip(key_field_ids(info, table), match):
        if m is None:
            continue
        width = info.match_fields[fid].bitwidth
        fm = p4runtime_pb2.FieldMatch(field_id=fid)
        if isinstance(m, tables.Exact):
            fm.exact.value = to_bytes(m.value, width)
        elif isinstance(m, tables.Lpm):
            if m.prefix_len == 0:
                continue
            fm.lpm.value, fm.lpm.prefix_len = to_bytes(m.value, width), m.prefix_len
        elif isinstance(m, tables.Ternary):
            if m.mask == 0:
                continue
            fm.ternary.value, fm.ternary.mask = to_bytes(m.value, width), to_bytes(m.mask, width)
        elif isinstance(m, tables.Range):
            fm.range.low, fm.range.high = to_bytes(m.low, width), to_bytes(m.high, width)
        else:
            fm.optional.value = to_bytes(m.value, width)
        out.append(fm)
    return out


def action_from_proto(
    schema: Schema, info: TableInfo | None, action: p4runtime_pb2.Action
) -> tuple[str, tuple[int, ...]]:
    """Action name and arguments (in P4Info parameter order) of a P4Runtime action."""
    action_info = schema.action(action.action_id)
    if info is not None and action.action_id not in info.action_ids:
        raise invalid(f"action {action_info.name} is not an action of table {info.name}")
    given: dict[int, int] = {}
    for param in action.params:
        spec = action_info.params.get(param.param_id)
        if spec is None:
            raise invalid(f"action {action_info.name}: unknown parameter id {param.param_id}")
        if param.param_id in given:
            raise invalid(f"action {action_info.name}: parameter {spec.name} given twice")
        given[param.param_id] = to_int(param.value, spec.bitwidth, f"action {action_info.name} parameter {spec.name}")
    missing = [p.name for pid, p in action_info.params.items() if pid not in given]
    if missing:
        raise invalid(f"action {action_info.name}: missing parameter(s) {', '.join(missing)}")
    return action_info.name, tuple(given[pid] for pid in action_info.params)


def action_to_proto(schema: Schema, name: str, args: tuple[int, ...]) -> p4runtime_pb2.Action:
    """A P4Runtime action from a pipeline action name and arguments."""
    candidates = [a for a in schema.actions.values() if a.name == name] or [
        a for a in schema.actions.values() if a.name.split(".")[-1] == name.split(".")[-1]]
    if not candidates:
        raise RpcError(grpc.StatusCode.INTERNAL, f"action {name!r} is not in the P4Info")
    action_info = candidates[0]
    out = p4runtime_pb2.Action(action_id=action_info.id)
    params: list[ParamInfo] = list(action_info.params.values())
    for spec, arg in zip(params, args):
        out.params.add(param_id=spec.id, value=to_bytes(arg, spec.bitwidth))
    return out


def table_entry_from_proto(
    schema: Schema, info: TableInfo, table: tables.Table, msg: p4runtime_pb2.TableEntry
) -> tables.TableEntry:
    """A pipeline entry from a P4Runtime table entry (which must carry a direct action)."""
    match = match_from_proto(schema, info, table, list(msg.match))
    kind = msg.action.WhichOneof("type")
    if kind is None:
        raise invalid(f"table {info.name}: the entry has no action")
    if kind != "action":
        raise unimplemented(f"table {info.name}: {kind} (action profiles) are not supported")
    name, args = action_from_proto(schema, info, msg.action.action)
    return tables.TableEntry(match=match, priority=msg.priority, action=name, args=args)


def table_entry_to_proto(
    schema: Schema, info: TableInfo, table: tables.Table, entry: tables.TableEntry
) -> p4runtime_pb2.TableEntry:
    msg = p4runtime_pb2.TableEntry(table_id=info.id, priority=entry.priority)
    msg.match.extend(match_to_proto(info, table, entry.match))
    msg.action.action.CopyFrom(action_to_proto(schema, entry.action, entry.args))
    return msg


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
