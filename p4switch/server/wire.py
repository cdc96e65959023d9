"""Protobuf wire format by hand, for the few messages that cross the server in bulk.

The protobuf runtime pinned with p4runtime-shell is the pure-Python one: building, parsing
and serializing a table entry through it costs hundreds of microseconds. Read responses of
table entries are therefore encoded straight to bytes, and Write requests are split into
their updates without building messages. Field numbers come from the P4Runtime descriptors,
and anything this module does not expect is left to the protobuf runtime.
"""

from __future__ import annotations

from typing import Any

from google.protobuf.message import Message
from p4.v1 import p4runtime_pb2

VARINT, LENGTH = 0, 2  # the wire types used here
_UINT64 = (1 << 64) - 1


class WireFormatError(ValueError):
    """Bytes that are not the message expected (the caller falls back to the protobuf runtime)."""


def varint(value: int) -> bytes:
    """A base-128 varint; negative values as 64-bit two's complement (protobuf's int32/int64)."""
    value &= _UINT64
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def tag(message: Any, field: str, wire_type: int) -> bytes:
    """The key of field ``field`` of a message type, e.g. ``tag(TableEntry, "match", LENGTH)``."""
    return varint(message.DESCRIPTOR.fields_by_name[field].number << 3 | wire_type)


def number(message: Any, field: str) -> int:
    return int(message.DESCRIPTOR.fields_by_name[field].number)


def delimited(key: bytes, payload: bytes) -> bytes:
    """A length-delimited field: key, length, payload."""
    size = len(payload)
    return key + (bytes((size,)) if size < 0x80 else varint(size)) + payload


