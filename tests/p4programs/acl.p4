/* Ternary ACL with priorities in front of an exact L2 forwarding table. Ternary keys only, so
 * that p4c's BMv2 STF driver (which has no range or optional keys) can install its entries. */
#include <core.p4>
#include <v1model.p4>

header ethernet_t { bit<48> dst; bit<48> src; bit<16> etherType; }
header ipv4_t {
    bit<4> version; bit<4> ihl; bit<8> tos; bit<16> totalLen; bit<16> id; bit<3> flags;
    bit<13> frag; bit<8> ttl; bit<8> protocol; bit<16> csum; bit<32> src; bit<32> dst;
}
header ports_t { bit<16> sport; bit<16> dport; }
struct headers { ethernet_t eth; ipv4_t ip; ports_t l4; }
struct metadata { bit<1> acl_denied; }

parser AclParser(packet_in pkt, out headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    state start {
        pkt.extract(hdr.eth);
        transition select(hdr.eth.etherType) { 0x0800: ip; default: accept; }
    }
    state ip {
        pkt.extract(hdr.ip);
        transition select(hdr.ip.protocol) { 6: l4; 17: l4; default: accept; }
    }
    state l4 { pkt.extract(hdr.l4); transition accept; }
}

control AclVerify(inout headers hdr, inout metadata meta) { apply { } }

control AclIngress(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    counter(4, CounterType.packets) verdicts;
    action deny() { meta.acl_denied = 1; verdicts.count(0); }
    action permit() { verdicts.count(1); }
    action forward(bit<9> port) { sm.egress_spec = port; }
    action flood_drop() { mark_to_drop(sm); }

    table acl {
        key = {
            hdr.ip.src: ternary;
            hdr.ip.dst: ternary;
            hdr.ip.protocol: ternary;
            hdr.l4.dport: ternary;
            hdr.l4.isValid(): ternary @name("l4_valid");
        }
        actions = { deny; permit; }
        default_action = permit();
    }
    table l2 {
        key = { hdr.eth.dst: exact; }
        actions = { forward; flood_drop; }
        const default_action = flood_drop();
        const entries = {
            0x000000000002: forward(2);
            0x000000000003: forward(3);
        }
    }
    apply {
        if (hdr.ip.isValid()) {
            acl.apply();
        }
        if (meta.acl_denied == 1) {
            mark_to_drop(sm);
        } else {
            l2.apply();
        }
    }
}

control AclEgress(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) { apply { } }
control AclCompute(inout headers hdr, inout metadata meta) { apply { } }
control AclDeparser(packet_out pkt, in headers hdr) {
    apply { pkt.emit(hdr.eth); pkt.emit(hdr.ip); pkt.emit(hdr.l4); }
}

V1Switch(AclParser(), AclVerify(), AclIngress(), AclEgress(), AclCompute(), AclDeparser()) main;
