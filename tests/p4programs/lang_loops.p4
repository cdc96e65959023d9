// Loops and compound assignment (P4-16 1.2.5): a C-style `for` with `break`, a `for ... in
// a .. b` range with `continue`, and every compound operator. p4c 1.2.4.17's BMv2 back end
// refuses both (see tests/test_stf_bmv2.py, P4C_REFUSES), so this program runs on p4switch.
#include <core.p4>
#include <v1model.p4>

header in_t  { bit<8> n; bit<8> x; bit<8> y; }
header out_t { bit<16> sum; bit<8> odd; bit<8> add; bit<8> sub; bit<8> mul; bit<8> and_; bit<8> or_;
               bit<8> xor_; bit<8> shl; bit<8> shr; bit<8> sat_add; bit<8> sat_sub; }
struct headers_t { in_t i; out_t o; }
struct meta_t { }

parser LoopParser(packet_in pkt, out headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.i); transition accept; }
}

control LoopVerify(inout headers_t hdr, inout meta_t meta) { apply { } }

control LoopIngress(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {
    apply {
        hdr.o.setValid();
        // sum of 0 .. n-1, stopping once the sum exceeds 200
        bit<16> sum = 0;
        for (bit<8> k = 0; k < hdr.i.n; k = k + 1) {
            if (sum > 200) { break; }
            sum += (bit<16>)k;
        }
        hdr.o.sum = sum;
        // odd numbers among 1 .. 9
        bit<8> odd = 0;
        for (bit<8> j in 1 .. 9) {
            if ((j & 1) == 0) { continue; }
            odd += 1;
        }
        hdr.o.odd = odd;
        hdr.o.add = hdr.i.x;  hdr.o.add += hdr.i.y;
        hdr.o.sub = hdr.i.x;  hdr.o.sub -= hdr.i.y;
        hdr.o.mul = hdr.i.x;  hdr.o.mul *= hdr.i.y;
        hdr.o.and_ = hdr.i.x; hdr.o.and_ &= hdr.i.y;
        hdr.o.or_ = hdr.i.x;  hdr.o.or_ |= hdr.i.y;
        hdr.o.xor_ = hdr.i.x; hdr.o.xor_ ^= hdr.i.y;
        hdr.o.shl = hdr.i.x;  hdr.o.shl <<= 2;
        hdr.o.shr = hdr.i.x;  hdr.o.shr >>= 3;
        hdr.o.sat_add = hdr.i.x; hdr.o.sat_add |+|= hdr.i.y;
        hdr.o.sat_sub = hdr.i.x; hdr.o.sat_sub |-|= hdr.i.y;
        sm.egress_spec = 2;
    }
}

control LoopEgress(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) { apply { } }
control LoopCompute(inout headers_t hdr, inout meta_t meta) { apply { } }
control LoopDeparser(packet_out pkt, in headers_t hdr) { apply { pkt.emit(hdr.i); pkt.emit(hdr.o); } }

V1Switch(LoopParser(), LoopVerify(), LoopIngress(), LoopEgress(), LoopCompute(), LoopDeparser()) main;
