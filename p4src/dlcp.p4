/*
 * DLCP data plane for the v1model architecture (BMv2 simple_switch and the embedded target).
 *
 * Mechanisms (see p4src/README.md for the full design):
 *   - IPv4 LPM routing to a next hop or an ECMP group; TTL decrement and checksum update.
 *   - ECMP member choice: per-flow 5-tuple hash for ordinary traffic; per-packet spraying
 *     (random or round-robin) of DLCP packets, selected per job by the controller.
 *   - Layer-priority table: (job, tensor, magnitude class) -> queue priority and DSCP.
 *   - Early dropping in ingress, before the packet takes a slot in its queue: a drop-eligible
 *     packet of a (job, layer, magnitude) class the controller lists is dropped when the
 *     queue it would join (egress port and priority) is at least the class's depth
 *     threshold. Ingress cannot see queues in v1model, so egress writes each queue's depth
 *     into a register at every departure and ingress adds the packets it sends there since.
 *   - ECN marking in egress, per job with its own depth threshold, on the depth the packet
 *     met in its own queue.
 *   - Traffic classes for any other traffic: DSCP (optionally the 5-tuple) -> queue priority,
 *     and per queue class a RED-like step: Not-ECT packets are dropped early (in ingress) when
 *     their queue holds the class's threshold, ECN-capable ones are marked CE (in egress).
 *   - A commodity profile (keyless table `profile`): DLCP packets are treated like any other
 *     traffic (class from DSCP only, the per-class drop/mark step, flow hashing), as a switch
 *     with DSCP queues and WRED/ECN would treat them.
 *   - A flow-hash seed (keyless table `hash_seed`, default 0: the plain 5-tuple hash): a
 *     nonzero seed joins the 5-tuple in the ECMP hash, so a run can move flows whose
 *     5-tuple never changes (DLCP's fixed UDP ports) to other members.
 *   - A lossy link (experiments only, `link_loss`): after a packet left its queue, the link of
 *     its egress port loses it with the entry's probability (v1model random()), counted.
 * Each mechanism has its own table; none implies another.
 * The controller writes tables only and reads counters only (BMv2 does not expose registers
 * over P4Runtime); the registers below are private to the data plane.
 */

#include <core.p4>
#include <v1model.p4>

const bit<16> ETHERTYPE_IPV4 = 0x0800;
const bit<8>  IP_PROTO_TCP   = 6;
const bit<8>  IP_PROTO_UDP   = 17;
const bit<16> DLCP_UDP_PORT  = 19600;
const bit<4>  DLCP_VERSION   = 1;

const bit<2>  ECN_NOT_ECT = 0;
const bit<2>  ECN_CE      = 3;

/* Indices of DlcpIngress.ingress_drops. */
const bit<32> DROP_NO_ROUTE       = 1;
const bit<32> DROP_TTL_EXPIRED    = 2;
const bit<32> DROP_PARSER_ERROR   = 3;
const bit<32> DROP_NOT_IPV4       = 4;
const bit<32> DROP_IPV4_CHECKSUM  = 5;
const bit<32> DROP_EARLY          = 6;   /* drop-eligible class over its depth threshold */
const bit<32> DROP_QUEUE_RED      = 7;   /* Not-ECT packet over its queue step's threshold (queue_red) */

const bit<32> DROP_REASONS   = 8;
const bit<32> MAX_JOBS       = 1024;
const bit<32> PORT_TX_SIZE   = 4096;   /* 512 ports x 8 priorities */
const bit<32> QUEUES         = 4096;   /* queue_depth: index egress_port * 8 + priority */
const bit<32> ECMP_GROUPS    = 1024;   /* round-robin state: group ids below this */
const bit<32> SPRAY_MEMBERS  = 16;     /* sprayed_member counts members below this per group */
const bit<32> PORTS          = 512;    /* link_loss_drops: index egress_port */

/* Member selection modes (metadata only). */
const bit<2> LB_FLOW_HASH   = 0;
const bit<2> LB_RANDOM      = 1;
const bit<2> LB_ROUND_ROBIN = 2;

error {
    IPv4IncorrectVersion,
    IPv4OptionsNotSupported,
    DlcpUnsupportedVersion
}

header ethernet_t {
    bit<48> dstAddr;
    bit<48> srcAddr;
    bit<16> etherType;
}

