"""The native datapath (C generated from the program) behaves as the Python pipeline: the
project's STF files, randomized packets against the same entries, the control-plane API."""

from __future__ import annotations

import random
import struct
from pathlib import Path

import pytest

from gradfabric.paths import P4SRC, ROOT
from p4switch.frontend import load_program, load_program_text
from p4switch.native.build import build, find_compiler
from p4switch.native.pipeline import NativePipeline, try_native
from p4switch.pipeline import Pipeline
from p4switch.runtime import PipelineAssertion
from p4switch.stf import run_stf
from p4switch.tables import EntryExists, EntryNotFound, Exact, Lpm, Range, TableEntry

pytestmark = pytest.mark.skipif(find_compiler() is None, reason="no C compiler on this machine")

PROGRAMS = ROOT / "tests" / "p4programs"
#: Programs of the project NativePipeline does not cover (none now; other tests import it).
FALLS_BACK: dict[str, str] = {}
#: Programs of the project the native switch loops do not run, with the reason given: a
#: switch runs them on the Python datapath (one log line says why); NativePipeline.process
#: runs them (resubmit and recirculate). Once the loops cover one, the test below fails.
SWITCH_FALLS_BACK = {
    "features": "extern resubmit",
}
#: Every STF file of the project with its program: tests/stf/ against the DLCP program,
#: tests/p4programs/NAME.stf against NAME.p4.
ALL_STF = [(P4SRC / "dlcp.p4", f) for f in sorted((ROOT / "tests" / "stf").glob("*.stf"))] + [
    (f.with_suffix(".p4"), f) for f in sorted(PROGRAMS.glob("*.stf"))]
STF_CASES = [(p, s) for p, s in ALL_STF if p.stem not in FALLS_BACK]


@pytest.fixture(scope="module")
def dlcp_program():
    return load_program(P4SRC / "dlcp.p4")


@pytest.mark.parametrize("program,stf", STF_CASES, ids=[s.stem for _, s in STF_CASES])
def test_stf_passes_natively(program: Path, stf: Path) -> None:
    native = NativePipeline(load_program(program))
    result = run_stf(native, stf.read_text())
    assert result.ok, result.failures


def test_a_wrong_expectation_fails_natively() -> None:
    text = (PROGRAMS / "ipv4_router.stf").read_text().replace(
        "expect 2 000000000102", "expect 2 000000000103", 1)
    result = run_stf(NativePipeline(load_program(PROGRAMS / "ipv4_router.p4")), text)
    assert not result.ok


def test_a_failed_assertion_fails_the_packet_natively_with_the_pipelines_message() -> None:
    """lang_truncate_assert_log.p4 assumes kind != 0xFF at the end of ingress; a variant also
    asserts kind != 0xFE in its parser (p4c's BMv2 back end refuses that, p4switch runs it).
    Such a packet fails with PipelineAssertion naming the file and line, on both datapaths;
    the next one passes."""
    text = (PROGRAMS / "lang_truncate_assert_log.p4").read_text()
    extract = "pkt.extract(hdr.op);"
    assert text.count(extract) == 1
    text = text.replace(extract, extract + " assert(hdr.op.kind != 0xFE);")
    program = load_program_text(text, "lang_truncate_assert_log.p4")
    source = text.splitlines()
    for kind, call in ((0xFE, "assert(hdr.op.kind"), (0xFF, "assume(")):
        line = 1 + next(i for i, t in enumerate(source) if call in t)
        messages = []
        for pipe in (Pipeline(program), NativePipeline(program)):
            with pytest.raises(PipelineAssertion) as failed:
                pipe.process(bytes([kind, 0x00, 0x10]), 1)
            messages.append(str(failed.value))
            assert pipe.process(bytes([0x01, 0x02, 0x10, 0xAA]), 1) == [(2, bytes([0x01, 0x02]))]
        assert messages[0] == messages[1]
        assert f"lang_truncate_assert_log.p4:{line}:" in messages[0], messages
        assert messages[0].endswith(f"{call[:6]} failed")


