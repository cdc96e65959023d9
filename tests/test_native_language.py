"""Language constructs the native backend compiles, each checked on both datapaths against
outputs written out here: list and structure values assigned to headers and structs (also
reading the target), header, struct, stack and varbit equality (a stack's next index is not
part of its value, as on BMv2), bound action arguments, header out arguments, functions
returning headers, many key fields."""

from __future__ import annotations

import pytest

from p4switch.frontend import load_program_text
from p4switch.native.build import find_compiler
from p4switch.native.pipeline import NativePipeline
from p4switch.pipeline import Pipeline

pytestmark = pytest.mark.skipif(find_compiler() is None, reason="no C compiler on this machine")

HEAD = """
#include <core.p4>
#include <v1model.p4>
header pair_t { bit<8> a; bit<8> b; }
struct inner_t { bit<8> x; bit<4> y; }
struct outer_t { inner_t i; bit<16> z; }
struct hs { pair_t p; pair_t q; pair_t res; }
struct ms { outer_t o; }
parser P(packet_in pkt, out hs h, inout ms m, inout standard_metadata_t sm) {
    state start { pkt.extract(h.p); pkt.extract(h.q); transition accept; }
}
control V(inout hs h, inout ms m) { apply { } }
control E(inout hs h, inout ms m, inout standard_metadata_t sm) { apply { } }
control C(inout hs h, inout ms m) { apply { } }
control D(packet_out pkt, in hs h) { apply { pkt.emit(h.p); pkt.emit(h.q); pkt.emit(h.res); } }
"""
TAIL = "V1Switch(P(), V(), I(), E(), C(), D()) main;\n"


def both(ingress: str, frame: bytes) -> list[list[tuple[int, bytes]]]:
    program = load_program_text(HEAD + ingress + TAIL, "lang.p4")
    return [Pipeline(program).process(frame, 1), NativePipeline(program).process(frame, 1)]


def test_list_and_structure_values_assigned_to_headers_and_structs() -> None:
    outs = both("""
control I(inout hs h, inout ms m, inout standard_metadata_t sm) {
    apply {
        sm.egress_spec = 2;
        h.p = { h.p.b, h.p.a };                 // a swap: the value reads its own target
        m.o = { { 8w7, 4w15 }, 16w0x0102 };     // nested lists into a struct
        m.o.i = { y = 4w3, x = h.q.a };         // a structure expression, fields by name
        h.res = { m.o.i.x + (bit<8>)m.o.i.y, m.o.z[7:0] };  // an invalid header made valid
    }
}
""", bytes([1, 2, 0x10, 0x20]))
    # p swapped; q as it was; out = {0x10 + 3, 0x02}, valid so emitted
    assert outs[0] == outs[1] == [(2, bytes([2, 1, 0x10, 0x20, 0x13, 0x02]))]


def test_header_and_struct_equality() -> None:
    outs = both("""
control I(inout hs h, inout ms m, inout standard_metadata_t sm) {
    apply {
        sm.egress_spec = 2;
        h.res.setValid();
        h.res.a = 0;
        if (h.p == h.q) { h.res.a = h.res.a | 1; }
        if (h.p != { 8w1, 8w2 }) { h.res.a = h.res.a | 2; }
        ms n = m;
        n.o.z = 5;
        if (n != m) { h.res.a = h.res.a | 4; }
        pair_t invalid_one;
        if (invalid_one == h.res) { h.res.a = h.res.a | 8; }
        h.res.b = h.res.a;
    }
}
""", bytes([1, 2, 1, 2]))
    # p == q (1); p is {1, 2} (no 2); n differs from m (4); an invalid header != a valid one
    assert outs[0] == outs[1] == [(2, bytes([1, 2, 1, 2, 5, 5]))]


def test_stack_equality_ignores_the_next_index() -> None:
    """Two stacks of the same headers are equal though one was extracted (next index 2) and
    the other assigned (next index 0), as on BMv2 (p4c's equality-bmv2 test)."""
    program = load_program_text("""
#include <core.p4>
#include <v1model.p4>
header b_t { bit<8> v; }
struct hs { b_t[2] s; b_t res; }
struct ms { }
parser P(packet_in pkt, out hs h, inout ms m, inout standard_metadata_t sm) {
    state start { pkt.extract(h.s.next); pkt.extract(h.s.next); transition accept; }
}
control V(inout hs h, inout ms m) { apply { } }
control I(inout hs h, inout ms m, inout standard_metadata_t sm) {
    apply {
        sm.egress_spec = 2;
        b_t[2] copy;
        copy[0] = h.s[0];
        copy[1] = h.s[1];
        h.res.setValid();
        h.res.v = copy == h.s ? 8w1 : 8w0;
    }
}
control E(inout hs h, inout ms m, inout standard_metadata_t sm) { apply { } }
control C(inout hs h, inout ms m) { apply { } }
control D(packet_out pkt, in hs h) { apply { pkt.emit(h.s); pkt.emit(h.res); } }
V1Switch(P(), V(), I(), E(), C(), D()) main;
""", "stack_eq.p4")
    for pipe in (Pipeline(program), NativePipeline(program)):
        assert pipe.process(bytes([7, 9]), 1) == [(2, bytes([7, 9, 1]))]


