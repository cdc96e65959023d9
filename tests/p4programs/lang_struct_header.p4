// Struct-typed fields inside a header (P4-16 1.2.2+), nested: extracted and emitted in
// place, read and written field by field and as a whole struct, and matched as a table key.
#include <core.p4>
#include <v1model.p4>

struct nibbles_t { bit<4> hi; bit<4> lo; }
struct pair_t { nibbles_t first; bit<8> second; }
header rec_t { pair_t p; bit<16> total; }
struct headers_t { rec_t r; }
struct meta_t { pair_t saved; }

parser SParser(packet_in pkt, out headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.r); transition accept; }
}

control SVerify(inout headers_t hdr, inout meta_t meta) { apply { } }

control SIngress(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {
    action to_port(bit<9> port) { sm.egress_spec = port; }
    table by_second {
        key = { hdr.r.p.second: exact; }
        actions = { to_port; }
        default_action = to_port(2);
    }
    apply {
        meta.saved = hdr.r.p;                          // the whole struct out of the header
        hdr.r.p.first.hi = meta.saved.first.lo;        // swap the nibbles
        hdr.r.p.first.lo = meta.saved.first.hi;
        hdr.r.total = (bit<16>)hdr.r.p.second + (bit<16>)meta.saved.first.hi;
        by_second.apply();
    }
}

control SEgress(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) { apply { } }
control SCompute(inout headers_t hdr, inout meta_t meta) { apply { } }
control SDeparser(packet_out pkt, in headers_t hdr) { apply { pkt.emit(hdr.r); } }

V1Switch(SParser(), SVerify(), SIngress(), SEgress(), SCompute(), SDeparser()) main;
