"""Whether a P4Info describes the pipeline it is installed with.

SetForwardingPipelineConfig refuses a pair that disagrees, naming the first mismatch, so
that no later Read or Write meets an entity the pipeline cannot hold. Checked: unique ids;
every table, counter, meter, action profile and value set present in the program; match
fields with the program's widths and match kinds; table actions known to the P4Info and to
the program's table, with the program's parameter widths; direct resources and const
default actions that exist; counter and meter sizes.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from p4.config.v1 import p4info_pb2

from p4switch.server.errors import RpcError, invalid
from p4switch.server.schema import Schema, TableInfo

_OBJECT_KINDS = ("tables", "actions", "action_profiles", "counters", "direct_counters", "meters",
                 "direct_meters", "controller_packet_metadata", "value_sets", "registers", "digests", "externs")


def _mismatch(what: str) -> RpcError:
    return invalid(f"P4Info does not match the device config: {what}")


def check_consistent(schema: Schema, pipeline: Any) -> None:
    """Raise INVALID_ARGUMENT naming the first way the P4Info and the pipeline disagree."""
    _check_unique_ids(schema.p4info)
    for info in schema.tables.values():
        table = pipeline.tables.get(info.name)
        if table is None:
            raise _mismatch(f"table {info.name} is not in the program")
        _check_table(schema, info, table)
    for kind, infos, store in (("counter", schema.counters, pipeline.counters),
                               ("meter", schema.meters, pipeline.meters)):
        for item in infos.values():
            array = store.get(item.name)
            if array is None:
                raise _mismatch(f"{kind} {item.name} is not in the program")
            size = getattr(array, "size", item.size)
            if size != item.size:
                raise _mismatch(f"{kind} {item.name} has {item.size} cells in the P4Info, {size} in the program")
    for kind, named, store in (
        ("action profile", schema.action_profiles, getattr(pipeline, "action_profiles", {})),
        ("value set", schema.value_sets, getattr(pipeline, "value_sets", {})),
    ):
        for item in named.values():
            if item.name not in store:
                raise _mismatch(f"{kind} {item.name} is not in the program")


def _check_unique_ids(p4info: p4info_pb2.P4Info) -> None:
    ids: Counter[int] = Counter()
    names: dict[int, str] = {}
    for kind in _OBJECT_KINDS:
        for obj in getattr(p4info, kind):
            ids[obj.preamble.id] += 1
            names.setdefault(obj.preamble.id, obj.preamble.name)
            if obj.preamble.id == 0:
                raise invalid(f"P4Info: {obj.preamble.name or kind} has id 0")
    duplicate = next((i for i, n in ids.items() if n > 1), None)
    if duplicate is not None:
        raise invalid(f"P4Info: id {duplicate:#x} is used by more than one object ({names[duplicate]} and others)")
    for table in p4info.tables:
        _unique(f"table {table.preamble.name} match field", [m.id for m in table.match_fields])
        _unique(f"table {table.preamble.name} action", [r.id for r in table.action_refs])
    for action in p4info.actions:
        _unique(f"action {action.preamble.name} parameter", [p.id for p in action.params])


def _unique(what: str, ids: list[int]) -> None:
    seen: set[int] = set()
    for ident in ids:
        if ident in seen:
            raise invalid(f"P4Info: {what} id {ident} appears twice")
        seen.add(ident)


def _check_table(schema: Schema, info: TableInfo, table: Any) -> None:
    keys = list(table.keys)
    fields = list(info.match_fields.values())
    if len(fields) != len(keys):
        raise _mismatch(f"table {info.name} has {len(fields)} match field(s) in the P4Info, "
                        f"{len(keys)} in the program")
    by_name = {k.name: k for k in keys}
    pairs = [(f, by_name[f.name]) for f in fields] if all(f.name in by_name for f in fields) \
        else list(zip(fields, keys))
    for field, key in pairs:
        if field.bitwidth != key.bitwidth:
            raise _mismatch(f"table {info.name} match field {field.name} is {field.bitwidth} bits in the "
                            f"P4Info, {key.bitwidth} in the program")
        if field.match_kind != key.match_kind:
            raise _mismatch(f"table {info.name} match field {field.name} is {field.match_kind} in the "
                            f"P4Info, {key.match_kind} in the program")
    program_actions = dict(table.actions)
    by_last = {name.split(".")[-1]: spec for name, spec in program_actions.items()}
    for action_id in sorted(info.action_ids):
        action = schema.actions.get(action_id)
        if action is None:
            raise _mismatch(f"table {info.name} refers to action id {action_id}, which the P4Info does not define")
        spec = program_actions.get(action.name) or by_last.get(action.name.split(".")[-1])
        if spec is None:
            raise _mismatch(f"table {info.name}: action {action.name} is not an action of the program's table")
        widths = tuple(p.bitwidth for p in action.params.values())
        if widths != tuple(spec.param_widths):
            raise _mismatch(f"action {action.name} has parameter widths {list(widths)} in the P4Info, "
                            f"{list(spec.param_widths)} in the program")
    if info.const_default_action_id and info.const_default_action_id not in schema.actions:
        raise _mismatch(f"table {info.name}: const default action id {info.const_default_action_id} is not defined")
    table_msg = next(t for t in schema.p4info.tables if t.preamble.id == info.id)
    for resource in table_msg.direct_resource_ids:
        if resource not in schema.direct_counters and resource not in schema.direct_meters:
            raise _mismatch(f"table {info.name}: direct resource id {resource} is not a direct counter or meter")
    if info.direct_meter_id and getattr(table, "meter_factory", True) is None:
        raise _mismatch(f"table {info.name} has a direct meter in the P4Info, none in the program")
