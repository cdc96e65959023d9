"""Counter cells straight from a serialized ReadResponse, without protobuf messages.

The protobuf runtime pinned with p4runtime-shell is the pure-Python one: parsing a read of a
4,096-cell counter into messages, and then reading each cell's fields back out of them, costs
the controller most of a counter snapshot. Whole counters are therefore read as raw bytes
(:meth:`controller.transport.Transport.read_raw`) and decoded here. Field numbers come from the
P4Runtime descriptors; fields this module does not know are skipped as protobuf skips them, and
an entity that is not a counter cell is refused.
"""

from __future__ import annotations

from p4.v1 import p4runtime_pb2

from controller.errors import RpcError

VARINT, FIXED64, LENGTH, FIXED32 = 0, 1, 2, 5
_UINT64 = (1 << 64) - 1


class CounterReplyError(RpcError):
    """A Read reply that is not a well-formed list of counter cells (names the entity and byte)."""


def _key(message: type, field: str, wire_type: int) -> int:
    return int(message.DESCRIPTOR.fields_by_name[field].number) << 3 | wire_type  # type: ignore[attr-defined]


_ENTITIES = _key(p4runtime_pb2.ReadResponse, "entities", LENGTH)
_COUNTER_ENTRY = _key(p4runtime_pb2.Entity, "counter_entry", LENGTH)
_COUNTER_ID = _key(p4runtime_pb2.CounterEntry, "counter_id", VARINT)
_INDEX = _key(p4runtime_pb2.CounterEntry, "index", LENGTH)
_DATA = _key(p4runtime_pb2.CounterEntry, "data", LENGTH)
_INDEX_INDEX = _key(p4runtime_pb2.Index, "index", VARINT)
_BYTE_COUNT = _key(p4runtime_pb2.CounterData, "byte_count", VARINT)
_PACKET_COUNT = _key(p4runtime_pb2.CounterData, "packet_count", VARINT)
#: Entity field numbers -> names, to name an entity kind that is not a counter cell.
_ENTITY_KINDS = {f.number: f.name for f in p4runtime_pb2.Entity.DESCRIPTOR.fields}

#: (counter_id, index, packets, bytes) of one cell.
Cell = tuple[int, int, int, int]


def _varint(data: bytes, pos: int, end: int, where: str) -> tuple[int, int]:
    """A base-128 varint at ``pos`` (at most 10 bytes; kept to 64 bits as protobuf does)."""
    value = shift = 0
    while True:
        if pos >= end or shift > 63:
            raise CounterReplyError(f"{where}: truncated or overlong varint at byte {pos}")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value & _UINT64, pos
        shift += 7


def _field(data: bytes, pos: int, end: int, where: str) -> tuple[int, int, int]:
    """One field at ``pos``: (key, value or payload start, position after the field).

    A varint's value, or a length-delimited field's payload start (its end is the third item).
    Fixed-width fields are stepped over (value 0); groups are refused."""
    key = data[pos]
    if key < 0x80:
        pos += 1
    else:
        key, pos = _varint(data, pos, end, where)
    wire_type = key & 7
    if wire_type == VARINT:
        if pos < end and data[pos] < 0x80:
            return key, data[pos], pos + 1
        value, pos = _varint(data, pos, end, where)
        return key, value, pos
    if wire_type == LENGTH:
        if pos < end and data[pos] < 0x80:
            size, pos = data[pos], pos + 1
        else:
            size, pos = _varint(data, pos, end, where)
        if pos + size > end:
            raise CounterReplyError(f"{where}: field {key >> 3} of {size} bytes at byte {pos} runs past the end ({end})")
        return key, pos, pos + size
    width = {FIXED64: 8, FIXED32: 4}.get(wire_type)
    if width is None or pos + width > end:
        raise CounterReplyError(f"{where}: field {key >> 3} has wire type {wire_type} at byte {pos}, not readable here")
    return key, 0, pos + width


def _counter_entry(data: bytes, pos: int, end: int, cell: list[int], where: str) -> None:
    """Merge a CounterEntry's fields into ``cell`` [counter_id, index, packets, bytes]."""
    while pos < end:
        key, value, after = _field(data, pos, end, where)
        if key == _COUNTER_ID:
            cell[0] = value & 0xFFFFFFFF
        elif key == _INDEX:
            sub = value
            while sub < after:
                k, v, sub = _field(data, sub, after, where)
                if k == _INDEX_INDEX:
                    cell[1] = v - (1 << 64) if v >> 63 else v  # int64
        elif key == _DATA:
            sub = value
            while sub < after:
                k, v, sub = _field(data, sub, after, where)
                if k == _PACKET_COUNT:
                    cell[2] = v - (1 << 64) if v >> 63 else v  # int64
                elif k == _BYTE_COUNT:
                    cell[3] = v - (1 << 64) if v >> 63 else v
        pos = after


def counter_cells(reply: bytes, *, skip_zero: bool = False, where: str = "Read reply") -> list[Cell]:
    """The counter cells of one serialized ReadResponse, in order, as protobuf would parse them
    (missing fields are 0). ``skip_zero`` leaves out cells with no packets and no bytes.

    Raises :class:`CounterReplyError` for bytes that do not parse, and for an entity that is
    not a counter cell (naming its kind and its place in the reply)."""
    out: list[Cell] = []
    pos, end, count = 0, len(reply), 0
    while pos < end:
        key, start, pos = _field(reply, pos, end, where)
        if key != _ENTITIES:
            continue  # not ReadResponse.entities: unknown to this version, skipped
        entity = f"{where}, entity #{count}"
        count += 1
        cell = [0, 0, 0, 0]
        sub = start
        while sub < pos:
            k, v, after = _field(reply, sub, pos, entity)
            if k == _COUNTER_ENTRY:
                _counter_entry(reply, v, after, cell, entity)
            elif (k >> 3) in _ENTITY_KINDS:
                raise CounterReplyError(f"{entity} is a {_ENTITY_KINDS[k >> 3]}, not a counter cell")
            sub = after
        if not skip_zero or cell[2] or cell[3]:
            out.append((cell[0], cell[1], cell[2], cell[3]))
    return out
