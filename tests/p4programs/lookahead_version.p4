// The parser peeks at the first 4 bits after Ethernet (`lookahead<bit<4>>`, not a whole
// byte) to tell an IPv4-like header from an IPv6-like one; a frame that ends right after
// Ethernet fails the peek with PacketTooShort, which ingress sees in parser_error.
#include <core.p4>
#include <v1model.p4>

header eth_t { bit<48> dst; bit<48> src; bit<16> type; }
header v4_t { bit<4> version; bit<4> ihl; bit<8> tos; }
header v6_t { bit<4> version; bit<8> tc; bit<4> flow; }
struct headers_t { eth_t eth; v4_t v4; v6_t v6; }
struct meta_t { }

parser PeekParser(packet_in pkt, out headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {
    state start {
        pkt.extract(hdr.eth);
        transition select(hdr.eth.type) { 0x0800: guess; 0x86DD: guess; default: accept; }
    }
    state guess {
        transition select(pkt.lookahead<bit<4>>()) { 4: v4; 6: v6; default: accept; }
    }
    state v4 { pkt.extract(hdr.v4); transition accept; }
    state v6 { pkt.extract(hdr.v6); transition accept; }
}

control PeekVerify(inout headers_t hdr, inout meta_t meta) { apply { } }

control PeekIngress(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {
    apply {
        if (sm.parser_error == error.PacketTooShort) {
            sm.egress_spec = 6;
        } else if (hdr.v4.isValid()) {
            hdr.v4.tos = hdr.v4.tos + 1;
            sm.egress_spec = 4;
        } else if (hdr.v6.isValid()) {
            hdr.v6.tc = hdr.v6.tc + 1;
            sm.egress_spec = 5;
        } else {
            sm.egress_spec = 1;
        }
    }
}

control PeekEgress(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) { apply { } }
control PeekCompute(inout headers_t hdr, inout meta_t meta) { apply { } }
control PeekDeparser(packet_out pkt, in headers_t hdr) {
    apply { pkt.emit(hdr.eth); pkt.emit(hdr.v4); pkt.emit(hdr.v6); }
}

V1Switch(PeekParser(), PeekVerify(), PeekIngress(), PeekEgress(), PeekCompute(), PeekDeparser()) main;
