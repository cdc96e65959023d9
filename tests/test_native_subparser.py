"""A parser applied inside a parser, natively: it runs from its own start state on the same
packet, its accept continues the caller's state, an error in it ends the whole parse with
that error; checked on both datapaths against bytes worked out by hand."""

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
header a_t { bit<8> kind; }
header b_t { bit<8> v; }
struct hs { a_t a; b_t b; b_t c; }
struct ms { }
parser Sub(packet_in pkt, inout hs h) {
    state start { pkt.extract(h.b); transition select(h.b.v) { 0x10: twice; default: accept; } }
    state twice { pkt.extract(h.c); transition accept; }
}
parser P(packet_in pkt, out hs h, inout ms m, inout standard_metadata_t sm) {
    Sub() sub;
    state start { pkt.extract(h.a); transition select(h.a.kind) { 1: more; default: accept; } }
    state more { sub.apply(pkt, h); h.a.kind = 9; transition accept; }
}
control V(inout hs h, inout ms m) { apply { } }
control I(inout hs h, inout ms m, inout standard_metadata_t sm) {
    apply {
        sm.egress_spec = 2;
        if (sm.parser_error == error.PacketTooShort) { sm.egress_spec = 3; }
    }
}
control E(inout hs h, inout ms m, inout standard_metadata_t sm) { apply { } }
control C(inout hs h, inout ms m) { apply { } }
control D(packet_out pkt, in hs h) { apply { pkt.emit(h.a); pkt.emit(h.b); pkt.emit(h.c); } }
V1Switch(P(), V(), I(), E(), C(), D()) main;
"""

CASES = [
    # kind 1: the sub-parser takes b (5) and accepts; the caller then sets kind 9; 0xAA is payload
    (bytes([1, 5, 0xAA]), [(2, bytes([9, 5, 0xAA]))]),
    # b = 0x10: the sub-parser's second state takes c too
    (bytes([1, 0x10, 7, 0xAA]), [(2, bytes([9, 0x10, 7, 0xAA]))]),
    # c is missing: PacketTooShort in the sub-parser ends the parse (kind stays 1, b is not
    # copied out of the failed call, yet its byte was taken: the payload starts after it)
    (bytes([1, 0x10]), [(3, bytes([1]))]),
    # kind 2: no sub-parser
    (bytes([2, 5]), [(2, bytes([2, 5]))]),
]


@pytest.mark.parametrize("frame, expected", CASES)
def test_parser_applied_in_a_parser_on_both_datapaths(frame: bytes, expected: list) -> None:
    program = load_program_text(PROGRAM, "subparser.p4")
    native = NativePipeline(program)
    try:
        outs = [Pipeline(program).process(frame, 1), native.process(frame, 1)]
    finally:
        native.close()
    assert outs[0] == outs[1] == expected
