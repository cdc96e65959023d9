// Generic functions: type arguments inferred from the arguments and given explicitly, one
// function used at two types, a local variable of the type parameter, inout parameters.
#include <core.p4>
#include <v1model.p4>

header g_t { bit<8> a; bit<8> b; bit<16> c; bit<16> d; bit<8> e; bit<16> f; }
struct headers_t { g_t g; }
struct meta_t { }

void swap<T>(inout T x, inout T y) {
    T tmp = x;
    x = y;
    y = tmp;
}

T choose<T>(in bool first, in T x, in T y) {  // p4c checks a generic body before specializing it
    if (first) {
        return x;
    }
    return y;
}

parser GenParser(packet_in pkt, out headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.g); transition accept; }
}

control GenVerify(inout headers_t hdr, inout meta_t meta) { apply { } }

control GenIngress(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {
    apply {
        swap(hdr.g.a, hdr.g.b);                 // T = bit<8>, inferred
        swap<bit<16>>(hdr.g.c, hdr.g.d);        // T = bit<16>, given
        hdr.g.e = choose(hdr.g.a > hdr.g.b, hdr.g.a, hdr.g.b);
        hdr.g.f = choose<bit<16>>(hdr.g.c > 0x0100, hdr.g.c, 0x0100);
        sm.egress_spec = 2;
    }
}

control GenEgress(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) { apply { } }
control GenCompute(inout headers_t hdr, inout meta_t meta) { apply { } }
control GenDeparser(packet_out pkt, in headers_t hdr) { apply { pkt.emit(hdr.g); } }

V1Switch(GenParser(), GenVerify(), GenIngress(), GenEgress(), GenCompute(), GenDeparser()) main;
