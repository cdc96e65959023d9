// setValid() on a header that is invalid gives a header whose fields are all 0, as BMv2's
// add_header does: a value written to a field while the header was invalid is gone. On a
// header that is valid already, setValid() changes nothing. Checked for a plain header, a
// header union member, a stack element indexed at run time, after setInvalid(), and in a
// parser state.
#include <core.p4>
#include <v1model.p4>

header op_t { bit<8> kind; bit<8> idx; }
header tag_t { bit<8> a; bit<8> b; }
header narrow_t { bit<8> f; }
header wide_t { bit<16> w; }
header_union u_t { narrow_t n; wide_t w; }
header cell_t { bit<8> v; }
header mark_t { bit<8> m; }
struct headers_t { op_t op; tag_t tag; mark_t mark; u_t u; cell_t[3] cells; }
struct meta_t { }

parser VParser(packet_in pkt, out headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {
    state start {
        pkt.extract(hdr.op);
        transition select(hdr.op.kind) {
            1: with_tag;
            default: marked;
        }
    }
    state with_tag {
        pkt.extract(hdr.tag);
        transition marked;
    }
    state marked {
        hdr.mark.m = 0x99;       // written while invalid: lost at setValid()
        hdr.mark.setValid();
        transition accept;
    }
}

control VVerify(inout headers_t hdr, inout meta_t meta) { apply { } }

control VIngress(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {
    apply {
        if (hdr.op.kind == 2) {
            hdr.tag.setValid();
            hdr.tag.setInvalid();
        }
        // kind 1: tag was parsed (valid), a is overwritten and kept; otherwise a is lost
        hdr.tag.a = 0x05;
        hdr.tag.setValid();
        hdr.tag.b = hdr.tag.b + 0x07;
        hdr.mark.m = hdr.mark.m + 1;
        // union: w written while invalid, then n made valid (w invalid), then w made valid
        hdr.u.w.w = 0xABCD;
        hdr.u.n.setValid();
        hdr.u.n.f = hdr.u.n.f + 2;
        if (hdr.op.kind == 3) {
            hdr.u.w.setValid();
            hdr.u.w.w = hdr.u.w.w + 3;
        }
        // a stack element chosen by the packet, written while invalid, then made valid
        hdr.cells[hdr.op.idx].v = 0x77;
        hdr.cells[hdr.op.idx].setValid();
        hdr.cells[hdr.op.idx].v = hdr.cells[hdr.op.idx].v + 4;
        sm.egress_spec = 2;
    }
}

control VEgress(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) { apply { } }
control VCompute(inout headers_t hdr, inout meta_t meta) { apply { } }
control VDeparser(packet_out pkt, in headers_t hdr) {
    apply { pkt.emit(hdr.op); pkt.emit(hdr.tag); pkt.emit(hdr.mark); pkt.emit(hdr.u); pkt.emit(hdr.cells); }
}

V1Switch(VParser(), VVerify(), VIngress(), VEgress(), VCompute(), VDeparser()) main;
