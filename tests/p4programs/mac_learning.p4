/* L2 learning: an unknown source MAC sends a digest (MAC, ingress port) to the controller;
 * frames go to the port the destination MAC was learnt on, unknown ones to the flood port 7,
 * never back out of the port they came in on. An LLDP frame (EtherType 0x88CC) is also
 * reported with a digest of a list, which p4c names digest_0. */
#include <core.p4>
#include <v1model.p4>

header ethernet_t { bit<48> dst; bit<48> src; bit<16> type; }
struct headers_t { ethernet_t eth; }
struct learn_t { bit<48> src; bit<9> port; }
struct meta_t { }

parser LearnParser(packet_in pkt, out headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.eth); transition accept; }
}

control LearnVerify(inout headers_t hdr, inout meta_t meta) { apply { } }

control LearnIngress(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {
    action learn() { digest<learn_t>(1, { hdr.eth.src, sm.ingress_port }); }
    action known() { }
    table smac {
        key = { hdr.eth.src: exact; }
        actions = { learn; known; }
        default_action = learn();
        size = 1024;
    }
    action forward(bit<9> port) { sm.egress_spec = port; }
    action flood() { sm.egress_spec = 7; }
    table dmac {
        key = { hdr.eth.dst: exact; }
        actions = { forward; flood; }
        default_action = flood();
        size = 1024;
    }
    apply {
        if (hdr.eth.type == 0x88CC) { digest(2, { hdr.eth.src, hdr.eth.type }); }
        smac.apply();
        dmac.apply();
        if (sm.egress_spec == sm.ingress_port) { mark_to_drop(sm); }
    }
}

control LearnEgress(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) { apply { } }
control LearnCompute(inout headers_t hdr, inout meta_t meta) { apply { } }
control LearnDeparser(packet_out pkt, in headers_t hdr) { apply { pkt.emit(hdr.eth); } }

V1Switch(LearnParser(), LearnVerify(), LearnIngress(), LearnEgress(), LearnCompute(), LearnDeparser()) main;
