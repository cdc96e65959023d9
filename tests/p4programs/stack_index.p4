// A header stack indexed by values from the packet: read at one index, write at another and
// make an element invalid or valid, all with indices known at run time only. (isValid() of such an
// element makes simple_switch 1.15.5 fail on p4c's JSON, "Json::LogicError"; it is checked
// against the Python pipeline in tests/test_native_pipeline.py instead.)
#include <core.p4>
#include <v1model.p4>

header idx_t { bit<8> i; bit<8> j; bit<8> found; }
header cell_t { bit<8> v; }
struct headers_t { idx_t x; cell_t[4] cells; }
struct meta_t { }

parser IdxParser(packet_in pkt, out headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {
    state start {
        pkt.extract(hdr.x);
        pkt.extract(hdr.cells.next);
        pkt.extract(hdr.cells.next);
        pkt.extract(hdr.cells.next);
        transition accept;
    }
}

control IdxVerify(inout headers_t hdr, inout meta_t meta) { apply { } }

control IdxIngress(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {
    apply {
        hdr.x.found = hdr.cells[hdr.x.j].v;
        hdr.cells[hdr.x.i].v = hdr.cells[hdr.x.j].v + 1;
        if (hdr.x.i == 0) {
            hdr.cells[hdr.x.j].setInvalid();
        } else if (hdr.x.j == 3) {
            hdr.cells[hdr.x.j].setValid();
        }
        sm.egress_spec = 2;
    }
}

control IdxEgress(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) { apply { } }
control IdxCompute(inout headers_t hdr, inout meta_t meta) { apply { } }
control IdxDeparser(packet_out pkt, in headers_t hdr) { apply { pkt.emit(hdr.x); pkt.emit(hdr.cells); } }

V1Switch(IdxParser(), IdxVerify(), IdxIngress(), IdxEgress(), IdxCompute(), IdxDeparser()) main;