header ipv4_t {
    bit<4>  version;
    bit<4>  ihl;
    bit<6>  dscp;
    bit<2>  ecn;
    bit<16> totalLen;
    bit<16> identification;
    bit<1>  flag_rsvd;
    bit<1>  flag_df;
    bit<1>  flag_mf;
    bit<13> fragOffset;
    bit<8>  ttl;
    bit<8>  protocol;
    bit<16> hdrChecksum;
    bit<32> srcAddr;
    bit<32> dstAddr;
}

/* Only the ports of TCP are needed (for the flow hash); the rest stays payload. */
header tcp_ports_t {
    bit<16> srcPort;
    bit<16> dstPort;
}

header udp_t {
    bit<16> srcPort;
    bit<16> dstPort;
    bit<16> length;
    bit<16> checksum;
}

/* 28 bytes right after UDP (destination port 19600); multi-byte fields big-endian. */
header dlcp_t {
    bit<4>  version;
    bit<4>  msg_type;
    bit<4>  flags_rsvd;
    bit<1>  ecn_echo;
    bit<1>  retx;
    bit<1>  last;
    bit<1>  drop_eligible;
    bit<16> job_id;
    bit<16> worker_id;
    bit<16> tensor_id;
    bit<32> iteration;
    bit<32> offset;
    bit<32> tensor_len;
    bit<16> count;
    bit<8>  mag_class;
    bit<8>  prio_hint;
    bit<32> seq;
}

struct headers_t {
    ethernet_t  ethernet;
    ipv4_t      ipv4;
    tcp_ports_t tcp;
    udp_t       udp;
    dlcp_t      dlcp;
}

struct metadata_t {
    bit<16> l4_src;
    bit<16> l4_dst;
    bit<16> ecmp_group_id;
    bit<16> ecmp_group_size;
    bit<16> ecmp_member;
    bit<2>  lb_mode;
    bit<3>  dlcp_prio;        /* queue priority of the packet (DLCP's or its traffic class's) */
    bit<32> seed;             /* this switch's spraying seed (switch_seed) */
    bit<19> drop_threshold;   /* early-drop depth threshold of the packet's class */
    bit<1>  drop_class;       /* 1: the packet's class is listed in drop_class */
    bit<19> ecn_threshold;
    bit<1>  commodity;        /* 1: the commodity profile (profile table) */
    bit<1>  dlcp_tables;      /* 1: a DLCP packet handled by the DLCP tables (DLCP profile) */
    bit<1>  red_class;        /* 1: the early-drop threshold is its traffic class's (queue_red) */
    bit<32> flow_seed;        /* hash_seed: 0 hashes the 5-tuple alone */
    bit<32> loss_threshold;   /* link_loss: lost when a draw in [0, 2^32 - 2] is below this */
}

/* Estimated depth of each queue (index egress_port * 8 + priority), shared by ingress and
 * egress: egress writes the real depth at each departure (deq_qdepth), ingress adds one for
 * each packet it sends to the queue (p4src/README.md: how stale it can be). */
register<bit<19>>(QUEUES) queue_depth;

parser DlcpParser(packet_in packet,
                  out headers_t hdr,
                  inout metadata_t meta,
                  inout standard_metadata_t standard_metadata) {
    state start {
        packet.extract(hdr.ethernet);
        transition select(hdr.ethernet.etherType) {
            ETHERTYPE_IPV4: parse_ipv4;
            default: accept;
        }
    }

    state parse_ipv4 {
        packet.extract(hdr.ipv4);
        verify(hdr.ipv4.version == 4, error.IPv4IncorrectVersion);
        verify(hdr.ipv4.ihl == 5, error.IPv4OptionsNotSupported);
        /* Fragments other than an unfragmented datagram carry no usable L4 header. */
        transition select(hdr.ipv4.flag_mf, hdr.ipv4.fragOffset, hdr.ipv4.protocol) {
            (0, 0, IP_PROTO_TCP): parse_tcp;
            (0, 0, IP_PROTO_UDP): parse_udp;
            default: accept;
        }
    }

    state parse_tcp {
        packet.extract(hdr.tcp);
        meta.l4_src = hdr.tcp.srcPort;
        meta.l4_dst = hdr.tcp.dstPort;
        transition accept;
    }

    state parse_udp {
        packet.extract(hdr.udp);
        meta.l4_src = hdr.udp.srcPort;
        meta.l4_dst = hdr.udp.dstPort;
        transition select(hdr.udp.dstPort) {
            DLCP_UDP_PORT: parse_dlcp;
            default: accept;
        }
    }

    state parse_dlcp {
        packet.extract(hdr.dlcp);
        verify(hdr.dlcp.version == DLCP_VERSION, error.DlcpUnsupportedVersion);
        transition accept;
    }
}