def test_log_msg_lines_match_the_python_pipeline() -> None:
    """lang_truncate_assert_log.p4 logs twice in ingress and once per copy in egress: the same
    lines in the same order on both datapaths (multicast group 1 sends copies to ports 3, 4)."""
    program = load_program(PROGRAMS / "lang_truncate_assert_log.p4")
    want = ["in kind=0 len=4", "ingress", "out port=2 v=17 rid=0",
            "in kind=3 len=9", "ingress", "out port=3 v=17 rid=7", "out port=4 v=17 rid=7"]
    for pipe in (Pipeline(program), NativePipeline(program)):
        run_stf(pipe, "mc_mgrp_create 1\nmc_node_create 7 3 4\nmc_node_associate 1 0\n")
        lines: list[str] = []
        pipe.log = lines.append
        pipe.process(bytes([0x00, 0x04, 0x10, 0xAA]), 1)
        pipe.process(bytes([0x03, 0x09, 0x10, 0xAA]), 1)
        assert lines == want, type(pipe).__name__


def test_digests_reach_the_sink_in_order_with_their_values() -> None:
    """mac_learning.p4 sends (source MAC, ingress port) for a source MAC smac does not know."""
    program = load_program(PROGRAMS / "mac_learning.p4")
    native = NativePipeline(program)
    got: list[tuple[str, tuple[int, ...]]] = []
    native.digest_sink = lambda name, values: got.append((name, values))
    native.tables["LearnIngress.smac"].insert(TableEntry((Exact(0x0A0B0C0D0E0F),), 0, "LearnIngress.known", ()))
    for src, port, ethertype in ((0x000000000005, 3, b"\x08\x00"), (0x0A0B0C0D0E0F, 1, b"\x88\xcc"),
                                 (0xFEDCBA987654, 511, b"\x88\xcc")):
        native.process(bytes.fromhex("000000000002") + src.to_bytes(6, "big") + ethertype + b"AA", port)
    assert got == [("learn_t", (0x000000000005, 3)), ("digest_0", (0x0A0B0C0D0E0F, 0x88CC)),
                   ("digest_0", (0xFEDCBA987654, 0x88CC)), ("learn_t", (0xFEDCBA987654, 511))]


def test_exit_inside_a_control_instance_copies_back_then_ends_the_control() -> None:
    """lang_subcontrol.p4 with `exit` for its early return (p4c 1.2.4.17 cannot compile that):
    first's `v` is copied back, then ingress ends (second not applied, mark not set)."""
    source = (PROGRAMS / "lang_subcontrol.p4").read_text().replace("v = 0xEE; return;", "v = 0xEE; exit;")
    assert "exit;" in source
    program = load_program_text(source, "lang_subcontrol_exit.p4")
    text = "packet 1 05 07 EE AA\nexpect 2 05 07 EE EE 07 00 00 AA $\n"
    for pipe in (Pipeline(program), NativePipeline(program)):
        result = run_stf(pipe, text)
        assert result.ok, (type(pipe).__name__, result.failures)


def test_an_extern_function_without_a_body_fails_only_the_packets_that_call_it() -> None:
    from p4switch.runtime import ExternFunctionMissing

    native = NativePipeline(load_program(PROGRAMS / "lang_extern_fn.p4"))
    assert native.process(bytes([0x01, 0x10]), 1) == [(2, bytes([0x01, 0x11]))]
    with pytest.raises(ExternFunctionMissing, match=r"extern function scramble \(declared at .*lang_extern_fn\.p4:12"):
        native.process(bytes([0xEE, 0x10]), 1)
    assert native.process(bytes([0x02, 0x20]), 1) == [(2, bytes([0x02, 0x21]))]  # the next packet is fine


def test_is_valid_of_a_stack_element_indexed_at_run_time() -> None:
    """stack_index.p4 with `found` = isValid() of cells[j] (simple_switch 1.15.5 cannot load
    that): cells 0-2 are extracted, cell 3 is not, an index past the stack reads nothing valid."""
    source = (PROGRAMS / "stack_index.p4").read_text().replace(
        "hdr.x.found = hdr.cells[hdr.x.j].v;", "hdr.x.found = hdr.cells[hdr.x.j].isValid() ? 8w1 : 8w0;")
    program = load_program_text(source, "stack_index_valid.p4")
    text = ("packet 1 01 02 00 10 20 30 EE\nexpect 2 01 02 01 10 31 30 EE $\n"
            "packet 1 02 03 00 10 20 30 EE\nexpect 2 02 03 00 10 20 01 00 EE $\n"
            "packet 1 02 09 00 10 20 30 EE\nexpect 2 02 09 00 10 20 01 EE $\n")
    for pipe in (Pipeline(program), NativePipeline(program)):
        result = run_stf(pipe, text)
        assert result.ok, (type(pipe).__name__, result.failures)


