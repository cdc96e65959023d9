/* ECMP load balancing: LPM picks a next hop or a group; the member comes from a crc16 flow
 * hash, a random value or a per-group round-robin register, chosen per UDP port. Direct
 * counter per member, indexed drop counters, priority classes from range/ternary keys. */
#include <core.p4>
#include <v1model.p4>

typedef bit<48> mac_t;
typedef bit<32> ip4_t;
const bit<16> ETH_IPV4 = 16w0x0800;
const bit<8> PROTO_UDP = 17;

header ethernet_t { mac_t dst; mac_t src; bit<16> etherType; }
header ipv4_t {
    bit<4> version; bit<4> ihl; bit<6> dscp; bit<2> ecn; bit<16> totalLen;
    bit<16> identification; bit<3> flags; bit<13> fragOffset; bit<8> ttl; bit<8> protocol;
    bit<16> hdrChecksum; ip4_t srcAddr; ip4_t dstAddr;
}
header udp_t { bit<16> srcPort; bit<16> dstPort; bit<16> len; bit<16> checksum; }

struct headers { ethernet_t ethernet; ipv4_t ipv4; udp_t udp; }
struct metadata {
    bit<16> ecmp_group_id;
    bit<16> ecmp_group_size;
    bit<16> ecmp_member;
    bit<16> l4_src;
    bit<16> l4_dst;
    bit<3>  prio;
}

parser EcmpParser(packet_in pkt, out headers hdr, inout metadata meta,
                  inout standard_metadata_t sm) {
    state start {
        pkt.extract(hdr.ethernet);
        transition select(hdr.ethernet.etherType) {
            ETH_IPV4: parse_ipv4;
            default: accept;
        }
    }
    state parse_ipv4 {
        pkt.extract(hdr.ipv4);
        verify(hdr.ipv4.ihl == 5, error.HeaderTooShort);
        transition select(hdr.ipv4.fragOffset, hdr.ipv4.protocol) {
            (0, PROTO_UDP): parse_udp;
            default: accept;
        }
    }
    state parse_udp {
        pkt.extract(hdr.udp);
        meta.l4_src = hdr.udp.srcPort;
        meta.l4_dst = hdr.udp.dstPort;
        transition accept;
    }
}

control EcmpVerify(inout headers hdr, inout metadata meta) { apply { } }

control EcmpIngress(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    direct_counter(CounterType.packets_and_bytes) member_counter;
    counter(8, CounterType.packets_and_bytes) ingress_drops;
    register<bit<16>>(256) rr_next;

    action drop_no_route() {
        ingress_drops.count(1);
        mark_to_drop(sm);
    }
    action set_nhop(bit<9> port, mac_t smac, mac_t dmac) {
        sm.egress_spec = port;
        hdr.ethernet.src = smac;
        hdr.ethernet.dst = dmac;
        hdr.ipv4.ttl = hdr.ipv4.ttl - 1;
    }
    action set_ecmp_group(bit<16> group_id, bit<16> group_size) {
        meta.ecmp_group_id = group_id;
        meta.ecmp_group_size = group_size;
    }
    action flow_hash() {
        hash(meta.ecmp_member, HashAlgorithm.crc16, (bit<16>)0,
             { hdr.ipv4.srcAddr, hdr.ipv4.dstAddr, hdr.ipv4.protocol, meta.l4_src, meta.l4_dst },
             meta.ecmp_group_size);
    }
    action spray_random() {
        bit<32> r;
        random(r, 0, 0xFFFFFFFF);
        hash(meta.ecmp_member, HashAlgorithm.crc16, (bit<16>)0, { r }, meta.ecmp_group_size);
    }
    action spray_round_robin() {
        bit<16> next;
        rr_next.read(next, (bit<32>)meta.ecmp_group_id);
        hash(meta.ecmp_member, HashAlgorithm.identity, (bit<16>)0, { next }, meta.ecmp_group_size);
        rr_next.write((bit<32>)meta.ecmp_group_id, next + 1);
    }
    action set_priority(bit<3> prio) {
        meta.prio = prio;
        sm.priority = prio;
    }

    table ipv4_lpm {
        key = { hdr.ipv4.dstAddr: lpm; }
        actions = { set_nhop; set_ecmp_group; drop_no_route; }
        default_action = drop_no_route();
    }
    table spray_mode {
        key = { meta.l4_dst: exact; }
        actions = { flow_hash; spray_random; spray_round_robin; }
        default_action = flow_hash();
    }
    table ecmp_member {
        key = { meta.ecmp_group_id: exact; meta.ecmp_member: exact; }
        actions = { set_nhop; @defaultonly NoAction; }
        counters = member_counter;
        const default_action = NoAction();
    }
    table priority_class {
        key = { hdr.ipv4.dstAddr[7:0]: range; hdr.ipv4.dscp: ternary; }
        actions = { set_priority; }
        default_action = set_priority(0);
    }

    apply {
        if (!hdr.ipv4.isValid() || sm.parser_error != error.NoError) {
            ingress_drops.count(3);
            mark_to_drop(sm);
            exit;
        }
        switch (ipv4_lpm.apply().action_run) {
            set_ecmp_group: {
                spray_mode.apply();
                if (!ecmp_member.apply().hit) {
                    ingress_drops.count(2);
                    mark_to_drop(sm);
                }
            }
        }
        priority_class.apply();
    }
}

control EcmpEgress(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    counter(4096, CounterType.packets) port_tx;
    apply {
        port_tx.count((bit<32>)sm.egress_port * 8 + (bit<32>)sm.priority);
        if (sm.enq_qdepth > 10 && hdr.ipv4.ecn != 0) {
            hdr.ipv4.ecn = 3;
        }
    }
}

control EcmpCompute(inout headers hdr, inout metadata meta) {
    apply {
        update_checksum(hdr.ipv4.isValid(),
            { hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.dscp, hdr.ipv4.ecn, hdr.ipv4.totalLen,
              hdr.ipv4.identification, hdr.ipv4.flags, hdr.ipv4.fragOffset, hdr.ipv4.ttl,
              hdr.ipv4.protocol, hdr.ipv4.srcAddr, hdr.ipv4.dstAddr },
            hdr.ipv4.hdrChecksum, HashAlgorithm.csum16);
    }
}

control EcmpDeparser(packet_out pkt, in headers hdr) {
    apply { pkt.emit(hdr); }
}

V1Switch(EcmpParser(), EcmpVerify(), EcmpIngress(), EcmpEgress(), EcmpCompute(), EcmpDeparser()) main;
