// ECMP over an action selector, with parser value sets: the controller picks which
// EtherTypes carry IPv4 (besides 0x0800) and which IP protocols are marked "fast".
#include <core.p4>
#include <v1model.p4>

header ethernet_t { bit<48> dstAddr; bit<48> srcAddr; bit<16> etherType; }
header ipv4_t {
    bit<4> version; bit<4> ihl; bit<8> diffserv; bit<16> totalLen; bit<16> identification;
    bit<3> flags; bit<13> fragOffset; bit<8> ttl; bit<8> protocol; bit<16> hdrChecksum;
    bit<32> srcAddr; bit<32> dstAddr;
}
struct headers { ethernet_t ethernet; ipv4_t ipv4; }
struct proto_t { @match(ternary) bit<8> protocol; }
struct metadata { bit<1> fast; }

parser Prs(packet_in pkt, out headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    value_set<bit<16>>(4) ipv4_ethertypes;
    value_set<proto_t>(2) fast_protocols;
    state start {
        pkt.extract(hdr.ethernet);
        transition select(hdr.ethernet.etherType) {
            0x0800: parse_ipv4;
            ipv4_ethertypes: parse_ipv4;
            default: accept;
        }
    }
    state parse_ipv4 {
        pkt.extract(hdr.ipv4);
        transition select(hdr.ipv4.protocol) {
            fast_protocols: mark_fast;
            default: accept;
        }
    }
    state mark_fast { meta.fast = 1; transition accept; }
}

control Vrf(inout headers hdr, inout metadata meta) { apply { } }

control Ing(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    action_selector(HashAlgorithm.crc16, 32w16, 32w14) ecmp_selector;
    action drop() { mark_to_drop(sm); }
    action set_nhop(bit<48> dmac, bit<9> port) {
        hdr.ethernet.dstAddr = dmac;
        sm.egress_spec = port;
        hdr.ipv4.ttl = hdr.ipv4.ttl - 1;
    }
    table ecmp {
        key = {
            hdr.ipv4.dstAddr: exact;
            hdr.ipv4.srcAddr: selector;
            hdr.ipv4.dstAddr: selector;
            hdr.ipv4.protocol: selector;
        }
        actions = { set_nhop; drop; }
        implementation = ecmp_selector;
        default_action = drop();
        size = 64;
    }
    apply {
        if (hdr.ipv4.isValid()) {
            ecmp.apply();
            if (meta.fast == 1) { hdr.ipv4.diffserv = 0xb8; }
        } else {
            drop();
        }
    }
}

control Egr(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) { apply { } }
control Cks(inout headers hdr, inout metadata meta) { apply { } }
control Dep(packet_out pkt, in headers hdr) { apply { pkt.emit(hdr.ethernet); pkt.emit(hdr.ipv4); } }

V1Switch(Prs(), Vrf(), Ing(), Egr(), Cks(), Dep()) main;
