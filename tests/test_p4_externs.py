"""v1model externs with reference values: hashes, checksums with payload, direct meters,
sub-parsers and sub-controls."""

from __future__ import annotations

import struct

import pytest

from p4switch.frontend import load_program_text
from p4switch.pipeline import Pipeline
from p4switch.tables import Exact, TableEntry

PROGRAM = """
#include <core.p4>
#include <v1model.p4>
header data_t { bit<72> text; }           /* the 9 bytes "123456789" */
header out_t { bit<16> crc16; bit<32> crc32; bit<16> csum16; bit<16> xor16; bit<32> ident;
               bit<16> modded; bit<8> colour; bit<16> csum_payload; }
header tag_t { bit<8> kind; }
struct hs { tag_t tag; data_t data; out_t res; }
struct ms { bit<8> sub_seen; }

parser Sub(packet_in p, out data_t d, inout ms m) {
    state start { p.extract(d); m.sub_seen = 1; transition accept; }
}

parser P(packet_in p, out hs hdr, inout ms m, inout standard_metadata_t sm) {
    Sub() sub;
    state start {
        p.extract(hdr.tag);
        transition select(hdr.tag.kind) { 1: with_data; 3: with_data; default: accept; }
    }
    state with_data { sub.apply(p, hdr.data, m); p.extract(hdr.res); transition accept; }
}
control V(inout hs hdr, inout ms m) { apply { } }
control I(inout hs hdr, inout ms m, inout standard_metadata_t sm) {
    direct_meter<bit<8>>(MeterType.packets) dm;
    action colour() { dm.read(hdr.res.colour); }
    table metered { key = { hdr.tag.kind: exact; } actions = { colour; NoAction; } meters = dm; }
    apply {
        sm.egress_spec = 2;
        hash(hdr.res.crc16, HashAlgorithm.crc16, 16w0, { hdr.data.text }, 32w65536);
        hash(hdr.res.crc32, HashAlgorithm.crc32, 32w0, { hdr.data.text }, 64w0x100000000);
        hash(hdr.res.csum16, HashAlgorithm.csum16, 16w0, { hdr.data.text }, 32w65536);
        hash(hdr.res.xor16, HashAlgorithm.xor16, 16w0, { hdr.data.text }, 32w65536);
        hash(hdr.res.ident, HashAlgorithm.identity, 32w0, { hdr.data.text[31:0] }, 64w0x100000000);
        hash(hdr.res.modded, HashAlgorithm.crc16, 16w100, { hdr.data.text }, 16w7);
        if (hdr.tag.kind == 3) {
            hash(hdr.res.modded, HashAlgorithm.crc16, 16w100, { hdr.data.text }, 16w0);
        }
        hdr.res.sub_seen_dummy_never = 0;
        metered.apply();
    }
}
control E(inout hs hdr, inout ms m, inout standard_metadata_t sm) { apply { } }
control C(inout hs hdr, inout ms m) {
    apply {
        update_checksum_with_payload(hdr.res.isValid(), { hdr.tag.kind, 8w0 }, hdr.res.csum_payload,
                                     HashAlgorithm.csum16);
    }
}
control D(packet_out p, in hs hdr) { apply { p.emit(hdr); } }
V1Switch(P(), V(), I(), E(), C(), D()) main;
"""
PROGRAM = PROGRAM.replace("        hdr.res.sub_seen_dummy_never = 0;\n", "")
OUT = struct.Struct(">HIHHIHBH")


def ones_complement_checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\x00"
    total = 0
    for (word,) in struct.iter_unpack(">H", data):
        total += word
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


@pytest.fixture(scope="module")
def program():
    return load_program_text(PROGRAM, "externs.p4")


def run(pipe: Pipeline, payload: bytes = b"", now_us: int = 0) -> tuple:
    frame = b"\x01" + b"123456789" + bytes(OUT.size) + payload
    out = pipe.process(frame, 1, now_us)
    assert len(out) == 1 and out[0][0] == 2
    data = out[0][1]
    assert data[1:10] == b"123456789" and data.endswith(payload)
    return OUT.unpack(data[10:10 + OUT.size])


