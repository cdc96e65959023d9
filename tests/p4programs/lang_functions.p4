// Functions on the native datapath as on p4switch and BMv2: a result used in an expression,
// `out` and `inout` parameters copied back, a function calling another one twice, a bool
// result, a call inside an action, and an `inout` argument read again after the call.
#include <core.p4>
#include <v1model.p4>

header in_t  { bit<8> a; bit<8> b; }
header out_t { bit<8> sum; bit<8> max; bit<8> lo; bit<8> hi; bit<8> twice; bit<8> flag; }
struct headers_t { in_t i; out_t o; }
struct meta_t { }

bit<8> max8(in bit<8> x, in bit<8> y) {
    if (x > y) { return x; }
    return y;
}

void split(in bit<8> v, out bit<8> lo, out bit<8> hi) {
    lo = v & 0x0F;
    hi = v >> 4;
}

bit<8> accumulate(inout bit<8> acc, in bit<8> v) {
    acc = acc + v;
    return acc;
}

bool is_big(in bit<8> v) { return v > 100; }

bit<8> twice_max(in bit<8> x, in bit<8> y) { return max8(x, y) + max8(y, x); }

parser FnParser(packet_in pkt, out headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.i); transition accept; }
}

control FnVerify(inout headers_t hdr, inout meta_t meta) { apply { } }

control FnIngress(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {
    action fill() { hdr.o.twice = twice_max(hdr.i.a, hdr.i.b); }
    apply {
        hdr.o.setValid();
        bit<8> acc = 1;
        hdr.o.sum = accumulate(acc, hdr.i.a) + acc;   // the call updates acc before it is read
        hdr.o.max = max8(hdr.i.a, hdr.i.b);
        split(hdr.i.a, hdr.o.lo, hdr.o.hi);
        fill();
        hdr.o.flag = is_big(hdr.i.b) ? 8w1 : 8w0;
        sm.egress_spec = 2;
    }
}

control FnEgress(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) { apply { } }
control FnCompute(inout headers_t hdr, inout meta_t meta) { apply { } }
control FnDeparser(packet_out pkt, in headers_t hdr) { apply { pkt.emit(hdr.i); pkt.emit(hdr.o); } }

V1Switch(FnParser(), FnVerify(), FnIngress(), FnEgress(), FnCompute(), FnDeparser()) main;
