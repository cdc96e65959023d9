/* IPv4 with options: the options are a varbit extracted with the two-argument extract; the
 * header checksum is verified and recomputed over the options too. TTL decrement only. */
#include <core.p4>
#include <v1model.p4>

header ethernet_t { bit<48> dst; bit<48> src; bit<16> etherType; }
header ipv4_t {
    bit<4> version; bit<4> ihl; bit<8> tos; bit<16> totalLen; bit<16> id; bit<3> flags;
    bit<13> frag; bit<8> ttl; bit<8> protocol; bit<16> csum; bit<32> src; bit<32> dst;
}
header ipv4_options_t { varbit<320> options; }
struct headers { ethernet_t eth; ipv4_t ip; ipv4_options_t opts; }
struct metadata { }

parser OptParser(packet_in pkt, out headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    state start {
        pkt.extract(hdr.eth);
        transition select(hdr.eth.etherType) { 0x0800: ip; default: accept; }
    }
    state ip {
        pkt.extract(hdr.ip);
        verify(hdr.ip.ihl >= 5, error.HeaderTooShort);
        pkt.extract(hdr.opts, ((bit<32>)hdr.ip.ihl - 5) * 32);
        transition accept;
    }
}

control OptVerify(inout headers hdr, inout metadata meta) {
    apply {
        verify_checksum(hdr.ip.isValid(),
            { hdr.ip.version, hdr.ip.ihl, hdr.ip.tos, hdr.ip.totalLen, hdr.ip.id, hdr.ip.flags,
              hdr.ip.frag, hdr.ip.ttl, hdr.ip.protocol, hdr.ip.src, hdr.ip.dst, hdr.opts.options },
            hdr.ip.csum, HashAlgorithm.csum16);
    }
}

control OptIngress(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    apply {
        if (!hdr.ip.isValid() || sm.checksum_error == 1 || sm.parser_error != error.NoError) {
            mark_to_drop(sm);
        } else {
            hdr.ip.ttl = hdr.ip.ttl - 1;
            sm.egress_spec = 2;
        }
    }
}

control OptEgress(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) { apply { } }

control OptCompute(inout headers hdr, inout metadata meta) {
    apply {
        update_checksum(hdr.ip.isValid(),
            { hdr.ip.version, hdr.ip.ihl, hdr.ip.tos, hdr.ip.totalLen, hdr.ip.id, hdr.ip.flags,
              hdr.ip.frag, hdr.ip.ttl, hdr.ip.protocol, hdr.ip.src, hdr.ip.dst, hdr.opts.options },
            hdr.ip.csum, HashAlgorithm.csum16);
    }
}

control OptDeparser(packet_out pkt, in headers hdr) {
    apply { pkt.emit(hdr.eth); pkt.emit(hdr.ip); pkt.emit(hdr.opts); }
}

V1Switch(OptParser(), OptVerify(), OptIngress(), OptEgress(), OptCompute(), OptDeparser()) main;
