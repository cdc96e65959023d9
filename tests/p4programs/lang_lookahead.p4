// lookahead<T> with T a struct (byte-aligned and not) and a header: the value is read without
// advancing, used in assignments and in a select; too few bytes give error.PacketTooShort.
#include <core.p4>
#include <v1model.p4>

struct peek_t { bit<4> version; bit<4> flags; bit<8> kind; }
struct odd_t { bit<3> a; bit<2> b; }                 // 5 bits
header first_t { bit<8> kind; bit<8> len; }
header a_t { bit<8> x; bit<8> y; }
header b_t { bit<16> z; }
header out_t { bit<8> version; bit<8> len; bit<8> odd; bit<8> err; }
struct headers_t { out_t o; a_t a; b_t b; }
struct meta_t { bit<8> version; bit<8> len; bit<8> odd; }

parser LParser(packet_in pkt, out headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {
    state start {
        peek_t p = pkt.lookahead<peek_t>();
        meta.version = (bit<8>)p.version;
        first_t f = pkt.lookahead<first_t>();
        meta.len = f.len;
        odd_t o = pkt.lookahead<odd_t>();
        meta.odd = (bit<8>)o.b;
        transition select(pkt.lookahead<peek_t>().kind) {
            0x0A: parse_a;
            default: parse_b;
        }
    }
    state parse_a { pkt.extract(hdr.a); transition accept; }
    state parse_b { pkt.extract(hdr.b); transition accept; }
}

control LVerify(inout headers_t hdr, inout meta_t meta) { apply { } }

control LIngress(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {
    apply {
        hdr.o.setValid();
        hdr.o.version = meta.version;
        hdr.o.len = meta.len;
        hdr.o.odd = meta.odd;
        if (sm.parser_error == error.PacketTooShort) {
            hdr.o.err = 1;
        }
        sm.egress_spec = 2;
    }
}

control LEgress(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) { apply { } }
control LCompute(inout headers_t hdr, inout meta_t meta) { apply { } }
control LDeparser(packet_out pkt, in headers_t hdr) {
    apply { pkt.emit(hdr.o); pkt.emit(hdr.a); pkt.emit(hdr.b); }
}

V1Switch(LParser(), LVerify(), LIngress(), LEgress(), LCompute(), LDeparser()) main;
