// Language corners that p4c's BMv2 back end accepts: `_` for an out argument, a slice of a
// slice read and written, an action that exits after writing its inout argument (the value
// is copied back before the control ends), and a register declared outside any control and
// shared by ingress and egress.
#include <core.p4>
#include <v1model.p4>

header h_t { bit<8> a; bit<8> b; bit<8> c; bit<8> d; }
struct headers { h_t h; }
struct meta_t { }

// Top level: written in ingress, read in egress. Indexed by the packet's own `a`, so packets
// in flight together never read each other's cell.
register<bit<8>>(256) inverted_a;

parser P(packet_in pk, out headers hd, inout meta_t m, inout standard_metadata_t sm) {
    state start { pk.extract(hd.h); transition accept; }
}
control VC(inout headers hd, inout meta_t m) { apply { } }
control I(inout headers hd, inout meta_t m, inout standard_metadata_t sm) {
    action halves(in bit<8> v, out bit<4> high, out bit<4> low) { high = v[7:4]; low = v[3:0]; }
    action set_and_exit(inout bit<8> v) { v = 0x77; exit; }
    apply {
        sm.egress_spec = 2;
        inverted_a.write((bit<32>)hd.h.a, ~hd.h.a);
        bit<4> high;
        halves(hd.h.a, high, _);          // the low half is not wanted
        hd.h.c = (bit<8>)high;
        hd.h.d[7:4][1:0] = 2w3;           // bits 5..4 of d
        if (hd.h.b == 0xEE) {
            set_and_exit(hd.h.b);          // b becomes 0x77, then the control ends
        }
        hd.h.b = hd.h.b + 1;              // not reached when b was 0xEE
    }
}
control E(inout headers hd, inout meta_t m, inout standard_metadata_t sm) {
    apply { inverted_a.read(hd.h.a, (bit<32>)hd.h.a); }
}
control CC(inout headers hd, inout meta_t m) { apply { } }
control D(packet_out pk, in headers hd) { apply { pk.emit(hd.h); } }
V1Switch(P(), VC(), I(), E(), CC(), D()) main;
