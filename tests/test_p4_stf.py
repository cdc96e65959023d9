"""STF runner and the `p4switch stf` / `p4switch compile` commands."""

from __future__ import annotations

from pathlib import Path

import pytest

from p4switch.cli import main as p4switch_main
from p4switch.frontend import load_program
from p4switch.pipeline import Pipeline
from p4switch.stf import StfError, run_stf

PROGRAMS = Path(__file__).parent / "p4programs"
STF_FILES = sorted(PROGRAMS.glob("*.stf"))


@pytest.fixture(scope="module")
def router():
    return load_program(PROGRAMS / "ipv4_router.p4")


@pytest.mark.parametrize("stf", STF_FILES, ids=[p.stem for p in STF_FILES])
def test_program_passes_its_stf(stf):
    program = load_program(stf.with_suffix(".p4"))
    result = run_stf(Pipeline(program), stf.read_text())
    assert result.ok, "\n".join(result.failures)
    assert not result.extensions, f"p4switch extensions used: {result.extensions}"
    assert result.packets_sent > 0


def test_every_test_program_has_an_stf():
    assert {p.stem for p in PROGRAMS.glob("*.p4")} - {p.stem for p in STF_FILES} <= {"features"}
    assert len(STF_FILES) >= 3


ROUTE = ("add ipv4_lpm hdr.ipv4.dstAddr:0x0a000100/24 "
         "ipv4_forward(dstAddr:0x000000000102, port:2)\n")
PKT = "packet 1 000000000101 000000000001 0800 4500001d00010000401165c80a0000010a000107 000100020009a9d141\n"
OUT = "000000000102 000000000101 0800 4500001d000100003f1166c80a0000010a000107 000100020009a9d141"


def test_mismatch_is_reported_with_a_readable_diff(router):
    wrong = OUT.replace("3f11", "3e11")
    result = run_stf(Pipeline(router), ROUTE + PKT + f"expect 2 {wrong}\n")
    assert not result.ok
    text = result.failures[0]
    assert "port 2, packet 0 (expect on line 3)" in text and "differs" not in text
    assert "packets differ at byte 22" in text
    assert "expected 0000000001020000000001010800" in text and "^" in text


def test_wildcards_prefix_matching_and_exact_end(router):
    prefix = OUT.replace(" ", "")[:40]
    starred = "*" * 12 + OUT.replace(" ", "")[12:]
    assert run_stf(Pipeline(router), ROUTE + PKT + f"expect 2 {prefix}\n").ok
    assert run_stf(Pipeline(router), ROUTE + PKT + f"expect 2 {starred} $\n").ok
    result = run_stf(Pipeline(router), ROUTE + PKT + f"expect 2 {prefix} $\n")
    assert not result.ok and "exact length" in result.failures[0]


def test_missing_and_unexpected_packets(router):
    result = run_stf(Pipeline(router), PKT + f"expect 2 {OUT}\n")
    assert result.failures == ["port 2: expected 1 packet(s), got 0"]
    result = run_stf(Pipeline(router), ROUTE + PKT + "expect 1 00\n")
    assert not any("port 2" in f for f in result.failures)  # port 2 was never named
    assert "port 1: expected 1 packet(s), got 0" in result.failures
    result = run_stf(Pipeline(router), ROUTE + PKT + "no_packet\n")
    assert "port 2: expected 0 packet(s), got 1" in result.failures[0]
    assert "unexpected 000000000102" in result.failures[0]
    assert run_stf(Pipeline(router), ROUTE + PKT + "expect 2\n").ok


def test_setdefault_and_remove_all(router):
    text = ("setdefault ipv4_lpm ipv4_forward(dstAddr:0x000000000999, port:7)\n" + PKT +
            "expect 7 000000000999\n")
    assert run_stf(Pipeline(router), text).ok
    text = ROUTE + "remove all\n" + PKT + "expect 2\nno_packet\n"
    result = run_stf(Pipeline(router), text)
    assert result.ok


@pytest.mark.parametrize("text,message", [
    ("frobnicate 1\n", "unsupported STF command 'frobnicate'"),
    ("add nosuch k:1 a()\n", "no table named 'nosuch'"),
    ("add ipv4_lpm hdr.ipv4.dstAddr:0x0a000100/24 nosuch()\n", "no action of table"),
    ("add ipv4_lpm hdr.ipv4.dstAddr:0x0a000100/24 ipv4_forward(port:1)\n", "needs dstAddr"),
    ("add ipv4_lpm hdr.ipv4.srcAddr:1 ipv4_forward(dstAddr:1, port:1)\n", "no key field 'hdr.ipv4.srcAddr'"),
    ("packet x 00\n", "packet needs PORT HEXDATA"),
    ("packet 1 0g\n", "packet needs PORT HEXDATA"),
    ("check_counter c\n", "check_counter NAME"),
])
def test_bad_input_raises_stf_error_with_line(router, text, message):
    with pytest.raises(StfError, match=message):
        run_stf(Pipeline(router), text)


