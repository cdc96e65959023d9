// A control instantiated twice inside ingress, each instance with its own table, action data
// and local variable; `inout` arguments copied back, also when the instance returns early.
// (An `exit` in Scale makes p4c 1.2.4.17 fail: "Compiler Bug: Overwriting definitions".)
#include <core.p4>
#include <v1model.p4>

header in_t  { bit<8> a; bit<8> b; bit<8> op; }
header out_t { bit<8> r1; bit<8> r2; bit<8> hits; bit<8> mark; }
struct headers_t { in_t i; out_t o; }
struct meta_t { }

control Scale(inout bit<8> v, in bit<8> by, inout bit<8> hits) {
    bit<8> touched = 0;
    action mul(bit<8> k) { v = v * k; touched = 1; }
    action add(bit<8> k) { v = v + k; touched = 1; }
    table ops {
        key = { by: exact; }
        actions = { mul; add; NoAction; }
        default_action = NoAction();
    }
    apply {
        if (by == 0xEE) { v = 0xEE; return; }  // v is still copied back to the caller
        if (ops.apply().hit) { hits = hits + touched; }
    }
}

parser SubParser(packet_in pkt, out headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.i); transition accept; }
}

control SubVerify(inout headers_t hdr, inout meta_t meta) { apply { } }

control SubIngress(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {
    Scale() first;
    Scale() second;
    apply {
        hdr.o.setValid();
        hdr.o.r1 = hdr.i.a;
        hdr.o.r2 = hdr.i.b;
        hdr.o.hits = 0;
        hdr.o.mark = 0;
        sm.egress_spec = 2;
        first.apply(hdr.o.r1, hdr.i.op, hdr.o.hits);
        second.apply(hdr.o.r2, hdr.i.op + 1, hdr.o.hits);
        hdr.o.mark = 1;
    }
}

control SubEgress(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) { apply { } }
control SubCompute(inout headers_t hdr, inout meta_t meta) { apply { } }
control SubDeparser(packet_out pkt, in headers_t hdr) { apply { pkt.emit(hdr.i); pkt.emit(hdr.o); } }

V1Switch(SubParser(), SubVerify(), SubIngress(), SubEgress(), SubCompute(), SubDeparser()) main;