def test_varbit_values_compare_and_copy_with_their_bits() -> None:
    """== of varbit fields compares the bits, not only the lengths; a header copied with its
    varbit field takes the bits along (emitted from the copy); stacks compare by elements."""
    program = load_program_text("""
#include <core.p4>
#include <v1model.p4>
header v_t { bit<8> n; varbit<16> v; }
struct hs { v_t a; v_t b; v_t c; }
struct ms { }
parser P(packet_in pkt, out hs h, inout ms m, inout standard_metadata_t sm) {
    state start { pkt.extract(h.a, 16); pkt.extract(h.b, 16); transition accept; }
}
control V(inout hs h, inout ms m) { apply { } }
control I(inout hs h, inout ms m, inout standard_metadata_t sm) {
    apply {
        sm.egress_spec = h.a.v == h.b.v ? 9w2 : 9w3;
        v_t copy = h.a;
        h.c = copy;
        if (h.c == h.a && h.c.v == h.a.v) { h.c.n = h.c.n + 1; }
    }
}
control E(inout hs h, inout ms m, inout standard_metadata_t sm) { apply { } }
control C(inout hs h, inout ms m) { apply { } }
control D(packet_out pkt, in hs h) { apply { pkt.emit(h.a); pkt.emit(h.b); pkt.emit(h.c); } }
V1Switch(P(), V(), I(), E(), C(), D()) main;
""", "varbit_eq.p4")
    differ, same = bytes([1, 0xAB, 0xCD, 1, 0xAB, 0xCE]), bytes([1, 0xAB, 0xCD, 1, 0xAB, 0xCD])
    for pipe in (Pipeline(program), NativePipeline(program)):
        # the bits differ, not the lengths: port 3; h.c = a copy of h.a (bits too), n + 1
        assert pipe.process(differ, 1) == [(3, differ + bytes([2, 0xAB, 0xCD]))]
        assert pipe.process(same, 1) == [(2, same + bytes([2, 0xAB, 0xCD]))]


def test_actions_bound_with_arguments_in_a_table_and_header_out_arguments() -> None:
    """`actions = { put(h.res); }`: the header argument is copied in, written by the action
    (data 0x55 from the default entry) and copied out; an action with an inout header
    argument called from apply copies it back also after `exit`."""
    outs = both("""
control I(inout hs h, inout ms m, inout standard_metadata_t sm) {
    action put(inout pair_t dst, bit<8> v) { dst.setValid(); dst.a = v; dst.b = dst.b + 1; }
    action bump_and_exit(inout pair_t p) { p.a = p.a + 8w16; exit; }
    table t {
        key = { h.p.a: exact; }
        actions = { put(h.res); }
        default_action = put(h.res, 8w0x55);
    }
    apply {
        sm.egress_spec = 2;
        t.apply();
        bump_and_exit(h.q);
    }
}
""", bytes([1, 2, 3, 4]))
    # res = {0x55, 0 + 1}, valid; q.a = 3 + 16 copied back though the action exited
    assert outs[0] == outs[1] == [(2, bytes([1, 2, 0x13, 4, 0x55, 1]))]


def test_functions_returning_headers_and_structs() -> None:
    outs = both("""
pair_t swapped(in pair_t p) {
    if (p.a == 0) { return { 8w0xEE, 8w0xEE }; }
    pair_t r = { p.b, p.a };
    return r;
}
inner_t halves(in bit<8> v) { return { x = v >> 4, y = v[3:0] }; }
control I(inout hs h, inout ms m, inout standard_metadata_t sm) {
    apply {
        sm.egress_spec = 2;
        h.p = swapped(h.p);
        h.q = swapped(h.q);
        m.o.i = halves(h.p.a);
        h.res.setValid();
        h.res.a = m.o.i.x;
        h.res.b = (bit<8>)m.o.i.y;
    }
}
""", bytes([1, 0x52, 0, 9]))
    # p swapped to {0x52, 1}; q.a == 0 gives {0xEE, 0xEE}; 0x52 halves: 5 and 2
    assert outs[0] == outs[1] == [(2, bytes([0x52, 1, 0xEE, 0xEE, 5, 2]))]