@pytest.mark.parametrize("name", sorted(SWITCH_FALLS_BACK))
def test_programs_the_native_switch_does_not_run_fall_back_with_the_reason(name: str) -> None:
    program = load_program(PROGRAMS / f"{name}.p4")
    native, why = try_native(program, for_switch=True)
    assert native is None, f"{name}.p4 now runs on the native switch: move it out of SWITCH_FALLS_BACK"
    assert SWITCH_FALLS_BACK[name] in why
    pipe, _ = try_native(program)
    assert pipe is not None  # NativePipeline.process runs it
    pipe.close()


def test_a_second_build_comes_from_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             dlcp_program) -> None:
    monkeypatch.setenv("P4SWITCH_NATIVE_CACHE", str(tmp_path))
    first = NativePipeline(dlcp_program)
    stamp = first.path.stat().st_mtime_ns
    assert first.path.parent == tmp_path
    assert build(first.source) == first.path
    assert first.path.stat().st_mtime_ns == stamp
    assert len(list(tmp_path.glob("*.so"))) == 1


def _ipv4(src: int, dst: int, proto: int, ttl: int, payload: bytes, ecn: int = 0, dscp: int = 0,
          flags: int = 0, checksum_ok: bool = True) -> bytes:
    header = struct.pack("!BBHHHBBHII", 0x45, (dscp << 2) | ecn, 20 + len(payload), 1, flags, ttl,
                         proto, 0, src, dst)
    total = sum(struct.unpack("!10H", header))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    csum = (~total) & 0xFFFF if checksum_ok else 0x1234
    return header[:10] + struct.pack("!H", csum) + header[12:] + payload


def _dlcp_packet(rng: random.Random) -> bytes:
    eth = bytes.fromhex("000000000101") + bytes.fromhex("00000a000101") + b"\x08\x00"
    kind = rng.random()
    if kind < 0.05:
        return eth[:12] + b"\x08\x06" + rng.randbytes(28)  # ARP: not IPv4
    if kind < 0.1:
        return eth + rng.randbytes(rng.randint(0, 40))  # truncated or garbage IPv4
    dst = rng.choice([0x0A000202, 0x0A000303, 0x0A000909, 0x0A000404, rng.getrandbits(32)])
    src = rng.getrandbits(32)
    if kind < 0.3:
        l4 = struct.pack("!HHIIHHHH", rng.getrandbits(16), rng.getrandbits(16), 0, 0, 0x5000, 0, 0, 0)
        proto = 6
    else:
        version = 1 if rng.random() < 0.9 else rng.getrandbits(4)
        flags = rng.getrandbits(4)
        dlcp = struct.pack("!BBHHHIIIHBBI", (version << 4) | rng.getrandbits(4), flags,
                           rng.choice([1, 2, 7, rng.getrandbits(16)]), rng.getrandbits(16),
                           rng.choice([0, 3, 9, rng.getrandbits(16)]), rng.getrandbits(32),
                           rng.getrandbits(32), rng.getrandbits(32), rng.getrandbits(16),
                           rng.getrandbits(8), rng.getrandbits(8), rng.getrandbits(32))
        port = 19600 if rng.random() < 0.8 else rng.getrandbits(16)
        l4 = struct.pack("!HHHH", rng.getrandbits(16), port, 8 + len(dlcp), 0) + dlcp
        proto = 17
    ttl = rng.choice([0, 1, 2, 64, 255])
    ip = _ipv4(src, dst, proto, ttl, l4 + rng.randbytes(rng.randint(0, 30)), ecn=rng.getrandbits(2),
               dscp=rng.getrandbits(6), flags=rng.choice([0, 0, 0x2000, 1]),
               checksum_ok=rng.random() < 0.95)
    return eth + ip


