"""bit<N> wider than 64 bits natively: fields extracted and emitted, copied through a local,
sliced across a word boundary, compared with a constant, and matched as exact and ternary
table keys; checked on both datapaths against bytes worked out by hand."""

from __future__ import annotations

import pytest

from p4switch.frontend import load_program_text
from p4switch.native.build import find_compiler
from p4switch.native.pipeline import NativePipeline
from p4switch.pipeline import Pipeline
from p4switch.tables import Exact, Lpm, TableEntry, Ternary

pytestmark = pytest.mark.skipif(find_compiler() is None, reason="no C compiler on this machine")

PROGRAM = """
#include <core.p4>
#include <v1model.p4>
header a_t { bit<128> src; bit<128> dst; bit<8> x; bit<8> y; }
struct hs { a_t a; }
struct ms { }
parser P(packet_in pkt, out hs h, inout ms m, inout standard_metadata_t sm) {
    state start { pkt.extract(h.a); transition accept; }
}
control V(inout hs h, inout ms m) { apply { } }
control I(inout hs h, inout ms m, inout standard_metadata_t sm) {
    action fwd(bit<9> p) { sm.egress_spec = p; }
    table t {
        key = { h.a.dst: exact; h.a.src: ternary; }
        actions = { fwd; NoAction; }
        default_action = NoAction();
    }
    apply {
        sm.egress_spec = 1;
        bit<128> tmp = h.a.src;
        h.a.src = h.a.dst;
        h.a.dst = tmp;
        h.a.x = h.a.src[67:60];
        if (h.a.dst == 128w0x0102030405060708090a0b0c0d0e0f10) { h.a.y = 1; } else { h.a.y = 2; }
        t.apply();
    }
}
control E(inout hs h, inout ms m, inout standard_metadata_t sm) { apply { } }
control C(inout hs h, inout ms m) { apply { } }
control D(packet_out pkt, in hs h) { apply { pkt.emit(h.a); } }
V1Switch(P(), V(), I(), E(), C(), D()) main;
"""

S = bytes.fromhex("0102030405060708090a0b0c0d0e0f10")
D = bytes.fromhex("a0a1a2a3a4a5a6a7a8a9aaabacadaeaf")
TOP = ((1 << 64) - 1) << 64  # the entry's ternary mask: the source's upper 64 bits

CASES = [
    # swapped; bits 67..60 of D are its hex digits 16 and 15: 7, A; dst == S: y = 1; entry hits
    (S + D, 3, D + S + bytes([0x7A, 1])),
    # D's low byte differs: outside the ternary mask, so the entry still hits
    (S + D[:15] + b"\x00", 3, D[:15] + b"\x00" + S + bytes([0x7A, 1])),
    # S's low byte differs: the exact key misses (default NoAction), and dst != the constant
    (S[:15] + b"\x11" + D, 1, D + S[:15] + b"\x11" + bytes([0x7A, 2])),
]


@pytest.mark.parametrize("frame, port, result", CASES)
def test_wide_fields_and_keys_on_both_datapaths(frame: bytes, port: int, result: bytes) -> None:
    program = load_program_text(PROGRAM, "wide.p4")
    python, native = Pipeline(program), NativePipeline(program)
    try:
        for pipe in (python, native):
            pipe.tables["I.t"].insert(TableEntry(
                (Exact(int.from_bytes(S, "big")), Ternary(int.from_bytes(D, "big") & TOP, TOP)), 1, "I.fwd", (3,)))
        outs = [python.process(frame + b"\x00\x00", 1), native.process(frame + b"\x00\x00", 1)]
    finally:
        native.close()
    assert outs[0] == outs[1] == [(port, result)]


def test_wide_function_arguments_and_value_on_both_datapaths() -> None:
    program = load_program_text(PROGRAM.replace("""        t.apply();
""", """        take(h.a.dst, 128w0xfeed);
""").replace("control I(", """bit<128> take(inout bit<128> v, in bit<128> w) { v = w; return v; }
control I("""), "wide_fn.p4")
    native = NativePipeline(program)
    try:
        outs = [Pipeline(program).process(S + D + b"\x00\x00", 1), native.process(S + D + b"\x00\x00", 1)]
    finally:
        native.close()
    # swapped as above, then dst takes 0xfeed through the inout argument (the value is unused)
    assert outs[0] == outs[1] == [(1, D + bytes(14) + b"\xfe\xed" + bytes([0x7A, 1]))]


def test_wide_lpm_keys_take_the_longest_prefix_on_both_datapaths() -> None:
    program = load_program_text(PROGRAM.replace("h.a.dst: exact; h.a.src: ternary;", "h.a.dst: lpm;"), "wide_lpm.p4")
    python, native = Pipeline(program), NativePipeline(program)
    s = int.from_bytes(S, "big")
    try:
        for pipe in (python, native):
            t = pipe.tables["I.t"]
            t.insert(TableEntry((Lpm(s & ~((1 << 64) - 1), 64),), 0, "I.fwd", (3,)))  # S's /64
            t.insert(TableEntry((Lpm(s, 128),), 0, "I.fwd", (4,)))  # S itself
            t.insert(TableEntry((Lpm(0, 0),), 0, "I.fwd", (2,)))  # everything else
        frames = [S + D, S[:15] + b"\x11" + D, bytes([0xFE]) + S[1:] + D]
        outs = [[pipe.process(f + b"\x00\x00", 1)[0][0] for f in frames] for pipe in (python, native)]
    finally:
        native.close()
    # dst after the swap: S (its /128), S's /64 with another last byte, another /64 (the /0)
    assert outs[0] == outs[1] == [4, 3, 2]
