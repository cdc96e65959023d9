// A stack of header unions: extract into u.next.member advances the stack to the next
// element (the member becomes valid, the element's other member stays invalid), u.last and
// u.lastIndex follow, and emit writes the valid member of each element in order.
#include <core.p4>
#include <v1model.p4>

header tag_t { bit<8> kind; }      // 1: a short option follows, 2: a long one, 0: the end
header short_t { bit<8> kind; bit<8> value; }
header long_t { bit<8> kind; bit<16> value; }
header_union opt_t { short_t s; long_t l; }
header out_t { bit<8> count; bit<8> last_kind; }
struct headers_t { opt_t[3] opts; out_t o; }
struct meta_t { }

parser UParser(packet_in pkt, out headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {
    state start {
        transition select(pkt.lookahead<bit<8>>()) {
            1: parse_short;
            2: parse_long;
            default: accept;
        }
    }
    state parse_short { pkt.extract(hdr.opts.next.s); transition start; }
    state parse_long { pkt.extract(hdr.opts.next.l); transition start; }
}

control UVerify(inout headers_t hdr, inout meta_t meta) { apply { } }

control UIngress(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {
    apply {
        hdr.o.setValid();
        hdr.o.count = 0;
        if (hdr.opts[0].s.isValid() || hdr.opts[0].l.isValid()) { hdr.o.count = hdr.o.count + 1; }
        if (hdr.opts[1].s.isValid() || hdr.opts[1].l.isValid()) { hdr.o.count = hdr.o.count + 1; }
        if (hdr.opts[2].s.isValid() || hdr.opts[2].l.isValid()) { hdr.o.count = hdr.o.count + 1; }
        if (hdr.opts[1].l.isValid()) {
            hdr.opts[1].l.value = hdr.opts[1].l.value + 1;
        }
        if (hdr.opts[0].s.isValid()) {
            hdr.o.last_kind = 0xAA;
        }
        sm.egress_spec = 2;
    }
}

control UEgress(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) { apply { } }
control UCompute(inout headers_t hdr, inout meta_t meta) { apply { } }
control UDeparser(packet_out pkt, in headers_t hdr) { apply { pkt.emit(hdr.o); pkt.emit(hdr.opts); } }

V1Switch(UParser(), UVerify(), UIngress(), UEgress(), UCompute(), UDeparser()) main;