def _install_dlcp(pipeline) -> None:
    t = pipeline.tables
    t["DlcpIngress.ipv4_lpm"].insert(TableEntry((Lpm(0x0A000200, 24),), 0, "DlcpIngress.set_nhop",
                                                (2, 0x000000000102, 0x00000A000202)))
    t["DlcpIngress.ipv4_lpm"].insert(TableEntry((Lpm(0x0A000303, 32),), 0, "DlcpIngress.set_ecmp_group",
                                                (5, 3)))
    t["DlcpIngress.ipv4_lpm"].insert(TableEntry((Lpm(0x0A000000, 16),), 0, "DlcpIngress.set_nhop",
                                                (4, 0x000000000104, 0x00000A000404)))
    t["DlcpIngress.ipv4_lpm"].insert(TableEntry((Lpm(0x0A000400, 24),), 0, "DlcpIngress.set_ecmp_group",
                                                (6, 2)))
    for member in range(3):
        t["DlcpIngress.ecmp_member"].insert(TableEntry((Exact(5), Exact(member)), 0, "DlcpIngress.set_nhop",
                                                       (3 + member, 0x0102, 0x0A0303)))
    t["DlcpIngress.ecmp_member"].insert(TableEntry((Exact(6), Exact(0)), 0, "DlcpIngress.set_nhop", (7, 1, 2)))
    t["DlcpIngress.spray_mode"].insert(TableEntry((Exact(2),), 0, "DlcpIngress.spray_round_robin", ()))
    t["DlcpIngress.layer_priority"].insert(TableEntry((Exact(1), Range(0, 5), Range(0, 200)), 10,
                                                      "DlcpIngress.set_priority", (5, 46)))
    t["DlcpIngress.layer_priority"].insert(TableEntry((Exact(1), None, None), 5,
                                                      "DlcpIngress.set_priority", (2, 10)))
    t["DlcpIngress.drop_class"].insert(TableEntry((Exact(1), None, Range(0, 100)), 1, "DlcpIngress.drop_above",
                                                  (0,)))
    t["DlcpIngress.drop_class"].insert(TableEntry((Exact(7), Range(2, 9), None), 3, "DlcpIngress.drop_above",
                                                  (1,)))
    t["DlcpEgress.ecn_threshold"].insert(TableEntry((Exact(1),), 0, "DlcpEgress.mark_above", (0,)))
    t["DlcpIngress.switch_seed"].set_default("DlcpIngress.set_seed", (0x9E3779B1,))


def test_random_packets_give_the_same_bytes_and_counters(dlcp_program) -> None:
    python, native = Pipeline(dlcp_program), NativePipeline(dlcp_program)
    for p in (python, native):
        _install_dlcp(p)
    rng = random.Random(18)
    forwarded = 0
    for i in range(1500):
        frame = _dlcp_packet(rng)
        port = rng.choice([1, 2, 3])
        expected = python.process(frame, port, i)
        assert native.process(frame, port, i) == expected, f"packet {i}: {frame.hex()}"
        forwarded += len(expected)
    assert forwarded > 300  # the mix really exercises forwarding, not only drops
    for name, counter in python.counters.items():
        for index in range(counter.size):
            assert native.counters[name].read(index) == counter.read(index), f"{name}[{index}]"
    assert native.registers["DlcpIngress.rr_position"].read(2) == python.registers[
        "DlcpIngress.rr_position"].read(2)
    table = "DlcpIngress.ecmp_member"
    for entry in python.tables[table].entries():
        assert native.tables[table].direct_counter(entry) == python.tables[table].direct_counter(entry)


def test_control_plane_writes_reach_the_native_datapath(dlcp_program) -> None:
    native = NativePipeline(dlcp_program)
    lpm = native.tables["DlcpIngress.ipv4_lpm"]
    entry = TableEntry((Lpm(0x0A000200, 24),), 0, "DlcpIngress.set_nhop", (2, 1, 2))
    frame = bytes.fromhex("000000000101" "00000a000101" "0800") + _ipv4(0x0A000101, 0x0A000202, 17, 64,
                                                                         b"\x13\x88\x17\x70\x00\x0a\x00\x00xy")
    assert native.process(frame, 1) == []
    lpm.insert(entry)
    with pytest.raises(EntryExists):
        lpm.insert(entry)
    assert [p for p, _ in native.process(frame, 1)] == [2]
    lpm.modify(TableEntry(entry.match, 0, "DlcpIngress.set_nhop", (9, 1, 2)))
    assert [p for p, _ in native.process(frame, 1)] == [9]
    lpm.delete(entry)
    with pytest.raises(EntryNotFound):
        lpm.delete(entry)
    assert native.process(frame, 1) == []
    assert native.counters["DlcpIngress.ingress_drops"].read(1) == (2, 2 * len(frame))
    native.counters["DlcpIngress.ingress_drops"].write(1, 0, 0)
    assert native.counters["DlcpIngress.ingress_drops"].read(1) == (0, 0)


def test_a_fault_of_the_generator_falls_back_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    import p4switch.native.pipeline as native_pipeline

    def broken(*args: object, **kwargs: object) -> None:
        raise UnboundLocalError("cannot access local variable 'code'")
    monkeypatch.setattr(native_pipeline, "generate_c", broken)
    native, why = try_native(load_program(PROGRAMS / "ipv4_router.p4"))
    assert native is None
    assert why == "the native backend failed on the program: UnboundLocalError: cannot access local variable 'code'"
