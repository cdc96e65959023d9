"""Checks of P4Runtime messages that need the P4Info only, never the pipeline's state.

They run before an update touches anything, so a refused update leaves no trace; they do
not depend on where tables and counters are stored.
"""

from __future__ import annotations

from p4.v1 import p4runtime_pb2

from p4switch.server.errors import invalid, unimplemented
from p4switch.server.schema import MatchFieldInfo, TableInfo

Update = p4runtime_pb2.Update


def check_table_entry_write(info: TableInfo, kind: int, msg: p4runtime_pb2.TableEntry) -> None:
    """The per-entry rules of the P4Runtime specification (Table Entry, Direct Resources)."""
    if msg.is_const:
        raise invalid(f"table {info.name}: is_const must be false in a write")
    if kind == Update.DELETE:
        return
    if msg.HasField("counter_data") and not info.direct_counter_id:
        raise invalid(f"table {info.name} has no direct counter: counter_data cannot be written")
    if msg.HasField("meter_config") and not info.direct_meter_id:
        raise invalid(f"table {info.name} has no direct meter: meter_config cannot be written")
    if msg.HasField("meter_counter_data"):
        if not info.direct_meter_id:
            raise invalid(f"table {info.name} has no direct meter: meter_counter_data cannot be written")
        raise unimplemented(f"table {info.name}: per-colour meter counters are not kept by this target")
    if msg.HasField("time_since_last_hit"):
        raise invalid(f"table {info.name}: time_since_last_hit is read-only")


def check_field_match(field: MatchFieldInfo, kind: str, value: int, second: int) -> None:
    """A field match that is not a "don't care" (those must be omitted) and whose bounds are in
    order; ``second`` is the prefix length, mask or high end."""
    what = f"match field {field.name}"
    if kind == "lpm" and second == 0:
        raise invalid(f"{what}: a /0 prefix is a don't-care match and must be omitted")
    if kind == "ternary" and second == 0:
        raise invalid(f"{what}: mask 0 is a don't-care match and must be omitted")
    if kind == "range":
        if value > second:
            raise invalid(f"{what}: range low {value} is above high {second}")
        if value == 0 and second == (1 << field.bitwidth) - 1:
            raise invalid(f"{what}: the full range is a don't-care match and must be omitted")
