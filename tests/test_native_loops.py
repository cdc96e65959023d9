"""resubmit and recirculate natively (NativePipeline.process): the resubmitted packet is the
arriving frame through ingress again, the recirculated one the deparsed frame, each with fresh
metadata, its instance type and the fields of its field list; checked on both datapaths
against bytes worked out by hand. The native switch loops do not run them (the switch falls
back to the Python datapath, tests/test_native_pipeline.py)."""

from __future__ import annotations

import pytest

from p4switch.frontend import load_program_text
from p4switch.native.build import find_compiler
from p4switch.native.pipeline import NativePipeline, try_native
from p4switch.pipeline import Pipeline

pytestmark = pytest.mark.skipif(find_compiler() is None, reason="no C compiler on this machine")

PROGRAM = """
#include <core.p4>
#include <v1model.p4>
header h_t { bit<8> kind; bit<8> kept; bit<8> itype; }
struct hs { h_t h; }
struct ms { @field_list(0) bit<8> kept; bit<8> lost; }
parser P(packet_in pkt, out hs h, inout ms m, inout standard_metadata_t sm) {
    state start { pkt.extract(h.h); transition accept; }
}
control V(inout hs h, inout ms m) { apply { } }
control I(inout hs h, inout ms m, inout standard_metadata_t sm) {
    apply {
        sm.egress_spec = 2;
        if (sm.instance_type == 0 && h.h.kind == 1) { m.kept = 7; m.lost = 1; resubmit_preserving_field_list(0); }
        if (sm.instance_type == 6 || sm.instance_type == 4) {
            h.h.kept = m.kept + m.lost;
            h.h.itype = (bit<8>)sm.instance_type;
        }
    }
}
control E(inout hs h, inout ms m, inout standard_metadata_t sm) {
    apply {
        if (sm.instance_type == 0 && h.h.kind == 2) {
            m.kept = 9; m.lost = 1; h.h.kind = 3; recirculate_preserving_field_list(0);
        }
    }
}
control C(inout hs h, inout ms m) { apply { } }
control D(packet_out pkt, in hs h) { apply { pkt.emit(h.h); } }
V1Switch(P(), V(), I(), E(), C(), D()) main;
"""

CASES = [
    # resubmitted: the arriving frame again, kept (7) preserved, lost (1) not, instance type 6
    (bytes([1, 0, 0, 0xAA]), [(2, bytes([1, 7, 6, 0xAA]))]),
    # recirculated: the deparsed frame (kind 3) again, kept (9) preserved, instance type 4
    (bytes([2, 0, 0, 0xAA]), [(2, bytes([3, 9, 4, 0xAA]))]),
    # neither
    (bytes([5, 0, 0, 0xAA]), [(2, bytes([5, 0, 0, 0xAA]))]),
]


@pytest.mark.parametrize("frame, expected", CASES)
def test_resubmit_and_recirculate_on_both_datapaths(frame: bytes, expected: list) -> None:
    program = load_program_text(PROGRAM, "loops.p4")
    native = NativePipeline(program)
    try:
        outs = [Pipeline(program).process(frame, 1), native.process(frame, 1)]
    finally:
        native.close()
    assert outs[0] == outs[1] == expected


def test_the_native_switch_falls_back_with_the_reason() -> None:
    program = load_program_text(PROGRAM, "loops.p4")
    native, why = try_native(program, for_switch=True)
    assert native is None
    assert "extern resubmit_preserving_field_list" in why
    pipe, _ = try_native(program)  # NativePipeline.process runs it
    assert pipe is not None
    pipe.close()