control DlcpVerifyChecksum(inout headers_t hdr, inout metadata_t meta) {
    apply {
        verify_checksum(
            hdr.ipv4.isValid(),
            { hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.dscp, hdr.ipv4.ecn,
              hdr.ipv4.totalLen, hdr.ipv4.identification,
              hdr.ipv4.flag_rsvd, hdr.ipv4.flag_df, hdr.ipv4.flag_mf, hdr.ipv4.fragOffset,
              hdr.ipv4.ttl, hdr.ipv4.protocol, hdr.ipv4.srcAddr, hdr.ipv4.dstAddr },
            hdr.ipv4.hdrChecksum,
            HashAlgorithm.csum16);
    }
}

control DlcpIngress(inout headers_t hdr,
                    inout metadata_t meta,
                    inout standard_metadata_t standard_metadata) {

    counter(DROP_REASONS, CounterType.packets_and_bytes) ingress_drops;
    counter(MAX_JOBS, CounterType.packets_and_bytes) job_rx;
    direct_counter(CounterType.packets_and_bytes) ecmp_member_counter;
    counter(MAX_JOBS, CounterType.packets_and_bytes) early_drops;
    /* Not-ECT packets dropped early by their traffic class's threshold: egress_port * 8 + priority. */
    counter(QUEUES, CounterType.packets_and_bytes) queue_red_drops;
    /* Sprayed DLCP packets per ECMP member: group_id * SPRAY_MEMBERS + member (groups below
     * ECMP_GROUPS, members below SPRAY_MEMBERS); flow-hashed traffic is not counted here. */
    counter(ECMP_GROUPS * SPRAY_MEMBERS, CounterType.packets_and_bytes) sprayed_member;
    /* Next round-robin position per ECMP group: internal state, never read by the controller. */
    register<bit<32>>(ECMP_GROUPS) rr_position;

    action drop_with_reason(bit<32> reason) {
        ingress_drops.count(reason);
        mark_to_drop(standard_metadata);
    }

    action drop_no_route() {
        ingress_drops.count(DROP_NO_ROUTE);
        mark_to_drop(standard_metadata);
    }

    action set_nhop(bit<9> port, bit<48> smac, bit<48> dmac) {
        standard_metadata.egress_spec = port;
        hdr.ethernet.srcAddr = smac;
        hdr.ethernet.dstAddr = dmac;
    }

    action set_ecmp_group(bit<16> group_id, bit<16> group_size) {
        meta.ecmp_group_id = group_id;
        meta.ecmp_group_size = group_size;
    }

    action set_priority(bit<3> prio, bit<6> dscp) {
        standard_metadata.priority = prio;
        meta.dlcp_prio = prio;
        hdr.ipv4.dscp = dscp;
    }

    action spray_random() {
        meta.lb_mode = LB_RANDOM;
    }

    action spray_round_robin() {
        meta.lb_mode = LB_ROUND_ROBIN;
    }

    action flow_hash() {
        meta.lb_mode = LB_FLOW_HASH;
    }

    action set_seed(bit<32> seed) {
        meta.seed = seed;
    }

    action drop_above(bit<19> queue_threshold) {
        meta.drop_class = 1;
        meta.drop_threshold = queue_threshold;
    }

    action set_traffic_class(bit<3> prio) {
        standard_metadata.priority = prio;
        meta.dlcp_prio = prio;
    }

    action red_drop_above(bit<19> queue_threshold) {
        meta.drop_class = 1;
        meta.red_class = 1;
        meta.drop_threshold = queue_threshold;
    }

    action set_hash_seed(bit<32> seed) {
        meta.flow_seed = seed;
    }

    action profile_dlcp() {
        meta.commodity = 0;
    }

    action profile_commodity() {
        meta.commodity = 1;
    }

    table ipv4_lpm {
        key = {
            hdr.ipv4.dstAddr: lpm;
        }
        actions = {
            set_nhop;
            set_ecmp_group;
            drop_no_route;
        }
        default_action = drop_no_route();
        size = 1024;
    }

    table ecmp_member {
        key = {
            meta.ecmp_group_id: exact;
            meta.ecmp_member: exact;
        }
        actions = {
            set_nhop;
            @defaultonly NoAction;
        }
        default_action = NoAction();
        counters = ecmp_member_counter;
        size = 4096;
    }

    table spray_mode {
        key = {
            hdr.dlcp.job_id: exact;
        }
        actions = {
            spray_random;
            spray_round_robin;
            flow_hash;
        }
        default_action = flow_hash();
        size = 1024;
    }

    table layer_priority {
        key = {
            hdr.dlcp.job_id: exact;
            hdr.dlcp.tensor_id: range;
            hdr.dlcp.mag_class: range;
        }
        actions = {
            set_priority;
        }
        default_action = set_priority(0, 0);
        size = 4096;
    }

    /* Keyless: the controller sets the default action per switch (from its device id). */
    table switch_seed {
        key = { }
        actions = {
            set_seed;
        }
        default_action = set_seed(0);
        size = 1;
    }

    /* Drop-eligible classes of a job: (layers, magnitude classes) -> queue depth threshold. */
    table drop_class {
        key = {
            hdr.dlcp.job_id: exact;
            hdr.dlcp.tensor_id: range;
            hdr.dlcp.mag_class: range;
        }
        actions = {
            drop_above;
            @defaultonly NoAction;
        }
        default_action = NoAction();
        size = 4096;
    }

    /* Keyless: the flow hash's seed (set per switch per run by `gradfabric experiment trace`). */
    table hash_seed {
        key = { }
        actions = {
            set_hash_seed;
        }
        default_action = set_hash_seed(0);
        size = 1;
    }

    /* Keyless: the controller sets the default action (the policy's profile). */
    table profile {
        key = { }
        actions = {
            profile_dlcp;
            profile_commodity;
        }
        default_action = profile_dlcp();
        size = 1;
    }

    /* Any traffic the DLCP tables do not handle (all of it in the commodity profile):
     * DSCP, optionally the 5-tuple, -> queue priority. Entries need a priority (highest wins). */
    table traffic_class {
        key = {
            hdr.ipv4.dscp: ternary;
            hdr.ipv4.protocol: ternary;
            hdr.ipv4.srcAddr: ternary;
            hdr.ipv4.dstAddr: ternary;
            meta.l4_src: ternary;
            meta.l4_dst: ternary;
        }
        actions = {
            set_traffic_class;
            @defaultonly NoAction;
        }
        default_action = NoAction();
        size = 1024;
    }

    /* Early drop of Not-ECT packets per queue class (the drop half of a WRED/ECN profile). */
    table queue_red {
        key = {
            meta.dlcp_prio: exact;
        }
        actions = {
            red_drop_above;
            @defaultonly NoAction;
        }
        default_action = NoAction();
        size = 8;
    }

    apply {
        meta.ecmp_group_id = 0;
        meta.ecmp_group_size = 0;
        meta.ecmp_member = 0;
        meta.lb_mode = LB_FLOW_HASH;
        meta.dlcp_prio = 0;
        meta.drop_class = 0;
        meta.drop_threshold = 0;
        meta.red_class = 0;
        meta.dlcp_tables = 0;
        switch_seed.apply();
        hash_seed.apply();
        profile.apply();

        if (standard_metadata.parser_error != error.NoError) {
            drop_with_reason(DROP_PARSER_ERROR);
            return;
        }
        if (!hdr.ipv4.isValid()) {
            drop_with_reason(DROP_NOT_IPV4);
            return;
        }
        if (standard_metadata.checksum_error == 1) {
            drop_with_reason(DROP_IPV4_CHECKSUM);
            return;
        }
        if (hdr.ipv4.ttl <= 1) {
            drop_with_reason(DROP_TTL_EXPIRED);
            return;
        }

        if (hdr.dlcp.isValid() && (bit<32>)hdr.dlcp.job_id < MAX_JOBS) {
            job_rx.count((bit<32>)hdr.dlcp.job_id);
        }
        if (hdr.dlcp.isValid() && meta.commodity == 0) {
            meta.dlcp_tables = 1;
            layer_priority.apply();
            spray_mode.apply();
            if (hdr.dlcp.drop_eligible == 1) {
                drop_class.apply();
            }
        } else {
            traffic_class.apply();
            if (hdr.ipv4.ecn == ECN_NOT_ECT) {
                queue_red.apply();
            }
        }

        switch (ipv4_lpm.apply().action_run) {
            drop_no_route: {
                return;   /* no route (a miss runs it too): dropped and counted */
            }
            set_ecmp_group: {
                if (meta.ecmp_group_size == 0) {
                    drop_no_route();   /* an empty group routes nowhere */
                    return;
                }
                if (meta.lb_mode == LB_RANDOM) {
                    bit<32> draw;
                    random(draw, (bit<32>)0, (bit<32>)0xFFFFFFFF);
                    hash(meta.ecmp_member, HashAlgorithm.crc16, (bit<16>)0,
                         { draw + meta.seed }, meta.ecmp_group_size);
                } else if (meta.lb_mode == LB_ROUND_ROBIN
                           && (bit<32>)meta.ecmp_group_id < ECMP_GROUPS) {
                    bit<32> position;
                    rr_position.read(position, (bit<32>)meta.ecmp_group_id);
                    hash(meta.ecmp_member, HashAlgorithm.identity, (bit<16>)0,
                         { position + meta.seed }, meta.ecmp_group_size);
                    rr_position.write((bit<32>)meta.ecmp_group_id, position + 1);
                } else if (meta.flow_seed == 0) {
                    hash(meta.ecmp_member, HashAlgorithm.crc16, (bit<16>)0,
                         { hdr.ipv4.srcAddr, hdr.ipv4.dstAddr, hdr.ipv4.protocol,
                           meta.l4_src, meta.l4_dst },
                         meta.ecmp_group_size);
                } else {
                    hash(meta.ecmp_member, HashAlgorithm.crc16, (bit<16>)0,
                         { hdr.ipv4.srcAddr, hdr.ipv4.dstAddr, hdr.ipv4.protocol,
                           meta.l4_src, meta.l4_dst, meta.flow_seed },
                         meta.ecmp_group_size);
                }
                if (!ecmp_member.apply().hit) {
                    drop_no_route();   /* a member index without an entry */
                    return;
                }
                if (meta.lb_mode != LB_FLOW_HASH
                    && (bit<32>)meta.ecmp_group_id < ECMP_GROUPS
                    && (bit<32>)meta.ecmp_member < SPRAY_MEMBERS) {
                    sprayed_member.count((bit<32>)meta.ecmp_group_id * SPRAY_MEMBERS
                                         + (bit<32>)meta.ecmp_member);
                }
            }
            default: {
            }
        }

        /* The queue this packet joins: drop it here if its class is over its threshold,
         * else count it into the queue's depth estimate. */
        bit<32> queue = (bit<32>)standard_metadata.egress_spec * 8 + (bit<32>)meta.dlcp_prio;
        if (queue < QUEUES) {
            bit<19> depth;
            queue_depth.read(depth, queue);
            if (meta.drop_class == 1 && depth >= meta.drop_threshold) {
                if (meta.red_class == 1) {
                    ingress_drops.count(DROP_QUEUE_RED);
                    queue_red_drops.count(queue);
                } else {
                    ingress_drops.count(DROP_EARLY);
                    if ((bit<32>)hdr.dlcp.job_id < MAX_JOBS) {
                        early_drops.count((bit<32>)hdr.dlcp.job_id);
                    }
                }
                mark_to_drop(standard_metadata);
                return;
            }
            queue_depth.write(queue, depth + 1);
        }

        hdr.ipv4.ttl = hdr.ipv4.ttl - 1;
    }
}

