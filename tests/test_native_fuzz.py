"""Differential fuzzer, native against Python: the same seeded packets (tests/stf_fuzz.py)
through the native datapath and the Python pipeline, after the same STF file's entries, must
leave on the same ports with the same bytes in the same order. No BMv2 needed, so every
program the native backend covers is fuzzed, also those p4c's STF driver cannot run
(range keys, register state); tests/test_bmv2_fuzz.py adds BMv2 as the third party."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from p4switch.native.build import find_compiler
from tests.stf_fuzz import generate, output_differences, replay_native
from tests.test_native_pipeline import STF_CASES

pytestmark = pytest.mark.skipif(find_compiler() is None, reason="no C compiler on this machine")

COUNT = int(os.environ.get("GRADFABRIC_FUZZ_PACKETS", "600"))


@pytest.mark.parametrize("program,stf", STF_CASES, ids=[s.stem for _, s in STF_CASES])
def test_native_and_python_agree_on_fuzzed_packets(program: Path, stf: Path) -> None:
    text = stf.read_text()
    case = generate(program, text, COUNT, seed=sum(map(ord, stf.stem)))
    native = replay_native(program, text, case)
    diff = output_differences(case.outputs, native)
    assert not diff, f"{stf.stem}: {len(diff)} difference(s):\n" + "\n".join(diff)
    print(f"{stf.stem}: {case.packets} packets, {case.forwarded} forwarded, {case.failed} failed, "
          f"{case.logged} log lines, identical natively")


def test_a_planted_native_difference_is_caught() -> None:
    program, stf = next((p, s) for p, s in STF_CASES if s.stem == "ipv4_router")
    text = stf.read_text()
    case = generate(program, text, 100, seed=5)
    native = replay_native(program, text, case)
    port = next(p for p, frames in sorted(native.items()) if frames and p >= 0)
    planted = bytearray(native[port][0])
    planted[-1] ^= 0xFF
    native[port][0] = bytes(planted)
    diff = output_differences(case.outputs, native)
    assert len(diff) == 1 and f"port {port} packet 0" in diff[0]
