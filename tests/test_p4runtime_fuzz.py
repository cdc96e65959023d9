"""Fuzzed RPCs and malformed frames against the embedded switch running p4src/dlcp.p4 (seeded,
bounded; `make soak` runs the same for 10^5 RPCs and 10^6 frames): no INTERNAL answer, no
pipeline error, every stream gone at the end, and the server still serves."""

from __future__ import annotations

import random
import time

import pytest

from tests.p4runtime_fuzz import FuzzBed, RpcFuzzer, malformed_frames

SEED = 19
RPCS = 800
FRAMES = 20_000


@pytest.mark.slow
def test_fuzzed_rpcs_and_malformed_frames_break_nothing() -> None:
    with FuzzBed() as bed:
        fuzzer = RpcFuzzer(bed.channel, bed.DEVICE_ID, bed.config, SEED)
        frames = malformed_frames(random.Random(SEED))
        for i in range(RPCS):
            fuzzer.one()
            for _ in range(FRAMES // RPCS):
                bed.frame(*next(frames))
        bed.check_alive()
        assert bed.pipeline_errors == 0
        deadline = time.monotonic() + 30  # the server sees the fuzzer's streams go when its threads get a turn
        while bed.server.servicer._open_streams > 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert bed.server.servicer._open_streams == 1  # the bed's own primary
    seen = fuzzer.outcomes
    # The fuzzer reached successes and the usual refusals of each RPC.
    for expected in ("Write OK", "Write UNKNOWN", "Write INVALID_ARGUMENT", "Write PERMISSION_DENIED",
                     "Read OK", "Read NOT_FOUND", "StreamChannel arbitration", "StreamChannel INVALID_ARGUMENT",
                     "StreamChannel NOT_FOUND"):
        assert seen[expected] > 0, (expected, sorted(seen.items()))
