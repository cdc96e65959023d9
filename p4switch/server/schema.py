"""An index of a P4Info: P4Runtime ids to the names and widths the pipeline uses."""

from __future__ import annotations

from dataclasses import dataclass, field

from p4.config.v1 import p4info_pb2

from p4switch.server.errors import invalid, not_found

_COUNTER_UNITS = {p4info_pb2.CounterSpec.PACKETS: "packets", p4info_pb2.CounterSpec.BYTES: "bytes"}
_MATCH_KINDS = {
    p4info_pb2.MatchField.EXACT: "exact",
    p4info_pb2.MatchField.LPM: "lpm",
    p4info_pb2.MatchField.TERNARY: "ternary",
    p4info_pb2.MatchField.RANGE: "range",
    p4info_pb2.MatchField.OPTIONAL: "optional",
}


@dataclass(frozen=True)
class MatchFieldInfo:
    id: int
    name: str
    bitwidth: int
    match_kind: str


@dataclass(frozen=True)
class ParamInfo:
    id: int
    name: str
    bitwidth: int


@dataclass
class ActionInfo:
    id: int
    name: str
    params: dict[int, ParamInfo]


@dataclass
class TableInfo:
    id: int
    name: str
    match_fields: dict[int, MatchFieldInfo]
    action_ids: set[int]
    const_default_action_id: int
    direct_counter_id: int = 0
    direct_meter_id: int = 0
    supports_idle_timeout: bool = False
    implementation_id: int = 0  # the action profile implementing the table, if any


@dataclass(frozen=True)
class IndexedInfo:
    """A counter, meter or register array; a counter's `unit` is packets, bytes or both."""

    id: int
    name: str
    size: int
    direct_table_id: int = 0
    unit: str = "both"

    def counted(self, packets: int, nbytes: int) -> tuple[int, int]:
        """What a counter of this unit stores of a written (packets, bytes): a packets
        counter keeps no bytes and a bytes counter no packets, as BMv2's PI server writes them."""
        return (packets if self.unit != "bytes" else 0), (nbytes if self.unit != "packets" else 0)


@dataclass(frozen=True)
class PacketMetadataInfo:
    """The fields of a ``@controller_header``, in header order."""

    name: str
    fields: tuple[ParamInfo, ...]

    @property
    def bitwidth(self) -> int:
        return sum(f.bitwidth for f in self.fields)


@dataclass(frozen=True)
class ActionProfileInfo:
    """An action profile or selector; ``max_group_size`` 0 means the profile's size."""

    id: int
    name: str
    table_ids: tuple[int, ...]
    with_selector: bool
    size: int
    max_group_size: int


@dataclass(frozen=True)
class ValueSetInfo:
    """A parser value set: its match fields in P4Info order."""

    id: int
    name: str
    match_fields: dict[int, MatchFieldInfo]
    size: int


@dataclass(frozen=True)
class DigestInfo:
    id: int
    name: str
    member_widths: tuple[int, ...]
    is_tuple: bool = False