def test_slices_and_run_time_indexed_fields_as_inout_arguments() -> None:
    program = load_program_text("""
#include <core.p4>
#include <v1model.p4>
header b_t { bit<8> v; }
header i_t { bit<8> idx; bit<8> f; }
struct hs { i_t i; b_t[2] s; }
struct ms { }
parser P(packet_in pkt, out hs h, inout ms m, inout standard_metadata_t sm) {
    state start { pkt.extract(h.i); pkt.extract(h.s.next); pkt.extract(h.s.next); transition accept; }
}
control V(inout hs h, inout ms m) { apply { } }
control I(inout hs h, inout ms m, inout standard_metadata_t sm) {
    action low_nibble(inout bit<4> n) { n = n + 4w1; }
    action add(inout bit<8> x, bit<8> d) { x = x + d; }
    apply {
        sm.egress_spec = 2;
        low_nibble(h.i.f[3:0]);
        add(h.s[h.i.idx].v, 8w0x10);
    }
}
control E(inout hs h, inout ms m, inout standard_metadata_t sm) { apply { } }
control C(inout hs h, inout ms m) { apply { } }
control D(packet_out pkt, in hs h) { apply { pkt.emit(h.i); pkt.emit(h.s); } }
V1Switch(P(), V(), I(), E(), C(), D()) main;
""", "inout_places.p4")
    for pipe in (Pipeline(program), NativePipeline(program)):
        # f = 0x2F: its low nibble wraps to 0 (0x20); s[1].v = 7 + 0x10
        assert pipe.process(bytes([1, 0x2F, 5, 7]), 1) == [(2, bytes([1, 0x20, 5, 0x17]))]
        assert pipe.process(bytes([0, 0x21, 5, 7]), 1) == [(2, bytes([0, 0x22, 0x15, 7]))]


def test_a_table_with_twelve_key_fields() -> None:
    from p4switch.tables import Exact, TableEntry

    keys = "\n".join(f"            h.k[{i}].v: exact;" for i in range(12))
    program = load_program_text(f"""
#include <core.p4>
#include <v1model.p4>
header b_t {{ bit<8> v; }}
struct hs {{ b_t[12] k; }}
struct ms {{ }}
parser P(packet_in pkt, out hs h, inout ms m, inout standard_metadata_t sm) {{
    state start {{ pkt.extract(h.k); transition accept; }}
}}
control V(inout hs h, inout ms m) {{ apply {{ }} }}
control I(inout hs h, inout ms m, inout standard_metadata_t sm) {{
    action to(bit<9> p) {{ sm.egress_spec = p; }}
    table wide {{
        key = {{
{keys}
        }}
        actions = {{ to; }}
        default_action = to(9w3);
    }}
    apply {{ wide.apply(); }}
}}
control E(inout hs h, inout ms m, inout standard_metadata_t sm) {{ apply {{ }} }}
control C(inout hs h, inout ms m) {{ apply {{ }} }}
control D(packet_out pkt, in hs h) {{ apply {{ pkt.emit(h.k); }} }}
V1Switch(P(), V(), I(), E(), C(), D()) main;
""".replace("pkt.extract(h.k);", " ".join(["pkt.extract(h.k.next);"] * 12)), "twelve.p4")
    frame, other = bytes(range(1, 13)), bytes(range(1, 12)) + bytes(1)
    entry = TableEntry(tuple(Exact(v) for v in frame), 0, "I.to", (2,))
    for pipe in (Pipeline(program), NativePipeline(program)):
        pipe.tables["I.wide"].insert(entry)
        assert [p for p, _ in pipe.process(frame, 1)] == [2]
        assert [p for p, _ in pipe.process(other, 1)] == [3]  # the last key differs
        pipe.tables["I.wide"].delete(entry)
        assert [p for p, _ in pipe.process(frame, 1)] == [3]