def test_hash_algorithms_match_reference_check_values(program):
    crc16, crc32, csum, xor16, ident, modded, _, _ = run(Pipeline(program))
    assert crc16 == 0xBB3D            # CRC-16/ARC check value (BMv2 crc16)
    assert crc32 == 0xCBF43926        # CRC-32/ISO-HDLC check value (BMv2 crc32)
    assert csum == ones_complement_checksum(b"123456789")
    words = struct.unpack(">4H", b"12345678") + (ord("9") << 8,)
    x = 0
    for w in words:
        x ^= w
    assert xor16 == x
    assert ident == int.from_bytes(b"6789", "big")
    assert modded == 100 + 0xBB3D % 7


def test_hash_with_max_zero_gives_base(program):
    frame = b"\x03" + b"123456789" + bytes(OUT.size)
    out = Pipeline(program).process(frame, 1)
    assert OUT.unpack(out[0][1][10:10 + OUT.size])[5] == 100  # v1model: max = 0 yields base


def test_checksum_with_payload_covers_the_unparsed_bytes(program):
    payload = b"some payload bytes!"
    *_, csum_payload = run(Pipeline(program), payload)
    assert csum_payload == ones_complement_checksum(b"\x01\x00" + payload)


def test_direct_meter_colours_per_entry(program):
    pipe = Pipeline(program)
    table = pipe.tables["I.metered"]
    entry = TableEntry((Exact(1),), 0, "I.colour", ())
    table.insert(entry)
    table.set_direct_meter(entry, (1.0, 1, 1.0, 2))
    colours = [run(pipe, now_us=5)[6] for _ in range(3)]
    assert colours == [0, 1, 2]
    assert pipe.info.meters["I.dm"].direct_table == "I.metered"


def test_sub_parser_fills_its_out_parameter(program):
    pipe = Pipeline(program)
    assert run(pipe)[0] == 0xBB3D  # the data header came through the sub-parser
    assert pipe.process(b"\x02rest", 1) == [(2, b"\x02rest")]


def test_csum16_of_a_number_equals_csum16_of_its_bytes():
    import random

    from p4switch import hashes
    rng = random.Random(5)
    for n in [0, 1, 2, 3, 19, 20, 21] + [rng.randrange(1, 64) for _ in range(200)]:
        data = bytes(rng.choice([0, 0xFF, rng.randrange(256)]) for _ in range(n))
        assert hashes.csum16_value(int.from_bytes(data, "big"), n) == hashes.csum16(data), data


def test_identity_hash_takes_the_first_eight_bytes_as_bmv2() -> None:
    """BMv2's ``identity`` (calculations.cpp) folds the first min(8, len) bytes, big-endian."""
    from p4switch.hashes import identity

    data = bytes.fromhex("0102030405060708090a0b0c")
    assert identity(data) == 0x0102030405060708
    assert identity(bytes.fromhex("a1b2c3")) == 0xA1B2C3
    assert identity(b"") == 0


def test_a_program_declared_extern_function_fails_only_the_packets_that_call_it() -> None:
    from pathlib import Path

    from p4switch.frontend import P4TypeError, load_program
    from p4switch.runtime import ExternFunctionMissing

    path = Path(__file__).parent / "p4programs" / "lang_extern_fn.p4"
    pipe = Pipeline(load_program(path))
    assert pipe.process(bytes([0x01, 0x10]), 1) == [(2, bytes([0x01, 0x11]))]
    with pytest.raises(ExternFunctionMissing, match=r"extern function scramble \(declared at .*lang_extern_fn\.p4:12"):
        pipe.process(bytes([0xEE, 0x10]), 1)
    assert pipe.process(bytes([0x02, 0x20]), 1) == [(2, bytes([0x02, 0x21]))]  # the next packet is fine
    bad = path.read_text().replace("scramble(hdr.p.value, 7);", "scramble(hdr.p.value);")
    with pytest.raises(P4TypeError, match="function scramble takes 2 argument"):
        load_program_text(bad, "bad.p4")
    bad = path.read_text().replace("scramble(hdr.p.value, 7);", "scramble(7, 7);")
    with pytest.raises(P4TypeError, match="not assignable"):  # 7 for an inout parameter
        load_program_text(bad, "bad.p4")
