// Source routing over a header stack: the parser extracts hops into `hops.next` until one has
// its bottom-of-stack bit set (`hops.last.bos`), ingress forwards on the first hop and pops it,
// a marked packet gets two hops pushed in front, the deparser emits the whole stack. A fifth
// hop overflows the stack (StackOutOfBounds), a missing one is PacketTooShort: both reach
// ingress in standard_metadata.parser_error.
#include <core.p4>
#include <v1model.p4>

const bit<16> TYPE_ROUTE = 0x1234;
const bit<16> TYPE_PUSH = 0x9999;

header ethernet_t { bit<48> dst; bit<48> src; bit<16> type; }
header hop_t { bit<1> bos; bit<7> port; }
struct headers_t { ethernet_t eth; hop_t[4] hops; }
struct meta_t { }

parser RouteParser(packet_in pkt, out headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {
    state start {
        pkt.extract(hdr.eth);
        transition select(hdr.eth.type) { TYPE_ROUTE: parse_hop; default: accept; }
    }
    state parse_hop {
        pkt.extract(hdr.hops.next);
        transition select(hdr.hops.last.bos) { 1: accept; default: parse_hop; }
    }
}

control RouteVerify(inout headers_t hdr, inout meta_t meta) { apply { } }

control RouteIngress(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {
    apply {
        if (sm.parser_error == error.StackOutOfBounds) {
            sm.egress_spec = 7;
        } else if (sm.parser_error == error.PacketTooShort) {
            sm.egress_spec = 6;
        } else if (hdr.hops[0].isValid()) {
            sm.egress_spec = (bit<9>)hdr.hops[0].port;
            hdr.hops.pop_front(1);
            if (!hdr.hops[0].isValid()) {
                hdr.eth.type = 0x0800;  // the last hop is used up
            }
        } else if (hdr.eth.type == TYPE_PUSH) {
            hdr.hops.push_front(2);
            hdr.hops[0].setValid();
            hdr.hops[0].bos = 0;
            hdr.hops[0].port = 5;
            hdr.hops[1].setValid();
            hdr.hops[1].bos = 1;
            hdr.hops[1].port = 6;
            hdr.eth.type = TYPE_ROUTE;
            sm.egress_spec = 1;
        } else {
            mark_to_drop(sm);
        }
    }
}

control RouteEgress(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) { apply { } }
control RouteCompute(inout headers_t hdr, inout meta_t meta) { apply { } }
control RouteDeparser(packet_out pkt, in headers_t hdr) { apply { pkt.emit(hdr.eth); pkt.emit(hdr.hops); } }

V1Switch(RouteParser(), RouteVerify(), RouteIngress(), RouteEgress(), RouteCompute(), RouteDeparser()) main;