def test_counters_mirroring_and_multicast_commands():
    ecmp = load_program(PROGRAMS / "ecmp.p4")
    text = (PROGRAMS / "ecmp.stf").read_text()
    result = run_stf(Pipeline(ecmp), text.replace("ingress_drops(1) packets == 1", "ingress_drops(1) packets == 5"))
    assert result.failures == [f"line {_line_of(text, 'ingress_drops(1)')}: counter ingress_drops(1) "
                               "packets is 1, expected == 5"]
    features = Pipeline(load_program(PROGRAMS / "features.p4"))
    calc = "000000000002 000000000001 9000 {op:02x}00{b:02x}00 00 0000 00000000 00 ee"
    text = ("mirroring_add 3 9\n"
            f"packet 1 {calc.format(op=17, b=3)}\n"
            "expect 1 000000000002\nexpect 9 000000000002\n"
            "mc_mgrp_create 4\nmc_node_create 100 5 6\nmc_node_associate 4 0\n"
            f"packet 1 {calc.format(op=18, b=4)}\n"
            "expect 5 ************ ************ 9000 12 00 04 ** ** 0064\n"
            "expect 6 ************ ************ 9000 12 00 04 ** ** 0064\n")
    result = run_stf(features, text)
    assert result.ok, result.failures


def test_stack_indices_and_validity_keys_in_stf():
    features = Pipeline(load_program(PROGRAMS / "features.p4"))
    labels = "8847 00005040 00006140"  # label 5 (not bottom), label 6 (bottom of stack)
    text = ("add by_label 1 hdr.labels$1.label:0x0000* hdr.labels$0.valid:1 to_port(port:9)\n"
            f"packet 1 000000000002 000000000001 {labels}\n"
            "expect 9 000000000002 000000000001 8847 00006140 $\n")
    result = run_stf(features, text)
    assert result.ok, result.failures


def _line_of(text: str, needle: str) -> int:
    return text[:text.index(needle)].count("\n") + 1


def test_stf_command_exit_codes(tmp_path, capsys):
    prog, stf = PROGRAMS / "ipv4_router.p4", PROGRAMS / "ipv4_router.stf"
    assert p4switch_main(["stf", str(prog), str(stf)]) == 0
    broken = tmp_path / "broken.stf"
    broken.write_text(stf.read_text().replace("expect 2 000000000102", "expect 2 000000000103"))
    assert p4switch_main(["stf", str(prog), str(broken)]) == 1
    err = capsys.readouterr().err
    assert "FAILED" in err and "packets differ at byte 5" in err
    bad = tmp_path / "bad.stf"
    bad.write_text("frobnicate\n")
    assert p4switch_main(["stf", str(prog), str(bad)]) == 2
    assert "unsupported STF command" in capsys.readouterr().err
    bad_prog = tmp_path / "bad.p4"
    bad_prog.write_text("header {")
    assert p4switch_main(["stf", str(bad_prog), str(stf)]) == 2
    assert "bad.p4:1:8: syntax error" in capsys.readouterr().err


def test_compile_command_writes_p4info_and_device_config(tmp_path, capsys):
    p4info, config = tmp_path / "out" / "r.p4info.txtpb", tmp_path / "out" / "r.json"
    assert p4switch_main(["compile", str(PROGRAMS / "ipv4_router.p4"), "--p4runtime-files",
                          str(p4info), "--out", str(config)]) == 0
    assert 'name: "MyIngress.ipv4_lpm"' in p4info.read_text()
    assert config.read_bytes().startswith(b"{")
    assert "1 table(s)" in capsys.readouterr().out
    binary = tmp_path / "r.p4info.bin"
    assert p4switch_main(["compile", str(PROGRAMS / "ipv4_router.p4"), "--p4runtime-files", str(binary)]) == 0
    from p4.config.v1 import p4info_pb2
    parsed = p4info_pb2.P4Info.FromString(binary.read_bytes())
    assert parsed.tables[0].preamble.name == "MyIngress.ipv4_lpm"