@dataclass
class Schema:
    """Look-ups by id over one P4Info; each miss raises NOT_FOUND naming the id."""

    p4info: p4info_pb2.P4Info
    tables: dict[int, TableInfo] = field(default_factory=dict)
    actions: dict[int, ActionInfo] = field(default_factory=dict)
    counters: dict[int, IndexedInfo] = field(default_factory=dict)
    direct_counters: dict[int, IndexedInfo] = field(default_factory=dict)
    meters: dict[int, IndexedInfo] = field(default_factory=dict)
    direct_meters: dict[int, IndexedInfo] = field(default_factory=dict)
    registers: dict[int, IndexedInfo] = field(default_factory=dict)
    digests: dict[int, DigestInfo] = field(default_factory=dict)
    action_profiles: dict[int, ActionProfileInfo] = field(default_factory=dict)
    value_sets: dict[int, ValueSetInfo] = field(default_factory=dict)
    packet_out: PacketMetadataInfo | None = None
    packet_in: PacketMetadataInfo | None = None

    @classmethod
    def build(cls, p4info: p4info_pb2.P4Info) -> Schema:
        schema = cls(p4info)
        for action in p4info.actions:
            params = {p.id: ParamInfo(p.id, p.name, p.bitwidth) for p in action.params}
            schema.actions[action.preamble.id] = ActionInfo(action.preamble.id, action.preamble.name, params)
        for table in p4info.tables:
            fields = {
                m.id: MatchFieldInfo(m.id, m.name, m.bitwidth, _MATCH_KINDS.get(m.match_type, "unknown"))
                for m in table.match_fields
            }
            info = TableInfo(
                table.preamble.id, table.preamble.name, fields,
                {ref.id for ref in table.action_refs}, table.const_default_action_id,
                supports_idle_timeout=table.idle_timeout_behavior
                == p4info_pb2.Table.NOTIFY_CONTROL,
                implementation_id=table.implementation_id,
            )
            for resource in table.direct_resource_ids:
                if any(c.preamble.id == resource for c in p4info.direct_counters):
                    info.direct_counter_id = resource
                if any(m.preamble.id == resource for m in p4info.direct_meters):
                    info.direct_meter_id = resource
            schema.tables[info.id] = info
        for c in p4info.counters:
            schema.counters[c.preamble.id] = IndexedInfo(c.preamble.id, c.preamble.name, c.size,
                                                         unit=_COUNTER_UNITS.get(c.spec.unit, "both"))
        for c in p4info.direct_counters:
            schema.direct_counters[c.preamble.id] = IndexedInfo(
                c.preamble.id, c.preamble.name, 0, c.direct_table_id, unit=_COUNTER_UNITS.get(c.spec.unit, "both"))
        for m in p4info.meters:
            schema.meters[m.preamble.id] = IndexedInfo(m.preamble.id, m.preamble.name, m.size)
        for m in p4info.direct_meters:
            schema.direct_meters[m.preamble.id] = IndexedInfo(
                m.preamble.id, m.preamble.name, 0, m.direct_table_id)
        for r in p4info.registers:
            schema.registers[r.preamble.id] = IndexedInfo(r.preamble.id, r.preamble.name, r.size)
        for d in p4info.digests:
            widths = _struct_widths(d.type_spec, p4info)
            schema.digests[d.preamble.id] = DigestInfo(d.preamble.id, d.preamble.name, widths,
                                                       d.type_spec.HasField("tuple"))
        for a in p4info.action_profiles:
            schema.action_profiles[a.preamble.id] = ActionProfileInfo(
                a.preamble.id, a.preamble.name, tuple(a.table_ids), a.with_selector, a.size, a.max_group_size)
        for v in p4info.value_sets:
            fields = {m.id: MatchFieldInfo(m.id, m.name, m.bitwidth, _MATCH_KINDS.get(m.match_type, "unknown"))
                      for m in v.match}
            schema.value_sets[v.preamble.id] = ValueSetInfo(v.preamble.id, v.preamble.name, fields, v.size)
        for header in p4info.controller_packet_metadata:
            meta = PacketMetadataInfo(
                header.preamble.name,
                tuple(ParamInfo(m.id, m.name, m.bitwidth) for m in header.metadata),
            )
            if header.preamble.name == "packet_out":
                schema.packet_out = meta
            elif header.preamble.name == "packet_in":
                schema.packet_in = meta
        return schema

    def table(self, table_id: int) -> TableInfo:
        try:
            return self.tables[table_id]
        except KeyError:
            raise not_found(f"unknown table id {table_id}") from None

    def action(self, action_id: int) -> ActionInfo:
        try:
            return self.actions[action_id]
        except KeyError:
            raise not_found(f"unknown action id {action_id}") from None

    def lookup(self, kind: str, ids: dict[int, IndexedInfo], resource_id: int) -> IndexedInfo:
        try:
            return ids[resource_id]
        except KeyError:
            raise not_found(f"unknown {kind} id {resource_id}") from None

    def digest_by_name(self, name: str) -> DigestInfo | None:
        for digest in self.digests.values():
            if digest.name == name or digest.name.endswith("." + name):
                return digest
        return None


def _struct_widths(type_spec: p4info_pb2.P4DataTypeSpec, p4info: p4info_pb2.P4Info) -> tuple[int, ...]:
    """Member widths of a digest's struct (or the width of a lone bitstring)."""
    if type_spec.HasField("bitstring"):
        return (_bits(type_spec.bitstring),)
    if type_spec.HasField("struct"):
        struct = p4info.type_info.structs.get(type_spec.struct.name)
        if struct is None:
            raise invalid(f"P4Info: digest struct {type_spec.struct.name!r} not in type_info")
        return tuple(_bits(m.type_spec.bitstring) for m in struct.members)
    if type_spec.HasField("tuple"):
        return tuple(_bits(m.bitstring) for m in type_spec.tuple.members)
    raise invalid("P4Info: digests of this type are not supported (bit<W> structs and tuples only)")


def _bits(spec: p4info_pb2.P4BitstringLikeTypeSpec) -> int:
    for kind in ("bit", "int", "varbit"):
        if spec.HasField(kind):
            sub = getattr(spec, kind)
            return int(getattr(sub, "bitwidth", 0) or getattr(sub, "max_bitwidth", 0))
    return 0
