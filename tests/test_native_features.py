"""features.p4 (the language and v1model features the Python pipeline's semantics tests use:
signed arithmetic, IPv6 addresses in a header union, resubmit, recirculate, clones, ...) on
both datapaths: every calculator op with boundary operands, and random frames of every
ether type it parses, give the same frames out (or the same failure)."""

from __future__ import annotations

import random
import struct
from pathlib import Path

import pytest

from p4switch.frontend import load_program
from p4switch.native.build import find_compiler
from p4switch.native.pipeline import NativePipeline
from p4switch.pipeline import Pipeline

pytestmark = pytest.mark.skipif(find_compiler() is None, reason="no C compiler on this machine")

PROGRAMS = Path(__file__).parent / "p4programs"
ETH = bytes.fromhex("000000000002" "000000000001")
CALC = struct.Struct(">BBBBbHIB")


def outcome(pipe: object, frame: bytes, port: int) -> object:
    try:
        return pipe.process(frame, port)  # type: ignore[attr-defined]
    except Exception as exc:  # noqa: BLE001 - a failed packet is an outcome to compare
        return (type(exc).__name__, str(exc))


def test_features_program_agrees_on_both_datapaths() -> None:
    program = load_program(PROGRAMS / "features.p4")
    python, native = Pipeline(program), NativePipeline(program)
    frames = [ETH + b"\x90\x00" + CALC.pack(op, a, b, 0, 0, 0, 0, rounds) + b"payload"
              for op in range(32) for a, b in ((0, 0), (200, 100), (255, 1), (17, 250), (128, 128), (127, 129))
              for rounds in (0, 2)]
    rng = random.Random(26)
    for _ in range(1500):
        etype = rng.choice([b"\x90\x00", b"\x88\x47", b"\x08\x00", b"\x86\xdd", b"\x91\x00"])
        frames.append(rng.randbytes(12) + etype + rng.randbytes(rng.randrange(0, 80)))
    try:
        differ = [frame.hex() for frame in frames
                  if outcome(python, frame, 7) != outcome(native, frame, 7)]
    finally:
        native.close()
    assert not differ, f"{len(differ)} of {len(frames)} frames differ, the first: {differ[0]}"
