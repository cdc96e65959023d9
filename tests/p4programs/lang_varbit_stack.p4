// The two-argument extract (varbit) into a header stack: pkt.extract(hdr.opts.next, bits)
// fills the next element, its varbit field as long as the option says, and advances.
#include <core.p4>
#include <v1model.p4>

header opt_t { bit<8> kind; bit<8> len; varbit<64> data; }   // len: bytes of data
header end_t { bit<8> kind; }                                   // kind 0 ends the options
header out_t { bit<8> count; }
struct headers_t { out_t o; opt_t[3] opts; end_t last; }
struct meta_t { }

parser VParser(packet_in pkt, out headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {
    state start {
        transition select(pkt.lookahead<bit<8>>()) {
            0: parse_end;
            default: parse_option;
        }
    }
    state parse_option {
        bit<16> head = pkt.lookahead<bit<16>>();
        pkt.extract(hdr.opts.next, (bit<32>)head[7:0] * 8);
        transition start;
    }
    state parse_end { pkt.extract(hdr.last); transition accept; }
}

control VVerify(inout headers_t hdr, inout meta_t meta) { apply { } }

control VIngress(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {
    apply {
        hdr.o.setValid();
        hdr.o.count = 0;
        if (hdr.opts[0].isValid()) { hdr.o.count = hdr.o.count + 1; }
        if (hdr.opts[1].isValid()) { hdr.o.count = hdr.o.count + 1; hdr.opts[1].kind = 0xBB; }
        if (hdr.opts[2].isValid()) { hdr.o.count = hdr.o.count + 1; }
        sm.egress_spec = 2;
    }
}

control VEgress(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) { apply { } }
control VCompute(inout headers_t hdr, inout meta_t meta) { apply { } }
control VDeparser(packet_out pkt, in headers_t hdr) {
    apply { pkt.emit(hdr.o); pkt.emit(hdr.opts); pkt.emit(hdr.last); }
}

V1Switch(VParser(), VVerify(), VIngress(), VEgress(), VCompute(), VDeparser()) main;