def test_a_lookahead_whose_value_is_not_used_still_needs_its_bits() -> None:
    program = load_program_text("""
#include <core.p4>
#include <v1model.p4>
header b_t { bit<8> v; }
struct hs { b_t b; }
struct ms { }
parser P(packet_in pkt, out hs h, inout ms m, inout standard_metadata_t sm) {
    state start { pkt.lookahead<bit<24>>(); pkt.extract(h.b); transition accept; }
}
control V(inout hs h, inout ms m) { apply { } }
control I(inout hs h, inout ms m, inout standard_metadata_t sm) {
    apply { sm.egress_spec = sm.parser_error == error.PacketTooShort ? 9w3 : 9w2; }
}
control E(inout hs h, inout ms m, inout standard_metadata_t sm) { apply { } }
control C(inout hs h, inout ms m) { apply { } }
control D(packet_out pkt, in hs h) { apply { pkt.emit(h.b); } }
V1Switch(P(), V(), I(), E(), C(), D()) main;
""", "lookahead_stmt.p4")
    for pipe in (Pipeline(program), NativePipeline(program)):
        assert pipe.process(bytes([7, 8, 9]), 1) == [(2, bytes([7, 8, 9]))]
        assert pipe.process(bytes([7, 8]), 1) == [(3, bytes([7, 8]))]  # nothing extracted


def test_varbit_fields_swapped_through_a_local() -> None:
    program = load_program_text("""
#include <core.p4>
#include <v1model.p4>
header n_t { bit<8> bits; }
header v_t { varbit<32> v; }
struct hs { n_t n; v_t a; v_t b; }
struct ms { }
parser P(packet_in pkt, out hs h, inout ms m, inout standard_metadata_t sm) {
    state start {
        pkt.extract(h.n); pkt.extract(h.a, (bit<32>)h.n.bits); pkt.extract(h.b, (bit<32>)h.n.bits);
        transition accept;
    }
}
control V(inout hs h, inout ms m) { apply { } }
control I(inout hs h, inout ms m, inout standard_metadata_t sm) {
    varbit<32> s;
    apply { sm.egress_spec = 2; s = h.a.v; h.a.v = h.b.v; h.b.v = s; }
}
control E(inout hs h, inout ms m, inout standard_metadata_t sm) { apply { } }
control C(inout hs h, inout ms m) { apply { } }
control D(packet_out pkt, in hs h) { apply { pkt.emit(h.n); pkt.emit(h.a); pkt.emit(h.b); } }
V1Switch(P(), V(), I(), E(), C(), D()) main;
""", "varbit_swap.p4")
    for pipe in (Pipeline(program), NativePipeline(program)):
        assert pipe.process(bytes([16, 0xA1, 0xA2, 0xB1, 0xB2, 0xFF]), 1) == \
            [(2, bytes([16, 0xB1, 0xB2, 0xA1, 0xA2, 0xFF]))]


def test_a_serializable_enum_header_field() -> None:
    """Its values are its underlying bits: extracted, matched by a table key, compared with
    a member, assigned a member and emitted."""
    from p4switch.tables import Exact, TableEntry

    program = load_program_text("""
#include <core.p4>
#include <v1model.p4>
enum bit<8> Kind { DATA = 0x10, ACK = 0x20, NACK = 0x30 }
header k_t { Kind kind; bit<8> v; }
struct hs { k_t k; }
struct ms { }
parser P(packet_in pkt, out hs h, inout ms m, inout standard_metadata_t sm) {
    state start { pkt.extract(h.k); transition accept; }
}
control V(inout hs h, inout ms m) { apply { } }
control I(inout hs h, inout ms m, inout standard_metadata_t sm) {
    action to(bit<9> p) { sm.egress_spec = p; }
    table by_kind { key = { h.k.kind: exact; } actions = { to; } default_action = to(9w4); }
    apply {
        by_kind.apply();
        if (h.k.kind == Kind.ACK) { h.k.kind = Kind.NACK; }
    }
}
control E(inout hs h, inout ms m, inout standard_metadata_t sm) { apply { } }
control C(inout hs h, inout ms m) { apply { } }
control D(packet_out pkt, in hs h) { apply { pkt.emit(h.k); } }
V1Switch(P(), V(), I(), E(), C(), D()) main;
""", "ser_enum.p4")
    for pipe in (Pipeline(program), NativePipeline(program)):
        pipe.tables["I.by_kind"].insert(TableEntry((Exact(0x20),), 0, "I.to", (2,)))
        assert pipe.process(bytes([0x20, 7]), 1) == [(2, bytes([0x30, 7]))]  # ACK: port 2, now NACK
        assert pipe.process(bytes([0x10, 7]), 1) == [(4, bytes([0x10, 7]))]  # DATA: the default


