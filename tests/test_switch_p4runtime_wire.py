"""The P4Runtime server's hand-written wire format against the protobuf runtime.

Read responses of table entries are encoded straight to bytes and Write requests are split
into serialized updates decoded by hand; both must give exactly what the protobuf-based path
gives: the same bytes on output, the same entries, statuses and messages on input.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import pytest
from google.protobuf import text_format
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2

from p4switch import tables
from p4switch.server import wire
from p4switch.server.entities import EntityStore
from p4switch.server.errors import RpcError
from p4switch.server.schema import Schema
from p4switch.server.servicer import P4RuntimeServicer

P4INFO = """
tables {
  preamble { id: 33554433 name: "Ing.mixed" alias: "mixed" }
  match_fields { id: 1 name: "hdr.eth.dst" bitwidth: 48 match_type: EXACT }
  match_fields { id: 2 name: "hdr.ipv4.dst" bitwidth: 32 match_type: LPM }
  match_fields { id: 3 name: "hdr.tcp.dport" bitwidth: 16 match_type: TERNARY }
  match_fields { id: 4 name: "meta.prio" bitwidth: 8 match_type: RANGE }
  match_fields { id: 200 name: "meta.port" bitwidth: 9 match_type: OPTIONAL }
  action_refs { id: 16777217 } action_refs { id: 16777218 }
  direct_resource_ids: 318767105
  size: 100000
}
tables {
  preamble { id: 2 name: "Ing.routes" alias: "routes" }
  match_fields { id: 1 name: "hdr.ipv4.dst" bitwidth: 32 match_type: LPM }
  action_refs { id: 16777217 } action_refs { id: 16777218 }
  size: 100000
}
actions { preamble { id: 16777217 name: "Ing.forward" alias: "forward" }
  params { id: 1 name: "port" bitwidth: 9 } params { id: 300 name: "dmac" bitwidth: 48 } }
