// clone and clone_preserving_field_list: an I2E clone is the packet as it arrived, parsed
// anew, with fresh metadata (or the @field_list fields kept) and instance_type 1, sent to its
// session's port; an E2E clone is the packet as it leaves egress (instance_type 2), made also
// when the packet itself is dropped in egress. Each copy leaves with its egress's changes.
#include <core.p4>
#include <v1model.p4>

header op_t { bit<8> kind; bit<8> v; bit<8> tag; bit<8> itype; }
struct headers_t { op_t op; }
struct meta_t {
    @field_list(1) bit<8> tag;
    bit<8> other;
}

parser CParser(packet_in pkt, out headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {
    state start {
        pkt.extract(hdr.op);
        transition accept;
    }
}

control CVerify(inout headers_t hdr, inout meta_t meta) { apply { } }

control CIngress(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {
    apply {
        sm.egress_spec = 2;
        meta.tag = 0xAB;
        meta.other = 0xCD;
        hdr.op.v = hdr.op.v + 1;    // the original's change: an I2E clone does not see it
        if (hdr.op.kind == 1) {
            clone(CloneType.I2E, 5);
        } else if (hdr.op.kind == 2) {
            clone_preserving_field_list(CloneType.I2E, 5, 1);
        }
    }
}

control CEgress(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {
    apply {
        hdr.op.itype = (bit<8>)sm.instance_type;
        if (sm.instance_type == 0) {
            if (hdr.op.kind == 3 || hdr.op.kind == 4) {
                hdr.op.v = hdr.op.v + 0x10;    // before the clone is made: the E2E copy has it
                clone(CloneType.E2E, 6);
            }
            if (hdr.op.kind == 4) {
                mark_to_drop(sm);
            }
        } else {
            hdr.op.tag = meta.tag + meta.other;    // 0 + 0, or AB + 0 with the field list
        }
    }
}

control CCompute(inout headers_t hdr, inout meta_t meta) { apply { } }

control CDeparser(packet_out pkt, in headers_t hdr) {
    apply { pkt.emit(hdr.op); }
}

V1Switch(CParser(), CVerify(), CIngress(), CEgress(), CCompute(), CDeparser()) main;