def test_a_list_value_is_computed_left_to_right() -> None:
    outs = both("""
bit<8> bump(inout bit<8> x) { x = x + 1; return x + 8w10; }
control I(inout hs h, inout ms m, inout standard_metadata_t sm) {
    apply { sm.egress_spec = 2; h.q = { h.p.a, bump(h.p.a) }; }
}
""", bytes([1, 2, 3, 4]))
    # q = {p.a read first (1), bump's 2 + 10}; p.a bumped to 2
    assert outs[0] == outs[1] == [(2, bytes([2, 2, 1, 12]))]


def test_a_tuple_local_takes_a_list_value() -> None:
    # the Python pipeline reads a tuple nowhere but in its initializer: the initializer's call
    # runs once (p.a bumped to 2), natively too (NativePipeline refuses what it cannot compile)
    outs = both("""
bit<8> bump(inout bit<8> x) { x = x + 1; return x + 8w10; }
control I(inout hs h, inout ms m, inout standard_metadata_t sm) {
    tuple<bit<8>, bit<8>> t = { h.p.a, bump(h.p.a) };
    apply { sm.egress_spec = 2; tuple<bit<8>, bit<8>> u = t; }
}
""", bytes([1, 2, 3, 4]))
    assert outs[0] == outs[1] == [(2, bytes([2, 2, 3, 4]))]


def test_controls_applied_by_type_and_passed_as_constructor_arguments() -> None:
    outs = both("""
control AddT(inout bit<8> x);
control Add1(inout bit<8> x) { apply { x = x + 1; } }
control Twice(inout bit<8> x)(AddT c) { apply { x = x << 1; c.apply(x); } }
control I(inout hs h, inout ms m, inout standard_metadata_t sm) {
    Add1() a;
    Twice(a) t;
    apply { sm.egress_spec = 2; t.apply(h.p.a); Add1.apply(h.p.b); }
}
""", bytes([1, 2, 3, 4]))
    # p.a = (1 << 1) + 1 through the instance passed to Twice; p.b = 2 + 1 by Add1's type
    assert outs[0] == outs[1] == [(2, bytes([3, 3, 3, 4]))]


def test_function_inout_arguments_in_run_time_indexed_elements_and_slices() -> None:
    program = load_program_text("""
#include <core.p4>
#include <v1model.p4>
header e_t { bit<8> v; }
header i_t { bit<8> idx; }
struct hs { i_t i; e_t[3] e; }
struct ms { }
bit<8> inc(inout bit<8> x) { x = x + 1; return x; }
bit<4> inc4(inout bit<4> x) { x = x + 1; return x; }
parser P(packet_in pkt, out hs h, inout ms m, inout standard_metadata_t sm) {
    state start { pkt.extract(h.i); pkt.extract(h.e.next); pkt.extract(h.e.next); pkt.extract(h.e.next);
                  transition accept; }
}
control V(inout hs h, inout ms m) { apply { } }
control I(inout hs h, inout ms m, inout standard_metadata_t sm) {
    apply {
        sm.egress_spec = 2;
        h.i.idx = inc(h.e[h.i.idx].v);
        inc4(h.e[0].v[3:0]);
    }
}
control E(inout hs h, inout ms m, inout standard_metadata_t sm) { apply { } }
control C(inout hs h, inout ms m) { apply { } }
control D(packet_out pkt, in hs h) { apply { pkt.emit(h.i); pkt.emit(h.e); } }
V1Switch(P(), V(), I(), E(), C(), D()) main;
""", "dyn_arg.p4")
    frame = bytes([1, 10, 20, 30])
    # e[1].v 20 -> 21 and idx = 21; e[0].v's low nibble 0xA -> 0xB
    for pipe in (Pipeline(program), NativePipeline(program)):
        assert pipe.process(frame, 1) == [(2, bytes([21, 0x0B, 21, 30]))]


def test_casts_to_bool_and_from_a_wide_value() -> None:
    outs = both("""
control I(inout hs h, inout ms m, inout standard_metadata_t sm) {
    apply {
        sm.egress_spec = 2;
        bit<72> w = 72w0xAB_0000_0000_0000_00CD;
        if ((bool)h.p.a[0:0]) { h.q.a = (bit<8>)w; }
        if (!(bool)h.p.b[0:0]) { h.q.b = w[71:64]; }
    }
}
""", bytes([1, 2, 3, 4]))
    # p.a is odd: q.a takes w's low byte; p.b is even: q.b takes its top byte
    assert outs[0] == outs[1] == [(2, bytes([1, 2, 0xCD, 0xAB]))]