actions { preamble { id: 16777218 name: "Ing.drop" alias: "drop" } }
actions { preamble { id: 3 name: "Ing.other" alias: "other" } }
direct_counters { preamble { id: 318767105 name: "Ing.hits" } spec { unit: BOTH } direct_table_id: 33554433 }
"""

ACTIONS = {"Ing.forward": tables.ActionSpec("Ing.forward", (9, 48)), "Ing.drop": tables.ActionSpec("Ing.drop", ())}
KEYS = (("hdr.eth.dst", "exact", 48), ("hdr.ipv4.dst", "lpm", 32), ("hdr.tcp.dport", "ternary", 16),
        ("meta.prio", "range", 8), ("meta.port", "optional", 9))
FIELD_IDS = (1, 2, 3, 4, 200)


@dataclass
class StandIn:
    tables: dict[str, tables.Table] = field(default_factory=dict)
    counters: dict[str, Any] = field(default_factory=dict)
    meters: dict[str, Any] = field(default_factory=dict)


def make_store(const: bool = False) -> EntityStore:
    mixed = tables.Table("Ing.mixed", tuple(tables.KeyField(*k) for k in KEYS), dict(ACTIONS), size=100000,
                         is_const=const)
    routes = tables.Table("Ing.routes", (tables.KeyField("hdr.ipv4.dst", "lpm", 32),), dict(ACTIONS), size=100000)
    schema = Schema.build(text_format.Parse(P4INFO, p4info_pb2.P4Info()))
    return EntityStore(schema, StandIn(tables={"Ing.mixed": mixed, "Ing.routes": routes}))


def reference_encoding(entry: tables.TableEntry, table_id: int, is_const: bool,
                       counters: tuple[int, int] | None) -> bytes:
    """The entry built with the protobuf runtime, the way a straightforward server does."""
    msg = p4runtime_pb2.TableEntry(table_id=table_id, priority=entry.priority)
    ids = FIELD_IDS if table_id != 2 else (1,)
    for fid, m in zip(ids, entry.match):
        if m is None or (isinstance(m, tables.Lpm) and m.prefix_len == 0) or (
                isinstance(m, tables.Ternary) and m.mask == 0):
            continue
        fm = msg.match.add(field_id=fid)
        canon = lambda v: v.to_bytes(max(1, (v.bit_length() + 7) // 8), "big")  # noqa: E731
        if isinstance(m, tables.Exact):
            fm.exact.value = canon(m.value)
        elif isinstance(m, tables.Lpm):
            fm.lpm.value, fm.lpm.prefix_len = canon(m.value), m.prefix_len
        elif isinstance(m, tables.Ternary):
            fm.ternary.value, fm.ternary.mask = canon(m.value), canon(m.mask)
        elif isinstance(m, tables.Range):
            fm.range.low, fm.range.high = canon(m.low), canon(m.high)
        else:
            fm.optional.value = canon(m.value)
    action = msg.action.action
    action.action_id = {"Ing.forward": 16777217, "Ing.drop": 16777218}[entry.action]
    for pid, arg in zip((1, 300), entry.args):
        action.params.add(param_id=pid, value=arg.to_bytes(max(1, (arg.bit_length() + 7) // 8), "big"))
    if is_const:
        msg.is_const = True
    if counters is not None:
        msg.counter_data.packet_count, msg.counter_data.byte_count = counters
    return msg.SerializeToString()


def random_entry(rng: random.Random) -> tables.TableEntry:
    match: list[tables.FieldMatch | None] = [tables.Exact(rng.getrandbits(48))]
    plen = rng.choice((0, 8, 24, 32))
    match.append(tables.Lpm(rng.getrandbits(32) & ~((1 << (32 - plen)) - 1), plen))
    mask = rng.choice((0, 0xFFFF, rng.getrandbits(16)))
    match.append(tables.Ternary(rng.getrandbits(16) & mask, mask))
    low = rng.randrange(256)
    match.append(None if rng.random() < 0.3 else tables.Range(low, rng.randrange(low, 256)))
    match.append(None if rng.random() < 0.3 else tables.Optional(rng.getrandbits(9)))
    if rng.random() < 0.5:
        action, args = "Ing.forward", (rng.getrandbits(9), rng.choice((0, rng.getrandbits(48))))
    else:
        action, args = "Ing.drop", ()
    return tables.TableEntry(tuple(match), rng.choice((1, 127, 128, 300, 2**31 - 1)), action, args)


@pytest.mark.parametrize("const", [False, True])
def test_encoded_entries_are_the_bytes_protobuf_writes(const: bool) -> None:
    rng = random.Random(7)
    store = make_store(const)
    codec = store._codec(33554433)
    for _ in range(300):
        entry = random_entry(rng)
        counters = rng.choice((None, (0, 0), (5, 0), (0, 5), (2**40, 3)))
        assert codec.encode(entry, counters) == reference_encoding(entry, 33554433, const, counters)
    assert wire.read_response([b"\x12\x00", p4runtime_pb2.Entity()]) == \
        p4runtime_pb2.ReadResponse(entities=[p4runtime_pb2.Entity(table_entry=p4runtime_pb2.TableEntry()),
                                             p4runtime_pb2.Entity()]).SerializeToString()


def test_varints_match_protobuf() -> None:
    assert wire.varint(0) == b"\x00"
    for value in (1, 127, 128, 300, 2**31 - 1, 2**32, 2**63, 2**64 - 1, -1, -2**31):
        msg = p4runtime_pb2.TableEntry(priority=value) if -2**31 <= value < 2**31 else \
            p4runtime_pb2.Uint128(high=value)
        assert msg.SerializeToString()[1:] == wire.varint(value)


def random_update(rng: random.Random) -> p4runtime_pb2.Update:
    """A table update, often wrong in one of the ways a client gets it wrong."""
    u = p4runtime_pb2.Update(type=rng.choice((1, 1, 1, 2, 3, 3, 0)))
    te = u.entity.table_entry
    te.table_id = rng.choice((33554433, 33554433, 2, 99))
    ids = FIELD_IDS if te.table_id != 2 else (1,)
    kinds = [k[1] for k in KEYS] if te.table_id != 2 else ["lpm"]
    widths = [k[2] for k in KEYS] if te.table_id != 2 else [32]

    def value(width: int) -> bytes:
        roll = rng.random()
        if roll < 0.05:
            return b""
        if roll < 0.1:
            return (1 << width).to_bytes((width + 8) // 8, "big")  # one bit too wide
        v = rng.getrandbits(width)
        size = (width + 7) // 8 + (1 if roll < 0.2 else 0)  # sometimes padded
        return v.to_bytes(size, "big")

    for fid, kind, width in zip(ids, kinds, widths):
        if rng.random() < 0.15:
            continue  # omitted
        fm = te.match.add(field_id=fid if rng.random() > 0.03 else 77)
        kind = kind if rng.random() > 0.05 else rng.choice(("exact", "lpm", "range"))
        if kind == "exact":
            fm.exact.value = value(width)
        elif kind == "lpm":
            fm.lpm.value = value(width)
            fm.lpm.prefix_len = rng.choice((0, 8, width, width + 1, -1))
        elif kind == "ternary":
            fm.ternary.value, fm.ternary.mask = value(width), value(width)
        elif kind == "range":
            fm.range.low, fm.range.high = value(width), value(width)
        else:
            fm.optional.value = value(width)
        if rng.random() < 0.03:
            te.match.add().CopyFrom(fm)  # given twice
    roll = rng.random()
    if roll < 0.6:
        te.action.action.action_id = 16777217
        for pid, width in ((1, 9), (300, 48)):
            if rng.random() > 0.05:
                te.action.action.params.add(param_id=pid if rng.random() > 0.03 else 9, value=value(width))
    elif roll < 0.85:
        te.action.action.action_id = rng.choice((16777218, 16777218, 3, 404))
    elif roll < 0.9:
        te.action.action_profile_member_id = 5
    te.priority = rng.choice((0, 1, 1, 2, 3, -4))
    extra = rng.random()
    if extra < 0.03:
        te.idle_timeout_ns = 10
    elif extra < 0.06:
        te.counter_data.packet_count = 3
    elif extra < 0.08:
        te.is_default_action = True
        te.ClearField("match")
        te.priority = 0
    return u


def outcome(store: EntityStore, apply: Any) -> tuple[str, str] | None:
    try:
        apply()
    except RpcError as exc:
        return exc.code.name, exc.message
    return None


def test_split_writes_behave_as_protobuf_writes() -> None:
    rng = random.Random(11)
    by_message, by_wire = make_store(), make_store()
    results = []
    sent: list[bytes] = []
    for _ in range(3000):
        if sent and rng.random() < 0.1:  # a repeat: inserting the same entry twice
            data = rng.choice(sent)
            u = p4runtime_pb2.Update.FromString(data)
        else:
            u = random_update(rng)
            data = u.SerializeToString()
            sent.append(data)
        expected = outcome(by_message, lambda: by_message.write(p4runtime_pb2.Update.FromString(data)))
        assert outcome(by_wire, lambda: by_wire.write_serialized(data)) == expected, u
        results.append(expected)
    for name in ("Ing.mixed", "Ing.routes"):
        a, b = by_message.pipeline.tables[name], by_wire.pipeline.tables[name]
        assert a.entries() == b.entries()
        assert a.default == b.default
    # The generator reaches successes and the usual refusals.
    codes = {r[0] if r else "OK" for r in results}
    assert {"OK", "INVALID_ARGUMENT", "NOT_FOUND", "ALREADY_EXISTS", "OUT_OF_RANGE", "UNIMPLEMENTED"} <= codes


def test_only_plain_table_updates_are_decoded_by_hand() -> None:
    te = p4runtime_pb2.TableEntry(table_id=2, priority=0)
    fm = te.match.add(field_id=1)
    fm.lpm.value, fm.lpm.prefix_len = b"\x0a\x00\x00\x00", 8
    te.action.action.action_id = 16777218
    plain = p4runtime_pb2.Update(type=p4runtime_pb2.Update.INSERT, entity=p4runtime_pb2.Entity(table_entry=te))
    decoded = wire.table_update(plain.SerializeToString())
    assert decoded is not None
    assert (decoded.type, decoded.table_id, decoded.matches, decoded.action_id, decoded.params) == \
        (1, 2, [(1, "lpm", b"\x0a\x00\x00\x00", 8)], 16777218, [])
    with_timeout = p4runtime_pb2.Update()
    with_timeout.CopyFrom(plain)
    with_timeout.entity.table_entry.idle_timeout_ns = 5
    counter = p4runtime_pb2.Update(type=p4runtime_pb2.Update.MODIFY)
    counter.entity.counter_entry.counter_id = 1
    for other in (with_timeout, counter):
        assert wire.table_update(other.SerializeToString()) is None
    assert wire.table_update(b"\xff\xff") is None  # truncated varint


def test_write_request_is_split_or_left_to_protobuf() -> None:
    request = p4runtime_pb2.WriteRequest(device_id=3, role="", atomicity=0)
    request.election_id.high, request.election_id.low = 1, 2**64 - 1
    request.updates.add(type=p4runtime_pb2.Update.INSERT)
    request.updates.add(type=p4runtime_pb2.Update.DELETE)
    split = wire.parse_write_request(request.SerializeToString())
    assert isinstance(split, wire.SplitWriteRequest)
    assert (split.device_id, split.election_id.high, split.election_id.low) == (3, 1, 2**64 - 1)
    assert [p4runtime_pb2.Update.FromString(u) for u in split.updates] == list(request.updates)
    assert split.message() == request
    twice = request.SerializeToString() + p4runtime_pb2.WriteRequest(device_id=4).SerializeToString()
    assert isinstance(wire.parse_write_request(twice), p4runtime_pb2.WriteRequest)  # last one wins there


class _Context:
    def abort(self, code: Any, message: str) -> None:
        raise AssertionError(f"aborted: {code} {message}")

    def is_active(self) -> bool:
        return True


class _Target:
    def __init__(self) -> None:
        import threading

        self.lock = threading.RLock()

    def install(self, pipeline: Any) -> None:
        pass

    def packet_out(self, frame: bytes) -> None:
        pass


def test_read_of_many_entries_comes_in_batches_of_serialized_responses() -> None:
    servicer = P4RuntimeServicer(_Target(), 1)
    servicer.store = make_store()
    table = servicer.store.pipeline.tables["Ing.routes"]
    for i in range(1234):
        table.insert(tables.TableEntry((tables.Lpm(i << 8, 24),), 0, "Ing.forward", (i % 512, i)))
    request = p4runtime_pb2.ReadRequest(device_id=1)
    request.entities.add().table_entry.table_id = 0  # every table
    responses = [p4runtime_pb2.ReadResponse.FromString(r) for r in servicer.Read(request, _Context())]
    assert [len(r.entities) for r in responses] == [500, 500, 234]
    got = [e.table_entry for r in responses for e in r.entities]
    assert [(e.match[0].lpm.value, e.action.action.params[1].value) for e in got] == [
        ((i << 8).to_bytes(max(1, ((i << 8).bit_length() + 7) // 8), "big"),
         i.to_bytes(max(1, (i.bit_length() + 7) // 8), "big")) for i in range(1234)]
    assert got[5] == p4runtime_pb2.TableEntry.FromString(
        reference_encoding(table.entries()[5], 2, False, None))


def test_an_update_that_is_not_protobuf_is_invalid_argument() -> None:
    store = make_store()
    with pytest.raises(RpcError) as info:
        store.write_serialized(b"\x12\x05\x12\x03")  # entity: length 5, only 2 bytes follow
    assert info.value.code.name == "INVALID_ARGUMENT"


def test_counter_cells_encode_as_protobuf_does() -> None:
    rng = random.Random(5)
    for _ in range(500):
        cid, index = rng.choice((1, 21, 0x12000001)), rng.choice((0, 1, rng.getrandbits(20)))
        packets, nbytes = rng.choice((0, rng.getrandbits(40))), rng.choice((0, rng.getrandbits(50)))
        msg = p4runtime_pb2.CounterEntry(counter_id=cid)
        msg.index.index = index
        msg.data.packet_count, msg.data.byte_count = packets, nbytes
        expected = p4runtime_pb2.Entity(counter_entry=msg).SerializeToString()
        assert wire.counter_entity(cid, index, packets, nbytes) == expected
