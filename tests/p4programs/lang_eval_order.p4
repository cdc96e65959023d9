// Evaluation order with side effects, as p4c orders it for BMv2: an index of the left side
// that makes a call is evaluated before the right side; an index without calls is read after
// the right side (take() below changes it first); call arguments left to right.
#include <core.p4>
#include <v1model.p4>

header e_t { bit<8> v; }
header out_t { bit<8> first; bit<8> second; bit<8> count; }
struct headers_t { e_t[3] s; out_t o; }
struct meta_t { bit<8> c; bit<32> i; }

bit<32> bump(inout bit<8> c) {
    c = c + 1;
    return (bit<32>)c;
}

bit<8> take(inout bit<32> i) {
    i = 2;
    return 0x77;
}

void pair(in bit<32> a, in bit<32> b, out bit<8> x, out bit<8> y) {
    x = (bit<8>)a;
    y = (bit<8>)b;
}

parser OParser(packet_in pkt, out headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.s.next); pkt.extract(hdr.s.next); pkt.extract(hdr.s.next); transition accept; }
}

control OVerify(inout headers_t hdr, inout meta_t meta) { apply { } }

control OIngress(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {
    apply {
        meta.c = 0;
        hdr.s[bump(meta.c) - 1].v = (bit<8>)bump(meta.c);   // index 0 (c = 1), then value 2
        meta.i = 1;
        hdr.s[meta.i].v = take(meta.i);                      // take sets i to 2, then s[2] is written
        hdr.s[bump(meta.c) - 1].v = hdr.s[2].v + 0x10;       // c = 3: index 2, 0x77 + 0x10
        hdr.o.setValid();
        pair(bump(meta.c), bump(meta.c), hdr.o.first, hdr.o.second);   // 4, then 5
        hdr.o.count = meta.c;
        sm.egress_spec = 2;
    }
}

control OEgress(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) { apply { } }
control OCompute(inout headers_t hdr, inout meta_t meta) { apply { } }
control ODeparser(packet_out pkt, in headers_t hdr) { apply { pkt.emit(hdr.s); pkt.emit(hdr.o); } }

V1Switch(OParser(), OVerify(), OIngress(), OEgress(), OCompute(), ODeparser()) main;