control DlcpEgress(inout headers_t hdr,
                   inout metadata_t meta,
                   inout standard_metadata_t standard_metadata) {

    counter(PORT_TX_SIZE, CounterType.packets_and_bytes) port_tx;
    counter(MAX_JOBS, CounterType.packets_and_bytes) ecn_marks;
    /* ECN-capable packets marked CE by their traffic class's threshold: egress_port * 8 + priority. */
    counter(PORT_TX_SIZE, CounterType.packets_and_bytes) queue_ecn_marks;
    /* Packets the link of their egress port lost (link_loss), per egress port. */
    counter(PORTS, CounterType.packets_and_bytes) link_loss_drops;

    /* threshold = probability x (2^32 - 1): 0 never loses, 0xFFFFFFFF always does. */
    action lose_on_link(bit<32> threshold) {
        meta.loss_threshold = threshold;
    }

    /* A lossy link (no netem on the emulation host): egress port -> loss probability. */
    table link_loss {
        key = {
            standard_metadata.egress_port: exact;
        }
        actions = {
            lose_on_link;
            @defaultonly NoAction;
        }
        default_action = NoAction();
        size = 512;
    }

    action mark_above(bit<19> queue_threshold) {
        meta.ecn_threshold = queue_threshold;
    }

    table ecn_threshold {
        key = {
            hdr.dlcp.job_id: exact;
        }
        actions = {
            mark_above;
            @defaultonly NoAction;
        }
        default_action = NoAction();
        size = 1024;
    }

    /* ECN marking per queue class (the marking half of a WRED/ECN profile). */
    table queue_ecn {
        key = {
            meta.dlcp_prio: exact;
        }
        actions = {
            mark_above;
            @defaultonly NoAction;
        }
        default_action = NoAction();
        size = 8;
    }

    apply {
        bit<32> queue = (bit<32>)standard_metadata.egress_port * 8 + (bit<32>)meta.dlcp_prio;
        if (queue < QUEUES) {
            queue_depth.write(queue, standard_metadata.deq_qdepth);
        }
        if (meta.dlcp_tables == 1 && hdr.ipv4.ecn != ECN_NOT_ECT) {
            if (ecn_threshold.apply().hit) {
                if (standard_metadata.enq_qdepth >= meta.ecn_threshold) {
                    hdr.ipv4.ecn = ECN_CE;
                    if ((bit<32>)hdr.dlcp.job_id < MAX_JOBS) {
                        ecn_marks.count((bit<32>)hdr.dlcp.job_id);
                    }
                }
            }
        } else if (hdr.ipv4.isValid() && hdr.ipv4.ecn != ECN_NOT_ECT) {
            if (queue_ecn.apply().hit) {
                if (standard_metadata.enq_qdepth >= meta.ecn_threshold) {
                    hdr.ipv4.ecn = ECN_CE;
                    if (queue < QUEUES) {
                        queue_ecn_marks.count(queue);
                    }
                }
            }
        }
        port_tx.count(queue);
        /* The port sent it (port_tx counts it); its link may lose it on the way. */
        if (link_loss.apply().hit) {
            bit<32> draw;
            random(draw, (bit<32>)0, (bit<32>)0xFFFFFFFE);
            if (draw < meta.loss_threshold) {
                link_loss_drops.count((bit<32>)standard_metadata.egress_port);
                mark_to_drop(standard_metadata);
            }
        }
    }
}

control DlcpComputeChecksum(inout headers_t hdr, inout metadata_t meta) {
    apply {
        update_checksum(
            hdr.ipv4.isValid(),
            { hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.dscp, hdr.ipv4.ecn,
              hdr.ipv4.totalLen, hdr.ipv4.identification,
              hdr.ipv4.flag_rsvd, hdr.ipv4.flag_df, hdr.ipv4.flag_mf, hdr.ipv4.fragOffset,
              hdr.ipv4.ttl, hdr.ipv4.protocol, hdr.ipv4.srcAddr, hdr.ipv4.dstAddr },
            hdr.ipv4.hdrChecksum,
            HashAlgorithm.csum16);
    }
}

control DlcpDeparser(packet_out packet, in headers_t hdr) {
    apply {
        packet.emit(hdr.ethernet);
        packet.emit(hdr.ipv4);
        packet.emit(hdr.tcp);
        packet.emit(hdr.udp);
        packet.emit(hdr.dlcp);
    }
}

V1Switch(
    DlcpParser(),
    DlcpVerifyChecksum(),
    DlcpIngress(),
    DlcpEgress(),
    DlcpComputeChecksum(),
    DlcpDeparser()
) main;
