"""Signed int<N> natively: fields sign-extended on extract, two's complement wrap, arithmetic
shift right, signed comparison, saturation to the signed range, casts and concatenation;
each checked on both datapaths against bytes worked out by hand."""

from __future__ import annotations

import pytest

from p4switch.frontend import load_program_text
from p4switch.native.build import find_compiler
from p4switch.native.pipeline import NativePipeline
from p4switch.pipeline import Pipeline

pytestmark = pytest.mark.skipif(find_compiler() is None, reason="no C compiler on this machine")

PROGRAM = """
#include <core.p4>
#include <v1model.p4>
header s_t { int<8> a; int<8> b; bit<8> u; }
header r_t { int<8> sum; int<8> shr; bit<8> lt; int<8> sat; int<16> wide; bit<8> bits; bit<16> cat;
             int<8> neg; bit<8> ge; }
struct hs { s_t s; r_t r; }
struct ms { }
parser P(packet_in pkt, out hs h, inout ms m, inout standard_metadata_t sm) {
    state start { pkt.extract(h.s); transition accept; }
}
control V(inout hs h, inout ms m) { apply { } }
control I(inout hs h, inout ms m, inout standard_metadata_t sm) {
    apply {
        sm.egress_spec = 2;
        h.r.setValid();
        h.r.sum = h.s.a + h.s.b;
        h.r.shr = h.s.a >> 2;
        h.r.lt = (bit<8>)(bit<1>)(h.s.a < h.s.b);
        h.r.sat = h.s.a |+| h.s.b;
        h.r.wide = (int<16>)h.s.a;
        h.r.bits = (bit<8>)h.s.a;
        h.r.cat = (bit<16>)(h.s.a ++ h.s.u);
        h.r.neg = -h.s.a;
        h.r.ge = 0;
        if (h.s.b >= -8s50) { h.r.ge = 1; }
    }
}
control E(inout hs h, inout ms m, inout standard_metadata_t sm) { apply { } }
control C(inout hs h, inout ms m) { apply { } }
control D(packet_out pkt, in hs h) { apply { pkt.emit(h.s); pkt.emit(h.r); } }
V1Switch(P(), V(), I(), E(), C(), D()) main;
"""

# (a, b, u) in, then sum, shr, lt, sat, wide (2 bytes), bits, cat (2 bytes), neg, ge
CASES = [
    # -100 + -50 = -150 wraps to 106; -100 >> 2 = -25; -100 < -50; |+| clamps to -128
    (bytes([0x9C, 0xCE, 0x01]), bytes([0x6A, 0xE7, 1, 0x80, 0xFF, 0x9C, 0x9C, 0x9C, 0x01, 0x64, 1])),
    # 100 + 50 = 150 wraps to -106; 25; not less; clamps to 127; -100 negated
    (bytes([0x64, 0x32, 0xFF]), bytes([0x96, 0x19, 0, 0x7F, 0x00, 0x64, 0x64, 0x64, 0xFF, 0x9C, 1])),
    # -7 + -128 = -135 wraps to 121; -7 >> 2 rounds down to -2; -7 > -128; -128 < -50
    (bytes([0xF9, 0x80, 0x00]), bytes([0x79, 0xFE, 0, 0x80, 0xFF, 0xF9, 0xF9, 0xF9, 0x00, 0x07, 0])),
]


@pytest.mark.parametrize("frame, result", CASES)
def test_signed_arithmetic_on_both_datapaths(frame: bytes, result: bytes) -> None:
    program = load_program_text(PROGRAM, "signed.p4")
    native = NativePipeline(program)
    try:
        outs = [Pipeline(program).process(frame, 1), native.process(frame, 1)]
    finally:
        native.close()
    assert outs[0] == outs[1] == [(2, frame + result)]
