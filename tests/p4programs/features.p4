/* Exercises language features and v1model externs; tests/test_p4_semantics.py drives it.
 * A "calc" packet (etherType 0x9000) asks for one operation on its operands a and b; the
 * results go back out of the ingress port. Label stacks (0x8847) and an IPv4/IPv6 union
 * (0x0800/0x86DD) exercise stacks and unions. */
#include <core.p4>
#include <v1model.p4>

#define CALC_ETYPE 0x9000

error { BadOp }

enum bit<8> Op {
    ADD = 1, SAT_ADD = 2, SAT_SUB = 3, SIGNED_SAT_ADD = 4, CONCAT = 5, SHIFT = 6, SLICES = 7,
    NEGATE = 8, SUB = 9, MUL = 10, DIVMOD = 11, BITNOT = 12, MAX_FN = 13, MUX = 14,
    REGISTER = 15, DIGEST = 16, CLONE = 17, MCAST = 18, RESUBMIT = 19, RECIRCULATE = 20,
    TRUNCATE = 21, METER = 22, ASSERT = 23, LOG = 24, NESTED = 25, SIGNED_SHIFT = 26,
    CONST_ENTRY = 27, EXIT = 28
}

header ethernet_t { bit<48> dst; bit<48> src; bit<16> etherType; }
header calc_t {
    bit<8> op; bit<8> a; bit<8> b; bit<8> r8; int<8> s8; bit<16> r16; bit<32> r32; bit<8> rounds;
}
header label_t { bit<20> label; bit<3> tc; bit<1> bos; bit<8> ttl; }
header ipv4_t { bit<8> ver_ihl; bit<8> tos; bit<16> len; bit<64> rest; bit<32> src; bit<32> dst; }
header ipv6_t { bit<32> vtf; bit<16> len; bit<8> nh; bit<8> hl; bit<128> src; bit<128> dst; }
header_union ip_t { ipv4_t v4; ipv6_t v6; }

struct headers {
    ethernet_t eth;
    calc_t calc;
    label_t[4] labels;
    ip_t ip;
}

struct learn_t { bit<8> a; bit<8> b; bit<9> port; }

struct metadata {
    @field_list(1)
    bit<8> resubmitted;
    @field_list(2)
    bit<8> recirculated;
    bit<8> scratch;
}

parser FParser(packet_in pkt, out headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    state start {
        pkt.extract(hdr.eth);
        transition select(hdr.eth.etherType) {
            CALC_ETYPE: calc;
            0x8847: labels;
            0x0800: v4;
            0x86DD: v6;
            0x9100 &&& 0xFF00: skip_two;
            default: accept;
        }
    }
    state calc {
        bit<8> op = pkt.lookahead<bit<8>>();
        verify(op != 0, error.BadOp);
        pkt.extract(hdr.calc);
        transition accept;
    }
    state labels {
        pkt.extract(hdr.labels.next);
        transition select(hdr.labels.last.bos) {
            0: labels;
            1: accept;
        }
    }
    state v4 { pkt.extract(hdr.ip.v4); transition accept; }
    state v6 { pkt.extract(hdr.ip.v6); transition accept; }
    state skip_two { pkt.advance(16); transition accept; }
}

control FVerify(inout headers hdr, inout metadata meta) { apply { } }

bit<8> max8(in bit<8> x, in bit<8> y) {
    if (x > y) {
        return x;
    }
    return y;
}

control Bump(inout bit<8> value, in bit<8> by) {
    apply { value = value + by; }
}

