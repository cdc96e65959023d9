// A program-declared extern function: it compiles and type-checks (arguments, directions),
// packets that do not reach the call are forwarded as usual, and a packet that reaches it
// fails with a clear error (p4switch: ExternFunctionMissing; BMv2: p4c needs --emit-externs
// and simple_switch then refuses the program, "Unknown primitive action", without a plug-in).
#include <core.p4>
#include <v1model.p4>

header pair_t { bit<8> kind; bit<8> value; }
struct headers_t { pair_t p; }
struct meta_t { bit<8> scratch; }

extern void scramble(inout bit<8> value, in bit<8> key);

parser ExtParser(packet_in pkt, out headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.p); transition accept; }
}

control ExtVerify(inout headers_t hdr, inout meta_t meta) { apply { } }

control ExtIngress(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {
    apply {
        sm.egress_spec = 2;
        hdr.p.value = hdr.p.value + 1;
        if (hdr.p.kind == 0xEE) {
            scramble(hdr.p.value, 7);
        }
    }
}

control ExtEgress(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) { apply { } }
control ExtCompute(inout headers_t hdr, inout meta_t meta) { apply { } }
control ExtDeparser(packet_out pkt, in headers_t hdr) { apply { pkt.emit(hdr.p); } }

V1Switch(ExtParser(), ExtVerify(), ExtIngress(), ExtEgress(), ExtCompute(), ExtDeparser()) main;
