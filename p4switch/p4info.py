"""P4Info (p4runtime 1.4.1) for a loaded program, named and numbered as p4c does for v1model.

Ids are p4c's: the 8-bit resource-type prefix over the low 24 bits of the Jenkins
one-at-a-time hash of the fully qualified name (probing upwards on collision), unless an
``@id`` annotation fixes them. Aliases are the shortest unique dotted suffix.
"""

from __future__ import annotations

from pathlib import Path

from google.protobuf import json_format, text_format
from p4.config.v1 import p4info_pb2

from p4switch.frontend.program import Program, ProgramInfo

P = p4info_pb2.P4Ids
_MATCH = {
    "exact": p4info_pb2.MatchField.EXACT,
    "lpm": p4info_pb2.MatchField.LPM,
    "ternary": p4info_pb2.MatchField.TERNARY,
    "range": p4info_pb2.MatchField.RANGE,
    "optional": p4info_pb2.MatchField.OPTIONAL,
}
_COUNTER_UNIT = {
    "packets": p4info_pb2.CounterSpec.PACKETS,
    "bytes": p4info_pb2.CounterSpec.BYTES,
    "packets_and_bytes": p4info_pb2.CounterSpec.BOTH,
}
_METER_UNIT = {"packets": p4info_pb2.MeterSpec.PACKETS, "bytes": p4info_pb2.MeterSpec.BYTES}
_SCOPE = {
    "TABLE_AND_DEFAULT": p4info_pb2.ActionRef.TABLE_AND_DEFAULT,
    "TABLE_ONLY": p4info_pb2.ActionRef.TABLE_ONLY,
    "DEFAULT_ONLY": p4info_pb2.ActionRef.DEFAULT_ONLY,
}


def jenkins_one_at_a_time(name: str) -> int:
    h = 0
    for b in name.encode():
        h = (h + b) & 0xFFFFFFFF
        h = (h + (h << 10)) & 0xFFFFFFFF
        h ^= h >> 6
    h = (h + (h << 3)) & 0xFFFFFFFF
    h ^= h >> 11
    h = (h + (h << 15)) & 0xFFFFFFFF
    return h


class _Ids:
    def __init__(self) -> None:
        self.taken: set[int] = set()

    def assign(self, prefix: int, name: str) -> int:
        low = jenkins_one_at_a_time(name) & 0xFFFFFF
        while True:
            candidate = (prefix << 24) | low
            if low != 0 and candidate not in self.taken:
                self.taken.add(candidate)
                return candidate
            low = (low + 1) & 0xFFFFFF


def _aliases(names: list[str]) -> dict[str, str]:
    result = {}
    for name in names:
        parts = name.split(".")
        for k in range(1, len(parts) + 1):
            suffix = ".".join(parts[-k:])
            clashes = [o for o in names if o != name and (o == suffix or o.endswith("." + suffix))]
            if not clashes:
                result[name] = suffix
                break
        else:
            result[name] = name
    return result


def _used_actions(info: ProgramInfo) -> set[str]:
    """Actions p4c keeps: those of a table, and those a control's apply block calls directly."""
    used = {a for t in info.tables.values() for a, _ in t.actions}
    return used | info.direct_actions


def _initial_default(t: p4info_pb2.Table, default: tuple[str, tuple[int, ...]],
                     action_id: dict[str, int], info: ProgramInfo) -> None:
    """p4c's ``initial_default_action``: the default action and its arguments, each argument
    in the whole bytes of its parameter's width."""
    name, args = default
    t.initial_default_action.action_id = action_id[name]
    for i, (param, value) in enumerate(zip(info.actions[name].params, args), start=1):
        width = (param.bitwidth + 7) // 8
        t.initial_default_action.arguments.add(param_id=i, value=int(value).to_bytes(width, "big"))


def build_p4info(program: Program) -> p4info_pb2.P4Info:
    """The P4Info message of a loaded program."""
    return build_p4info_from(program.info)


