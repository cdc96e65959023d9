// Loops in combination (P4-16 1.2.5): nested loops where the inner `break` leaves only the
// inner loop, a `for ... in` range ending at the top of its type, `break` inside a `switch`
// inside a loop, `continue` in a C-style loop (the update still runs), and `exit` from inside
// a loop. p4c 1.2.4.17's BMv2 back end refuses loops (tests/test_stf_bmv2.py, P4C_REFUSES).
#include <core.p4>
#include <v1model.p4>

header in_t  { bit<8> n; bit<8> m; }
header out_t { bit<16> pairs; bit<8> top; bit<8> iters; bit<8> found; bit<8> evens; bit<8> exited; }
struct headers_t { in_t i; out_t o; }
struct meta_t { }

parser NestParser(packet_in pkt, out headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.i); transition accept; }
}

control NestVerify(inout headers_t hdr, inout meta_t meta) { apply { } }

control NestIngress(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {
    apply {
        hdr.o.setValid();
        // n * min(m, 4): the inner loop stops at j == 5, the outer one goes on
        bit<16> pairs = 0;
        for (bit<8> i = 0; i < hdr.i.n; i += 1) {
            for (bit<8> j in 1 .. hdr.i.m) {
                if (j == 5) { break; }
                pairs += 1;
            }
        }
        hdr.o.pairs = pairs;
        // 250 .. 255 of a bit<8>: six rounds, then the loop ends (no wrap to 0)
        bit<8> top = 0;
        bit<8> iters = 0;
        for (bit<8> k in 250 .. 255) { top = k; iters += 1; }
        hdr.o.top = top;
        hdr.o.iters = iters;
        // the first k with n + k == 7; `break` in the switch leaves the loop
        bit<8> found = 0xFF;
        for (bit<8> k = 0; k < 10; k = k + 1) {
            switch (hdr.i.n + k) {
                7: { found = k; break; }
                default: { }
            }
        }
        hdr.o.found = found;
        // even numbers below m; `continue` skips the count, not the update
        bit<8> evens = 0;
        for (bit<8> k = 0; k < hdr.i.m; k = k + 1) {
            if ((k & 1) == 1) { continue; }
            evens += 1;
        }
        hdr.o.evens = evens;
        hdr.o.exited = 0;
        // n in 0 .. 3: marked and sent to port 3, leaving the control from inside the loop
        for (bit<8> k in 0 .. 3) {
            if (k == hdr.i.n) {
                hdr.o.exited = 1;
                sm.egress_spec = 3;
                exit;
            }
        }
        sm.egress_spec = 2;
    }
}

control NestEgress(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) { apply { } }
control NestCompute(inout headers_t hdr, inout meta_t meta) { apply { } }
control NestDeparser(packet_out pkt, in headers_t hdr) { apply { pkt.emit(hdr.i); pkt.emit(hdr.o); } }

V1Switch(NestParser(), NestVerify(), NestIngress(), NestEgress(), NestCompute(), NestDeparser()) main;