def fields(data: bytes) -> list[tuple[int, int, Any]]:
    """(field number, wire type, value) of each field: an int for varints, bytes for
    length-delimited fields. Other wire types and truncated data raise :class:`WireFormatError`."""
    out = []
    pos, end = 0, len(data)
    while pos < end:
        key = data[pos]
        if key < 0x80:
            pos += 1
        else:
            key, pos = _read_varint(data, pos)
        wire_type = key & 7
        if pos >= end:
            raise WireFormatError("truncated field")
        value = data[pos]
        if value < 0x80:
            pos += 1
        else:
            value, pos = _read_varint(data, pos)
        if wire_type == LENGTH:
            if pos + value > end:
                raise WireFormatError("truncated length-delimited field")
            out.append((key >> 3, LENGTH, data[pos:pos + value]))
            pos += value
        elif wire_type == VARINT:
            out.append((key >> 3, VARINT, value))
        else:
            raise WireFormatError(f"wire type {wire_type} is not expected here")
    return out


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    byte = data[pos] if pos < len(data) else -1
    if 0 <= byte < 0x80:
        return byte, pos + 1
    value = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise WireFormatError("truncated or overlong varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


# -- ReadResponse ---------------------------------------------------------------------------

ENTITIES = tag(p4runtime_pb2.ReadResponse, "entities", LENGTH)
ENTITY_TABLE_ENTRY = tag(p4runtime_pb2.Entity, "table_entry", LENGTH)


_ENTITY_COUNTER_ENTRY = tag(p4runtime_pb2.Entity, "counter_entry", LENGTH)
_CE_COUNTER_ID = tag(p4runtime_pb2.CounterEntry, "counter_id", VARINT)
_CE_INDEX = tag(p4runtime_pb2.CounterEntry, "index", LENGTH)
_CE_DATA = tag(p4runtime_pb2.CounterEntry, "data", LENGTH)
_INDEX_INDEX = tag(p4runtime_pb2.Index, "index", VARINT)
_CD_BYTES = tag(p4runtime_pb2.CounterData, "byte_count", VARINT)
_CD_PACKETS = tag(p4runtime_pb2.CounterData, "packet_count", VARINT)


def counter_entity(counter_id: int, index: int, packets: int, nbytes: int) -> bytes:
    """The serialized ``Entity`` of one counter cell, as protobuf would write it."""
    cell = _INDEX_INDEX + varint(index) if index else b""
    data = (_CD_BYTES + varint(nbytes) if nbytes else b"") + (_CD_PACKETS + varint(packets) if packets else b"")
    body = _CE_COUNTER_ID + varint(counter_id) + delimited(_CE_INDEX, cell) + delimited(_CE_DATA, data)
    return delimited(_ENTITY_COUNTER_ENTRY, body)


def read_response(entities: list[bytes | Message]) -> bytes:
    """A serialized ReadResponse holding entities given as serialized ``Entity`` bytes or messages."""
    return b"".join(delimited(ENTITIES, e if isinstance(e, bytes) else e.SerializeToString()) for e in entities)


def serialize(message: bytes | Message) -> bytes:
    """gRPC response serializer that lets bytes already encoded pass as they are."""
    return message if isinstance(message, bytes) else message.SerializeToString()


# -- WriteRequest ---------------------------------------------------------------------------

_WR = p4runtime_pb2.WriteRequest
_WR_DEVICE_ID, _WR_ROLE_ID, _WR_ROLE = number(_WR, "device_id"), number(_WR, "role_id"), number(_WR, "role")
_WR_ELECTION_ID, _WR_UPDATES, _WR_ATOMICITY = number(_WR, "election_id"), number(_WR, "updates"), number(_WR, "atomicity")
_UINT128_HIGH, _UINT128_LOW = number(p4runtime_pb2.Uint128, "high"), number(p4runtime_pb2.Uint128, "low")


class SplitWriteRequest:
    """A WriteRequest whose updates are still serialized ``Update`` messages.

    Has the attributes the servicer reads (``device_id``, ``role``, ``election_id``,
    ``atomicity``, ``updates`` as bytes) and the original bytes for the request log.
    """

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.device_id = 0
        self.role = ""
        self.atomicity = 0
        self.election_id = p4runtime_pb2.Uint128()
        self.updates: list[bytes] = []
        seen: set[int] = set()
        for field, wire_type, value in fields(data):
            if field == _WR_UPDATES and wire_type == LENGTH:
                self.updates.append(value)
                continue
            if field in seen:
                raise WireFormatError(f"WriteRequest field {field} given twice")
            seen.add(field)
            if field == _WR_DEVICE_ID and wire_type == VARINT:
                self.device_id = value
            elif field == _WR_ATOMICITY and wire_type == VARINT:
                self.atomicity = value
            elif field == _WR_ELECTION_ID and wire_type == LENGTH:
                self.election_id = _uint128(value)
            elif field == _WR_ROLE_ID and wire_type == VARINT:
                pass  # deprecated, ignored as by the protobuf-based path
            elif field == _WR_ROLE and wire_type == LENGTH:
                self.role = value.decode("utf-8")
            else:
                raise WireFormatError(f"WriteRequest field {field} is not expected")

    def message(self) -> p4runtime_pb2.WriteRequest:
        """The request as a protobuf message (for the request log)."""
        return p4runtime_pb2.WriteRequest.FromString(self.data)


def _uint128(data: bytes) -> p4runtime_pb2.Uint128:
    out = p4runtime_pb2.Uint128()
    for field, wire_type, value in fields(data):
        if wire_type != VARINT:
            raise WireFormatError("Uint128 fields are varints")
        if field == _UINT128_HIGH:
            out.high = value
        elif field == _UINT128_LOW:
            out.low = value
        else:
            raise WireFormatError(f"Uint128 field {field} is not expected")
    return out


def parse_write_request(data: bytes) -> SplitWriteRequest | p4runtime_pb2.WriteRequest:
    """gRPC request deserializer for Write: split when the request has the usual shape,
    otherwise a protobuf message."""
    try:
        return SplitWriteRequest(data)
    except (WireFormatError, UnicodeDecodeError):
        return p4runtime_pb2.WriteRequest.FromString(data)


# -- Update of a table entry ----------------------------------------------------------------

_UPDATE_TYPE, _UPDATE_ENTITY = number(p4runtime_pb2.Update, "type"), number(p4runtime_pb2.Update, "entity")
_ENTITY_TABLE_ENTRY = number(p4runtime_pb2.Entity, "table_entry")
_TE = p4runtime_pb2.TableEntry
_TE_TABLE_ID, _TE_MATCH, _TE_ACTION, _TE_PRIORITY = (number(_TE, f) for f in ("table_id", "match", "action", "priority"))
_FM = p4runtime_pb2.FieldMatch
_FM_FIELD_ID = number(_FM, "field_id")
#: FieldMatch oneof field number -> (kind, first and second sub-field numbers; 0: none)
_FM_KINDS = {
    number(_FM, "exact"): ("exact", number(_FM.Exact, "value"), 0),
    number(_FM, "lpm"): ("lpm", number(_FM.LPM, "value"), number(_FM.LPM, "prefix_len")),
    number(_FM, "ternary"): ("ternary", number(_FM.Ternary, "value"), number(_FM.Ternary, "mask")),
    number(_FM, "range"): ("range", number(_FM.Range, "low"), number(_FM.Range, "high")),
    number(_FM, "optional"): ("optional", number(_FM.Optional, "value"), 0),
}
_TA_ACTION = number(p4runtime_pb2.TableAction, "action")
_ACTION_ID, _ACTION_PARAMS = number(p4runtime_pb2.Action, "action_id"), number(p4runtime_pb2.Action, "params")
_PARAM_ID, _PARAM_VALUE = number(p4runtime_pb2.Action.Param, "param_id"), number(p4runtime_pb2.Action.Param, "value")

#: One field match: (field id, kind or None when the oneof is unset, first value, second value);
#: bytes values, except an LPM's prefix length (an int).
MatchValues = tuple[int, str | None, bytes, Any]


class TableUpdate:
    """An Update of a table entry that carries only a table id, matches, a direct action and a
    priority: the common shape of bulk writes."""

    __slots__ = ("type", "table_id", "matches", "action_id", "params", "priority")

    def __init__(self) -> None:
        self.type = 0
        self.table_id = 0
        self.matches: list[MatchValues] = []
        self.action_id: int | None = None  # None: the entry has no action
        self.params: list[tuple[int, bytes]] = []
        self.priority = 0


def _int32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value


def _once(seen: set[int], field: int) -> None:
    if field in seen:
        raise WireFormatError(f"field {field} given twice")
    seen.add(field)


def table_update(data: bytes) -> TableUpdate | None:
    """The table-entry update in ``data``, or None when the update has another shape (another
    entity, other table entry fields, unknown fields) and needs the protobuf runtime."""
    try:
        return _table_update(data)
    except (WireFormatError, IndexError):
        return None


def _table_update(data: bytes) -> TableUpdate | None:
    out = TableUpdate()
    entry = None
    seen: set[int] = set()
    for field, wire_type, value in fields(data):
        _once(seen, field)
        if field == _UPDATE_TYPE and wire_type == VARINT:
            out.type = _int32(value)
        elif field == _UPDATE_ENTITY and wire_type == LENGTH:
            for efield, etype, evalue in fields(value):
                if efield != _ENTITY_TABLE_ENTRY or etype != LENGTH or entry is not None:
                    return None
                entry = evalue
        else:
            return None
    if entry is None:
        return None
    seen.clear()
    for field, wire_type, value in fields(entry):
        if field == _TE_MATCH and wire_type == LENGTH:
            out.matches.append(_field_match(value))
            continue
        _once(seen, field)
        if field == _TE_TABLE_ID and wire_type == VARINT:
            out.table_id = value & 0xFFFFFFFF
        elif field == _TE_PRIORITY and wire_type == VARINT:
            out.priority = _int32(value)
        elif field == _TE_ACTION and wire_type == LENGTH:
            _table_action(value, out)
        else:
            raise WireFormatError(f"table entry field {field} is left to the protobuf runtime")
    return out


def _field_match(data: bytes) -> MatchValues:
    field_id = 0
    kind: str | None = None
    first: bytes = b""
    second: Any = b""
    seen: set[int] = set()
    for field, wire_type, value in fields(data):
        _once(seen, field)
        if field == _FM_FIELD_ID and wire_type == VARINT:
            field_id = value & 0xFFFFFFFF
            continue
        spec = _FM_KINDS.get(field)
        if spec is None or wire_type != LENGTH or kind is not None:
            raise WireFormatError(f"field match field {field} is left to the protobuf runtime")
        kind, first_number, second_number = spec
        if kind == "lpm":
            second = 0
        inner: set[int] = set()
        for sub, sub_type, sub_value in fields(value):
            _once(inner, sub)
            if sub == first_number and sub_type == LENGTH:
                first = sub_value
            elif sub == second_number and kind == "lpm" and sub_type == VARINT:
                second = _int32(sub_value)
            elif sub == second_number and kind != "lpm" and sub_type == LENGTH:
                second = sub_value
            else:
                raise WireFormatError(f"{kind} field {sub} is not expected")
    return field_id, kind, first, second


def _table_action(data: bytes, out: TableUpdate) -> None:
    found = False
    for field, wire_type, value in fields(data):
        if field != _TA_ACTION or wire_type != LENGTH or found:
            raise WireFormatError("action profiles are left to the protobuf runtime")
        found = True
        out.action_id = 0
        seen: set[int] = set()
        for afield, atype, avalue in fields(value):
            if afield == _ACTION_PARAMS and atype == LENGTH:
                param_id, param_value = 0, b""
                pseen: set[int] = set()
                for pfield, ptype, pvalue in fields(avalue):
                    _once(pseen, pfield)
                    if pfield == _PARAM_ID and ptype == VARINT:
                        param_id = pvalue & 0xFFFFFFFF
                    elif pfield == _PARAM_VALUE and ptype == LENGTH:
                        param_value = pvalue
                    else:
                        raise WireFormatError(f"action parameter field {pfield} is not expected")
                out.params.append((param_id, param_value))
            elif afield == _ACTION_ID and atype == VARINT:
                _once(seen, afield)
                out.action_id = avalue & 0xFFFFFFFF
            else:
                raise WireFormatError(f"action field {afield} is not expected")
    if not found:
        raise WireFormatError("a table action without a direct action")