def build_p4info_from(info: ProgramInfo) -> p4info_pb2.P4Info:
    p4info = p4info_pb2.P4Info()
    p4info.pkg_info.arch = "v1model"
    table_actions = {a for t in info.tables.values() for a, _ in t.actions}
    info = ProgramInfo(**{**vars(info), "actions": {
        n: a for n, a in info.actions.items() if n in _used_actions(info)}})
    ids = _Ids()
    resources: list[tuple[int, str]] = []
    resources += [(P.TABLE, n) for n in info.tables]
    resources += [(P.ACTION, n) for n in info.actions]
    resources += [(P.CONTROLLER_HEADER, n) for n in info.controller_headers]
    for n, c in info.counters.items():
        resources.append((P.DIRECT_COUNTER if c.direct_table is not None else P.COUNTER, n))
    for n, m in info.meters.items():
        resources.append((P.DIRECT_METER if m.direct_table is not None else P.METER, n))
    resources += [(P.REGISTER, n) for n in info.registers]
    resources += [(P.ACTION_PROFILE, n) for n in info.action_profiles]
    resources += [(P.DIGEST, n) for n in info.digests]
    resources += [(P.VALUE_SET, n) for n in info.value_sets]
    id_of: dict[tuple[int, str], int] = {}
    for prefix, name in resources:  # @id annotations first, then p4c's hash rule
        if name in info.fixed_ids:
            value = info.fixed_ids[name]
            fixed = value if value >> 24 == prefix else (prefix << 24) | (value & 0xFFFFFF)
            id_of[(prefix, name)] = fixed
            ids.taken.add(fixed)
    for prefix, name in resources:
        if (prefix, name) not in id_of:
            id_of[(prefix, name)] = ids.assign(prefix, name)
    alias = _aliases([name for _, name in resources])

    def preamble(msg, prefix: int, name: str, annotations=()) -> None:
        msg.preamble.id = id_of[(prefix, name)]
        msg.preamble.name = name
        msg.preamble.alias = alias[name]
        msg.preamble.annotations.extend(annotations)

    action_id = {n: id_of[(P.ACTION, n)] for n in info.actions}
    for name, action in info.actions.items():
        a = p4info.actions.add()
        preamble(a, P.ACTION, name, action.annotations)
        if name in table_actions:  # p4c binds the arguments of an action only called directly
            for i, param in enumerate(action.params, start=1):
                a.params.add(id=i, name=param.name, bitwidth=param.bitwidth)
    direct_ids: dict[str, list[int]] = {}
    for name, c in info.counters.items():
        if c.direct_table is not None:
            direct_ids.setdefault(c.direct_table, []).append(id_of[(P.DIRECT_COUNTER, name)])
    for name, m in info.meters.items():
        if m.direct_table is not None:
            direct_ids.setdefault(m.direct_table, []).append(id_of[(P.DIRECT_METER, name)])
    for name, table in info.tables.items():
        t = p4info.tables.add()
        preamble(t, P.TABLE, name, table.annotations)
        for i, key in enumerate(table.keys, start=1):
            width = 0 if getattr(key, "is_error", False) else key.bitwidth  # p4c gives error keys no width
            t.match_fields.add(id=i, name=key.name, bitwidth=width, match_type=_MATCH[key.match_kind])
        for aname, scope in table.actions:
            ref = t.action_refs.add(id=action_id[aname], scope=_SCOPE[scope])
            if scope == "DEFAULT_ONLY":
                ref.annotations.append("@defaultonly")
            elif scope == "TABLE_ONLY":
                ref.annotations.append("@tableonly")
        if table.const_default:
            t.const_default_action_id = action_id[table.default_action[0]]
        if table.default_action and table.default_action[0] in action_id:
            _initial_default(t, table.default_action, action_id, info)
        t.direct_resource_ids.extend(direct_ids.get(name, []))
        if table.implementation:
            t.implementation_id = id_of[(P.ACTION_PROFILE, table.implementation)]
        t.size = table.size
        if table.is_const:
            t.is_const_table = True
        if table.initial_entries or table.is_const:  # p4c: `entries` of either kind
            t.has_initial_entries = True
        if table.idle_timeout:
            t.idle_timeout_behavior = p4info_pb2.Table.NOTIFY_CONTROL
    if any(getattr(k, "is_error", False) for tb in info.tables.values() for k in tb.keys):
        p4info.type_info.error.members.extend(info.error_members)  # as p4c: for error-typed keys
    for name, c in info.counters.items():
        if c.direct_table is not None:
            d = p4info.direct_counters.add()
            preamble(d, P.DIRECT_COUNTER, name)
            d.spec.unit = _COUNTER_UNIT[c.unit]
            d.direct_table_id = id_of[(P.TABLE, c.direct_table)] if c.direct_table else 0
        else:
            k = p4info.counters.add()
            preamble(k, P.COUNTER, name)
            k.spec.unit = _COUNTER_UNIT[c.unit]
            k.size = c.size
    for name, m in info.meters.items():
        if m.direct_table is not None:
            d = p4info.direct_meters.add()
            preamble(d, P.DIRECT_METER, name)
            d.spec.unit = _METER_UNIT[m.unit]
            d.direct_table_id = id_of[(P.TABLE, m.direct_table)] if m.direct_table else 0
        else:
            k = p4info.meters.add()
            preamble(k, P.METER, name)
            k.spec.unit = _METER_UNIT[m.unit]
            k.size = m.size
    for name, header in info.controller_headers.items():
        h = p4info.controller_packet_metadata.add()
        preamble(h, P.CONTROLLER_HEADER, name, [f'@controller_header("{name}")'])
        for i, f in enumerate(header.fields, start=1):
            h.metadata.add(id=i, name=f.name, bitwidth=f.bitwidth)
    for name, prof in info.action_profiles.items():
        a = p4info.action_profiles.add()
        preamble(a, P.ACTION_PROFILE, name)
        a.table_ids.extend(id_of[(P.TABLE, t)] for t in prof.tables)
        a.with_selector = prof.with_selector
        a.size = prof.size
    for name, reg in info.registers.items():
        r = p4info.registers.add()
        preamble(r, P.REGISTER, name)
        r.type_spec.bitstring.bit.bitwidth = reg.bitwidth
        r.size = reg.size
    for name, vs in info.value_sets.items():
        v = p4info.value_sets.add()
        preamble(v, P.VALUE_SET, name)
        plain = len(vs.fields) == 1 and vs.fields[0][0] == name.rsplit(".", 1)[-1]
        for i, (fname, width, kind) in enumerate(vs.fields, start=1):
            # a value_set of bit<W> has one unnamed field in p4c's P4Info
            v.match.add(id=i, name="" if plain else fname, bitwidth=width, match_type=_MATCH[kind])
        v.size = vs.size
    for name, digest in info.digests.items():
        d = p4info.digests.add()
        preamble(d, P.DIGEST, name)
        if digest.is_tuple:
            for f in digest.fields:
                d.type_spec.tuple.members.add().bitstring.bit.bitwidth = f.bitwidth
            continue
        d.type_spec.struct.name = name
        struct = p4info.type_info.structs[name]
        for f in digest.fields:
            member = struct.members.add(name=f.name)
            member.type_spec.bitstring.bit.bitwidth = f.bitwidth
    return p4info


def p4info_text(p4info: p4info_pb2.P4Info) -> str:
    return text_format.MessageToString(p4info)


def write_p4info(p4info: p4info_pb2.P4Info, path: Path) -> None:
    """Write P4Info; the format follows the suffix as with p4c's --p4runtime-files:
    ``.json`` JSON, ``.bin`` binary protobuf, anything else protobuf text format."""
    path = Path(path)
    if path.suffix == ".json":
        path.write_text(json_format.MessageToJson(p4info))
    elif path.suffix == ".bin":
        path.write_bytes(p4info.SerializeToString())
    else:
        path.write_text(p4info_text(p4info))
