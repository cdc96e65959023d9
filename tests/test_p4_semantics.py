"""Language and v1model semantics of the embedded pipeline, driven through features.p4."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from p4switch.frontend import load_program
from p4switch.pipeline import Pipeline, QueueMeta
from p4switch.runtime import PipelineAssertion

PROGRAMS = Path(__file__).parent / "p4programs"
ETH = bytes.fromhex("000000000002" "000000000001")
CALC = struct.Struct(">BBBBbHIB")


@pytest.fixture(scope="module")
def program():
    return load_program(PROGRAMS / "features.p4")


@pytest.fixture
def pipe(program):
    return Pipeline(program)


def calc_packet(op: int, a: int, b: int, rounds: int = 0) -> bytes:
    return ETH + b"\x90\x00" + CALC.pack(op, a, b, 0, 0, 0, 0, rounds) + b"payload"


def run_calc(pipe: Pipeline, op: int, a: int, b: int, port: int = 7) -> dict:
    out = pipe.process(calc_packet(op, a, b), port)
    assert len(out) == 1, out
    out_port, frame = out[0]
    assert out_port == port
    assert frame[12:14] == b"\x90\x00"
    assert frame.endswith(b"payload")
    op_, a_, b_, r8, s8, r16, r32, rounds = CALC.unpack(frame[14:14 + CALC.size])
    return {"r8": r8, "s8": s8, "r16": r16, "r32": r32, "rounds": rounds}


def s8(x: int) -> int:
    return x - 256 if x >= 128 else x


@pytest.mark.parametrize("a,b", [(0, 0), (200, 100), (255, 1), (17, 250), (128, 128)])
def test_unsigned_arithmetic_wraps_and_saturates(pipe, a, b):
    assert run_calc(pipe, 1, a, b)["r8"] == (a + b) % 256
    assert run_calc(pipe, 2, a, b)["r8"] == min(a + b, 255)
    assert run_calc(pipe, 3, a, b)["r8"] == max(a - b, 0)
    assert run_calc(pipe, 9, a, b)["r8"] == (a - b) % 256
    r = run_calc(pipe, 10, a, b)
    assert r["r8"] == (a * b) % 256 and r["r16"] == a * b


@pytest.mark.parametrize("a,b", [(100, 100), (156, 156), (127, 1), (200, 10), (5, 250)])
def test_signed_saturating_add(pipe, a, b):
    assert run_calc(pipe, 4, a, b)["s8"] == max(-128, min(127, s8(a) + s8(b)))


@pytest.mark.parametrize("a", [0, 1, 127, 128, 255])
def test_negation_and_sign_extending_casts(pipe, a):
    r = run_calc(pipe, 8, a, 0)
    assert r["s8"] == s8((-s8(a)) % 256)
    assert r["r32"] == s8(a) % (1 << 32)


@pytest.mark.parametrize("a,b", [(0xAB, 0xCD), (0x01, 0x80), (0xFF, 0x00)])
def test_concat_slices_and_slice_assignment(pipe, a, b):
    assert run_calc(pipe, 5, a, b)["r16"] == (a << 8) | b
    r = run_calc(pipe, 7, a, b)
    assert r["r8"] == ((a & 0xF) << 4) | (b >> 4)
    assert r["r16"] == (b << 8) | (a >> 4)


@pytest.mark.parametrize("a,b", [(0x81, 1), (0x81, 7), (0x81, 8), (0xFF, 200)])
def test_shifts(pipe, a, b):
    r = run_calc(pipe, 6, a, b)
    assert r["r8"] == (a << b) % 256
    assert r["r16"] == (a << 4) % 65536
    assert r["r32"] == a >> 1


@pytest.mark.parametrize("a", [0x80, 0xF0, 0x7F, 0x04])
def test_signed_shift_is_arithmetic(pipe, a):
    r = run_calc(pipe, 26, a, 0)
    assert r["s8"] == s8(a) >> 2
    assert r["r8"] == (1 if s8(a) < 0 else 0)


def test_division_modulo_not_and_comparisons(pipe):
    r = run_calc(pipe, 11, 100, 0)
    assert (r["r8"], r["r16"]) == (33, 1)
    r = run_calc(pipe, 12, 0x0F, 0x0F)
    assert r["r8"] == 0xF0 and r["r16"] == 0b10
    assert run_calc(pipe, 12, 3, 9)["r16"] == 0b01
    assert run_calc(pipe, 12, 9, 3)["r16"] == 0b00


def test_function_mux_nested_control_and_const_entries(pipe):
    assert run_calc(pipe, 13, 3, 9)["r8"] == 9
    assert run_calc(pipe, 13, 200, 9)["r8"] == 200
    assert run_calc(pipe, 14, 3, 10)["r8"] == 7
    assert run_calc(pipe, 14, 10, 3)["r8"] == 7
    assert run_calc(pipe, 25, 10, 7)["r8"] == 24  # copy-in/copy-out through two applies
    assert run_calc(pipe, 27, 1, 0)["r8"] == 11
    assert run_calc(pipe, 27, 2, 0)["r8"] == 22
    assert run_calc(pipe, 27, 3, 0)["r8"] == 41  # an action calling an action
    assert run_calc(pipe, 27, 4, 0)["r8"] == 99
    with pytest.raises(Exception, match="const"):
        pipe.tables["FIngress.consts"].clear()


def test_exit_skips_the_rest_of_ingress(pipe):
    r = run_calc(pipe, 28, 0, 0)
    assert r["r8"] == 1 and r["rounds"] == 0
    assert run_calc(pipe, 1, 1, 1)["rounds"] == 0x80


def test_registers_from_the_data_plane_and_control_plane(pipe):
    r = run_calc(pipe, 15, 3, 41)
    assert r["r8"] == 42 and r["r16"] == 0  # out-of-range read gives 0
    assert pipe.registers["FIngress.regs"].read(3) == 41
    pipe.registers["FIngress.regs"].write(3, 7)
    assert pipe.registers["FIngress.regs"].read(3) == 7


def test_meter_colours_by_rate(pipe):
    meters = pipe.meters["FIngress.meters"]
    meters.set_config(2, 1000.0, 1, 2000.0, 2)  # packets/s: burst 1 green, 2 peak
    colours = [pipe.process(calc_packet(22, 2, 0), 1, now_us=10)[0][1][17] for _ in range(3)]
    assert colours == [0, 1, 2]  # green, yellow, red within the same microsecond
    later = pipe.process(calc_packet(22, 2, 0), 1, now_us=10 + 1_000_000)[0][1][17]
    assert later == 0
    assert run_calc(pipe, 22, 1, 0)["r8"] == 0  # unconfigured meter: green


def test_digest_reaches_the_sink(pipe):
    seen = []
    pipe.digest_sink = lambda name, values: seen.append((name, values))
    run_calc(pipe, 16, 5, 6, port=3)
    assert seen == [("learn_t", (5, 6, 3))]
    assert pipe.info.digests["learn_t"].fields[2].bitwidth == 9


def test_i2e_clone_goes_to_the_session_port(pipe):
    pipe.pre.set_clone_session(4, [(9, 0)])
    out = dict(pipe.process(calc_packet(17, 1, 4), 7))
    assert set(out) == {7, 9}
    clone = CALC.unpack(out[9][14:14 + CALC.size])
    assert clone[6] == 1  # instance_type INGRESS_CLONE seen in egress
    assert clone[0] == 17 and clone[3] == 0  # the original packet, reparsed


def test_multicast_replicates_with_rid(pipe):
    pipe.pre.set_multicast_group(3, [(2, 100), (5, 101)])
    out = pipe.process(calc_packet(18, 0, 3), 7)
    assert sorted(p for p, _ in out) == [2, 5]
    by_port = {p: CALC.unpack(f[14:14 + CALC.size]) for p, f in out}
    assert by_port[2][5] == 100 and by_port[5][5] == 101
    assert by_port[2][6] == 5  # REPLICATION


def test_resubmit_preserves_the_field_list(pipe):
    r = run_calc(pipe, 19, 77, 0)
    assert r["r8"] == 77 and r["r32"] == 6  # RESUBMIT


def test_recirculate_runs_ingress_again(pipe):
    out = pipe.process(calc_packet(20, 0, 0), 7)
    assert len(out) == 1
    r = CALC.unpack(out[0][1][14:14 + CALC.size])
    assert r[7] & 0x7F == 3 and r[6] == 4  # three passes, last one RECIRC


def test_truncate_and_log(pipe):
    out = pipe.process(calc_packet(21, 0, 0), 7)
    assert len(out[0][1]) == 14
    logged: list[str] = []
    pipe.log = logged.append
    pipe.process(calc_packet(24, 3, 4), 7)
    assert logged == ["calc a=3 b=4"]


def test_assert_failure_raises(pipe):
    run_calc(pipe, 23, 1, 0)
    with pytest.raises(PipelineAssertion, match="features.p4:"):
        pipe.process(calc_packet(23, 0xFF, 0), 7)


def test_unknown_op_hits_default_and_drops(pipe):
    assert pipe.process(calc_packet(99, 0, 0), 7) == []


def test_lookahead_and_verify_set_parser_error(pipe):
    out = pipe.process(ETH + b"\x90\x00" + b"\x00" * 12, 7)
    assert len(out) == 1
    frame = out[0][1]
    assert frame[12:14] == b"\xee\xee" and frame[6:12] == bytes.fromhex("000000000bad")


def test_truncated_header_is_packet_too_short(pipe):
    out = pipe.process(ETH + b"\x90\x00" + b"\x01\x02", 7)
    assert out[0][1][12:14] == b"\xee\xee"
    assert out[0][1][6:12] == bytes.fromhex("000000000001")  # not BadOp


def label(value: int, bos: int, ttl: int = 64) -> bytes:
    return struct.pack(">I", (value << 12) | (bos << 8) | ttl)


def test_header_stack_parse_pop_and_emit(pipe):
    stack = label(5, 0) + label(6, 0) + label(7, 1)
    out = pipe.process(ETH + b"\x88\x47" + stack + b"rest", 1)
    assert out == [(5, ETH + b"\x88\x47" + label(6, 0) + label(7, 1) + b"rest")]
    out = pipe.process(ETH + b"\x88\x47" + label(3, 1) + b"rest", 1)
    assert out == [(3, ETH + b"\x08\x00" + b"rest")]


def test_header_stack_overflow_is_a_parser_error(pipe):
    stack = b"".join(label(2, 0) for _ in range(5))
    out = pipe.process(ETH + b"\x88\x47" + stack, 1)
    assert out[0][0] == 1 and out[0][1][12:14] == b"\xee\xee"


def test_header_union_members(pipe):
    v4 = b"\x45" + b"\x00" * 19
    v6 = b"\x60" + b"\x00" * 39
    assert pipe.process(ETH + b"\x08\x00" + v4, 1) == [(4, ETH + b"\x08\x00" + v4)]
    assert pipe.process(ETH + b"\x86\xdd" + v6, 1) == [(6, ETH + b"\x86\xdd" + v6)]


def test_masked_select_and_advance(pipe):
    # 0x91xx matches `0x9100 &&& 0xFF00`, advance skips 2 bytes; no header valid -> drop
    assert pipe.process(ETH + b"\x91\x23" + b"\x00" * 4, 1) == []


def test_egress_sees_queue_metadata(program):
    pipe = Pipeline(program)
    jobs = pipe.ingress(calc_packet(1, 1, 2), 7, now_us=5)
    assert [(j.egress_port, j.priority) for j in jobs] == [(7, 0)]
    out = pipe.egress(jobs[0], QueueMeta(enq_timestamp=5, enq_qdepth=3, deq_timedelta=2))
    assert len(out) == 1 and out[0][0] == 7


def test_invalid_headers_read_as_zero(program):
    source = (PROGRAMS / "features.p4").read_text().replace(
        "            Op.EXIT: {",
        "            (Op)8w128: {\n"
        "                hdr.calc.setInvalid();\n"
        "                bit<8> seen = hdr.calc.a;\n"
        "                hdr.calc.setValid();\n"
        "                hdr.calc.r8 = seen + 1;\n"
        "                hdr.calc.r16 = (bit<16>)hdr.calc.b;\n"
        "                hdr.calc.op = 128;\n"
        "            }\n"
        "            Op.EXIT: {")
    from p4switch.frontend import load_program_text
    pipe = Pipeline(load_program_text(source, "features.p4"))
    out = pipe.process(calc_packet(128, 9, 7), 7)
    op, a, b, r8, *_ = CALC.unpack(out[0][1][14:14 + CALC.size])
    assert (op, a, b, r8) == (128, 0, 0, 1)  # fields of the invalidated header read 0
