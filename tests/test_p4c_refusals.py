"""Constructs p4c 1.2.4.17's BMv2 back end refuses, which p4switch refuses too, each with the
location: a function declared inside a control (p4c does not parse it) and `this` in an
abstract method of an extern instance (p4c parses it; its BMv2 back end cannot emit it). The
p4c halves are strict, so a newer p4c that accepts one shows up here."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from p4switch.frontend import P4SyntaxError, load_program_text

TEMPLATE = """#include <core.p4>
#include <v1model.p4>
header h_t {{ bit<8> a; bit<8> b; }}
struct H {{ h_t h; }}
struct M {{ }}
{extra}
parser P(packet_in pk, out H hd, inout M m, inout standard_metadata_t sm) {{
    state start {{ pk.extract(hd.h); transition accept; }}
}}
control V(inout H hd, inout M m) {{ apply {{ }} }}
control I(inout H hd, inout M m, inout standard_metadata_t sm) {{
    {locals}
    apply {{ {body} sm.egress_spec = 2; }}
}}
control E(inout H hd, inout M m, inout standard_metadata_t sm) {{ apply {{ }} }}
control C(inout H hd, inout M m) {{ apply {{ }} }}
control D(packet_out pk, in H hd) {{ apply {{ pk.emit(hd.h); }} }}
V1Switch(P(), V(), I(), E(), C(), D()) main;
"""

CASES = {
    "local_function": (TEMPLATE.format(extra="", locals="bit<8> twice(in bit<8> x) { return x + x; }",
                                       body="hd.h.b = twice(hd.h.a);"),
                       r"local_function\.p4:12:", "syntax error, unexpected ("),
    "this": (TEMPLATE.format(extra="extern Ab { Ab(); abstract bit<8> f(in bit<8> v); bit<8> g(in bit<8> v); }",
                             locals="Ab() x = { bit<8> f(in bit<8> v) { return this.g(v); } };",
                             body="hd.h.b = x.f(hd.h.a);"),
             r"this\.p4:12:", "could not convert expression to Json"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_p4switch_refuses_with_the_location(name: str) -> None:
    source, where, _ = CASES[name]
    with pytest.raises(P4SyntaxError, match=where):
        load_program_text(source, f"{name}.p4")


@pytest.mark.bmv2
@pytest.mark.parametrize("name", sorted(CASES))
def test_p4c_refuses_for_bmv2(name: str, tmp_path: Path) -> None:
    from gradfabric.p4ref import require_tool

    source, _, message = CASES[name]
    program = tmp_path / f"{name}.p4"
    program.write_text(source)
    proc = subprocess.run([str(require_tool("p4c")), "--target", "bmv2", "--arch", "v1model", "-o", str(tmp_path),
                           str(program)], capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and message in proc.stderr + proc.stdout, proc.stderr
