"""Counter cells decoded by hand from a serialized ReadResponse, against protobuf's own parse
of the same bytes: random cells (64-bit counts, index 0, fields left out), fields in any
order, repeated and unknown fields, and replies that are not counter cells or do not parse."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from p4.v1 import p4runtime_pb2

from controller.counter_wire import CounterReplyError, counter_cells
from controller.entities import CounterEntry
from controller.errors import RpcError
from controller.switch import SwitchSession
from tests.controller_helpers import pipeline, schema
from tests.fake_p4runtime import FakeSwitch


def parsed(reply: bytes, skip_zero: bool = False) -> list[tuple[int, int, int, int]]:
    """The cells as the protobuf runtime reads them."""
    out = []
    for e in p4runtime_pb2.ReadResponse.FromString(reply).entities:
        assert e.WhichOneof("entity") in ("counter_entry", None)
        ce = e.counter_entry
        if not skip_zero or ce.data.packet_count or ce.data.byte_count:
            out.append((ce.counter_id, ce.index.index, ce.data.packet_count, ce.data.byte_count))
    return out


def random_reply(rng: random.Random, cells: int) -> bytes:
    reply = p4runtime_pb2.ReadResponse()
    for _ in range(cells):
        ce = reply.entities.add().counter_entry
        ce.counter_id = rng.choice((0, 1, 302001245, 0xFFFFFFFF))
        shape = rng.random()
        if shape > 0.1:
            ce.index.index = rng.choice((0, 1, 127, 128, 16383, 16384, rng.randrange(1 << 63)))
        elif shape > 0.05:
            ce.index.SetInParent()  # an index message with no field: index 0
        if rng.random() > 0.1:
            ce.data.packet_count = rng.choice((0, 1, 0x7F, 0x80, (1 << 63) - 1, rng.randrange(1 << 63)))
            ce.data.byte_count = rng.choice((0, 300, 1 << 35, (1 << 63) - 1, -1, rng.randrange(1 << 63)))
    return reply.SerializeToString()


def test_a_session_reads_whole_counters_chosen_cells_and_only_non_zero_ones(tmp_path: Path) -> None:
    info = schema().counters["port_tx"]
    with FakeSwitch(device_id=1) as fake:
        with SwitchSession("s1", fake.address, 1, pipeline(), request_log=str(tmp_path / "s1.log")) as session:
            session.connect()
            counts = {0: (1, 64), 5: ((1 << 63) - 1, (1 << 62) + 1), info.size - 1: (0, 9)}
            fake.servicer.counters.update({(info.id, i): c for i, c in counts.items()})
            whole = session.read_counter("port_tx")
            assert len(whole) == info.size
            assert {c.index: (c.packets, c.bytes) for c in whole if c.packets or c.bytes} == counts
            assert whole[1] == CounterEntry(info.name, 1, 0, 0)
            assert session.read_counter("port_tx", skip_zero=True) == [
                CounterEntry(info.name, i, *counts[i]) for i in sorted(counts)]
            assert session.read_counter("port_tx", [5, 6], skip_zero=True) == [CounterEntry(info.name, 5, *counts[5])]
            assert session.read_counter("port_tx", []) == []


def test_random_cells_decode_as_protobuf_parses_them() -> None:
    rng = random.Random(20261127)
    for trial in range(200):
        reply = random_reply(rng, rng.randrange(0, 40))
        assert counter_cells(reply) == parsed(reply), f"trial {trial}"
        assert counter_cells(reply, skip_zero=True) == parsed(reply, skip_zero=True), f"trial {trial}"


def test_large_counts_and_missing_fields_by_hand() -> None:
    reply = p4runtime_pb2.ReadResponse()
    big = reply.entities.add().counter_entry
    big.counter_id, big.index.index = 7, 4095
    big.data.packet_count, big.data.byte_count = (1 << 63) - 1, (1 << 40) + 3
    reply.entities.add().counter_entry.counter_id = 7  # index 0, no data
    data = reply.SerializeToString()
    assert counter_cells(data) == [(7, 4095, (1 << 63) - 1, (1 << 40) + 3), (7, 0, 0, 0)]
    assert counter_cells(data, skip_zero=True) == [(7, 4095, (1 << 63) - 1, (1 << 40) + 3)]
    assert counter_cells(b"") == []


def test_fields_out_of_order_repeated_and_unknown_are_read_as_protobuf_reads_them() -> None:
    def varint(v: int) -> bytes:
        out = bytearray()
        while v >= 0x80:
            out.append(v & 0x7F | 0x80)
            v >>= 7
        return bytes(out + bytes((v,)))

    def delimited(key: int, body: bytes) -> bytes:
        return bytes((key,)) + varint(len(body)) + body

    counter_entry = p4runtime_pb2.Entity.DESCRIPTOR.fields_by_name["counter_entry"].number
    data = delimited(0x1A, b"\x10\x05\x08\x09")  # data: packet_count 5, then byte_count 9
    body = (data + b"\x08\x03" + delimited(0x12, b"\x08\x02") + b"\x08\x04"  # counter_id twice: the last wins
            + delimited(0x1A, b"\x10\x06")  # data again: merged, packets 6, bytes still 9
            + b"\x29" + bytes(8) + b"\x35" + bytes(4) + b"\xf8\x07\x01"  # unknown fixed64, fixed32, varint
            + delimited(0x12, b"\x08\x81\x01"))  # index again: 129
    entity = delimited(counter_entry << 3 | 2, body) + b"\xa0\x06\x01"  # unknown Entity field 100
    reply = delimited(0x0A, entity) + b"\x10\x01"  # an unknown ReadResponse field after it
    assert counter_cells(reply) == parsed(reply) == [(4, 129, 6, 9)]


def test_other_entity_kinds_are_refused_naming_the_kind_and_place() -> None:
    reply = p4runtime_pb2.ReadResponse()
    reply.entities.add().counter_entry.counter_id = 1
    reply.entities.add().table_entry.table_id = 5
    with pytest.raises(CounterReplyError, match=r"s1: Read counter x, entity #1 is a table_entry, not a counter cell"):
        counter_cells(reply.SerializeToString(), where="s1: Read counter x")


@pytest.mark.parametrize("bad, what", [
    (b"\x0a\x05\x3a\x03\x08", "runs past the end"),  # entity longer than the reply
    (b"\x0a\x04\x3a\x03\x08\x01", "runs past the end"),  # counter entry longer than the entity
    (b"\x0a\x04\x3a\x02\x08\xff", "truncated or overlong varint"),  # counter_id cut in the middle
    (b"\x0a\x0d\x3a\x0b\x08" + b"\xff" * 10, "truncated or overlong varint"),  # an 11-byte varint
    (b"\x0b\x00", "wire type 3"),  # a group
])
def test_malformed_replies_raise_the_controllers_error_with_where(bad: bytes, what: str) -> None:
    with pytest.raises(CounterReplyError, match=what) as caught:
        counter_cells(bad, where="s2: Read counter port_tx")
    assert isinstance(caught.value, RpcError)
    assert str(caught.value).startswith("s2: Read counter port_tx")
    with pytest.raises(Exception):  # protobuf refuses the same bytes
        p4runtime_pb2.ReadResponse.FromString(bad)
