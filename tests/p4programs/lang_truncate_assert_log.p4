// log_msg sends its text, each {} replaced by the next value, to the switch's log (ingress
// and egress; once per copy in egress); it changes nothing in the packet.
// truncate(n) cuts the frame that leaves to its first n bytes (headers as deparsed, then the
// payload), whether ingress or egress calls it; the copies of a multicast packet are new
// packets, not cut by the original's truncate in ingress (as on BMv2).
// assert/assume that hold change nothing; one that fails fails the packet (the STF file sends
// none: BMv2 stops the switch on a failed assert; tests/test_native_pipeline.py checks p4switch).
#include <core.p4>
#include <v1model.p4>

header op_t { bit<8> kind; bit<8> len; bit<8> v; }
struct headers_t { op_t op; }
struct meta_t { bit<8> cut; }

parser TParser(packet_in pkt, out headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {
    state start {
        pkt.extract(hdr.op);
        transition accept;
    }
}

control TVerify(inout headers_t hdr, inout meta_t meta) { apply { } }

control TIngress(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {
    action cut(bit<32> n) { truncate(n); }
    apply {
        assert(hdr.op.isValid());
        sm.egress_spec = 2;
        log_msg("in kind={} len={}", {hdr.op.kind, hdr.op.len});
        hdr.op.v = hdr.op.v + 1;     // changed before the cut: the change leaves
        log_msg("ingress");
        if (hdr.op.kind == 1) {
            cut((bit<32>)hdr.op.len);
        } else if (hdr.op.kind == 3) {
            sm.mcast_grp = 1;
            truncate((bit<32>)hdr.op.len);
        }
        assume(hdr.op.kind != 0xFF);
    }
}

control TEgress(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {
    apply {
        if (hdr.op.kind == 2) {
            truncate((bit<32>)hdr.op.len);
        }
        log_msg("out port={} v={} rid={}", {sm.egress_port, hdr.op.v, sm.egress_rid});
        assert(sm.egress_port != 511);
    }
}

control TCompute(inout headers_t hdr, inout meta_t meta) { apply { } }

control TDeparser(packet_out pkt, in headers_t hdr) {
    apply { pkt.emit(hdr.op); }
}

V1Switch(TParser(), TVerify(), TIngress(), TEgress(), TCompute(), TDeparser()) main;
