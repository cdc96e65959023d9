// A header union: extract into one member, setValid on another (the first becomes invalid),
// setInvalid on the only valid one (the union is then invalid and emits nothing), and
// isValid on the union.
#include <core.p4>
#include <v1model.p4>

header v4_t { bit<8> ver; bit<8> a; }
header v6_t { bit<8> ver; bit<16> b; }
header_union ip_t { v4_t v4; v6_t v6; }
header out_t { bit<8> which; bit<8> valid; }
struct headers_t { out_t o; ip_t ip; }
struct meta_t { }

parser UnParser(packet_in pkt, out headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {
    state start {
        transition select(pkt.lookahead<bit<8>>()) { 4: p4; 6: p6; default: accept; }
    }
    state p4 { pkt.extract(hdr.ip.v4); transition accept; }
    state p6 { pkt.extract(hdr.ip.v6); transition accept; }
}

control UnVerify(inout headers_t hdr, inout meta_t meta) { apply { } }

control UnIngress(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {
    apply {
        hdr.o.setValid();
        hdr.o.which = 0;
        hdr.o.valid = hdr.ip.isValid() ? 8w1 : 8w0;
        if (hdr.ip.v4.isValid()) {
            hdr.o.which = 4;
            if (hdr.ip.v4.a == 0xFF) {
                hdr.ip.v6.setValid();  // v4 becomes invalid
                hdr.ip.v6.ver = 6;
                hdr.ip.v6.b = 0xBEEF;
            }
        } else if (hdr.ip.v6.isValid()) {
            hdr.o.which = 6;
            hdr.ip.v6.setInvalid();
        }
        sm.egress_spec = 2;
    }
}

control UnEgress(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) { apply { } }
control UnCompute(inout headers_t hdr, inout meta_t meta) { apply { } }
control UnDeparser(packet_out pkt, in headers_t hdr) { apply { pkt.emit(hdr.o); pkt.emit(hdr.ip); } }

V1Switch(UnParser(), UnVerify(), UnIngress(), UnEgress(), UnCompute(), UnDeparser()) main;
