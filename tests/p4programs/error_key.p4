// A table keyed on the parser's error: entries name the error by its code (BMv2 numbers the
// errors in declaration order: NoError 0, PacketTooShort 1, NoMatch 2, ...). p4c refuses const
// entries on such a key for BMv2, so the entries come from the control plane.
#include <core.p4>
#include <v1model.p4>

header h_t { bit<8> a; bit<8> b; }
struct headers { h_t h; }
struct meta_t { }

parser P(packet_in pk, out headers hd, inout meta_t m, inout standard_metadata_t sm) {
    state start {
        pk.extract(hd.h);
        verify(hd.h.a == 0xAB, error.NoMatch);  // any other value: error.NoMatch
        transition accept;
    }
}
control VC(inout headers hd, inout meta_t m) { apply { } }
control I(inout headers hd, inout meta_t m, inout standard_metadata_t sm) {
    action to_port(bit<9> p) { sm.egress_spec = p; }
    table by_error {
        key = { sm.parser_error: exact; }
        actions = { to_port; NoAction; }
        default_action = NoAction;
    }
    apply {
        sm.egress_spec = 1;
        by_error.apply();
    }
}
control E(inout headers hd, inout meta_t m, inout standard_metadata_t sm) { apply { } }
control CC(inout headers hd, inout meta_t m) { apply { } }
control D(packet_out pk, in headers hd) { apply { pk.emit(hd.h); } }
V1Switch(P(), VC(), I(), E(), CC(), D()) main;