control FIngress(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    register<bit<8>>(16) regs;
    meter(4, MeterType.packets) meters;
    Bump() bump;

    action reply() {
        sm.egress_spec = sm.ingress_port;
    }
    action set_r8(bit<8> v) { hdr.calc.r8 = v; }
    action set_r8_plus_one(bit<8> v) {
        set_r8(v);
        hdr.calc.r8 = hdr.calc.r8 + 1;
    }
    table consts {
        key = { hdr.calc.a: exact; }
        actions = { set_r8; set_r8_plus_one; NoAction; }
        const entries = {
            1: set_r8(11);
            2: set_r8(22);
            3: set_r8_plus_one(40);
        }
        default_action = set_r8(99);
    }

    action to_port(bit<9> port) { sm.egress_spec = port; }
    table by_label {
        key = { hdr.labels[1].label: ternary; hdr.labels[0].isValid(): exact; }
        actions = { to_port; NoAction; }
    }

    apply {
        if (sm.parser_error != error.NoError) {
            hdr.eth.etherType = 0xEEEE;
            sm.egress_spec = sm.ingress_port;
            if (sm.parser_error == error.BadOp) {
                hdr.eth.src = 0xBAD;
            }
            exit;
        }
        if (hdr.labels[0].isValid()) {
            sm.egress_spec = (bit<9>)hdr.labels[0].label;
            by_label.apply();
            hdr.labels.pop_front(1);
            if (!hdr.labels[0].isValid()) {
                hdr.eth.etherType = 0x0800;
            }
            exit;
        }
        if (hdr.ip.isValid()) {
            sm.egress_spec = hdr.ip.v4.isValid() ? 9w4 : 9w6;
            exit;
        }
        if (!hdr.calc.isValid()) {
            mark_to_drop(sm);
            exit;
        }
        reply();
        bit<8> a = hdr.calc.a;
        bit<8> b = hdr.calc.b;
        Op op = (Op)hdr.calc.op;
        switch (op) {
            Op.ADD: { hdr.calc.r8 = a + b; }
            Op.SAT_ADD: { hdr.calc.r8 = a |+| b; }
            Op.SAT_SUB: { hdr.calc.r8 = a |-| b; }
            Op.SIGNED_SAT_ADD: { hdr.calc.s8 = (int<8>)a |+| (int<8>)b; }
            Op.CONCAT: { hdr.calc.r16 = a ++ b; }
            Op.SHIFT: {
                hdr.calc.r8 = a << b;
                hdr.calc.r16 = ((bit<16>)a) << 4;
                hdr.calc.r32 = (bit<32>)(a >> 1);
            }
            Op.SLICES: {
                hdr.calc.r8 = a[3:0] ++ b[7:4];
                hdr.calc.r16[15:8] = b;
                hdr.calc.r16[3:0] = a[7:4];
            }
            Op.NEGATE: {
                hdr.calc.s8 = -(int<8>)a;
                hdr.calc.r32 = (bit<32>)(int<32>)(int<8>)a;
            }
            Op.SUB: { hdr.calc.r8 = a - b; }
            Op.MUL: {
                hdr.calc.r8 = a * b;
                hdr.calc.r16 = (bit<16>)a * (bit<16>)b;
            }
            Op.DIVMOD: {
                hdr.calc.r8 = a / 8w3;
                hdr.calc.r16 = (bit<16>)(a % 8w3);
            }
            Op.BITNOT: {
                hdr.calc.r8 = ~a;
                hdr.calc.r16 = (bit<16>)((bit<1>)(a == b) ++ (bit<1>)(a != b && !(a > b)));
            }
            Op.MAX_FN: { hdr.calc.r8 = max8(a, b); }
            Op.MUX: { hdr.calc.r8 = a < b ? b - a : a - b; }
            Op.REGISTER: {
                regs.write((bit<32>)a, b);
                bit<8> back;
                regs.read(back, (bit<32>)a);
                hdr.calc.r8 = back + 1;
                regs.read(back, 32w1000);
                hdr.calc.r16 = (bit<16>)back;
            }
            Op.DIGEST: {
                digest<learn_t>(1, { a, b, sm.ingress_port });
            }
            Op.CLONE: { clone(CloneType.I2E, (bit<32>)b); }
            Op.MCAST: { sm.mcast_grp = (bit<16>)b; }
            Op.RESUBMIT: {
                if (meta.resubmitted == 0) {
                    meta.resubmitted = a;
                    resubmit_preserving_field_list(1);
                } else {
                    hdr.calc.r8 = meta.resubmitted;
                    hdr.calc.r32 = sm.instance_type;
                }
            }
            Op.RECIRCULATE: {
                hdr.calc.rounds = hdr.calc.rounds + 1;
                hdr.calc.r32 = sm.instance_type;
            }
            Op.TRUNCATE: { truncate(14); }
            Op.METER: {
                bit<8> color;
                meters.execute_meter((bit<32>)a, color);
                hdr.calc.r8 = color;
            }
            Op.ASSERT: { assert(a != 0xFF); }
            Op.LOG: { log_msg("calc a={} b={}", { a, b }); }
            Op.NESTED: {
                bit<8> v = a;
                bump.apply(v, b);
                bump.apply(v, b);
                hdr.calc.r8 = v;
            }
            Op.SIGNED_SHIFT: {
                int<8> sa = (int<8>)a;
                hdr.calc.s8 = sa >> 2;
                hdr.calc.r8 = (bit<8>)(sa < 0 ? 8s1 : 8s0);
            }
            Op.CONST_ENTRY: { consts.apply(); }
            Op.EXIT: {
                hdr.calc.r8 = 1;
                exit;
            }
            default: { mark_to_drop(sm); }
        }
        hdr.calc.rounds = hdr.calc.rounds | 0x80;
    }
}

control FEgress(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    apply {
        if (hdr.calc.isValid()) {
            if (hdr.calc.op == 20 && (hdr.calc.rounds & 0x7F) < 3) {
                recirculate_preserving_field_list(2);
            }
            if (sm.instance_type == 1 || sm.instance_type == 5) {
                hdr.calc.r32 = sm.instance_type;
                hdr.calc.r16 = sm.egress_rid;
            }
        }
    }
}

control FCompute(inout headers hdr, inout metadata meta) { apply { } }

control FDeparser(packet_out pkt, in headers hdr) {
    apply {
        pkt.emit(hdr.eth);
        pkt.emit(hdr.calc);
        pkt.emit(hdr.labels);
        pkt.emit(hdr.ip);
    }
}

V1Switch(FParser(), FVerify(), FIngress(), FEgress(), FCompute(), FDeparser()) main;
