"""Random and truncated packets through every test program: no crash, v1model outcomes.

The IPv4 router is checked against an independent model written with `struct`: parser
errors leave the header invalid (dropped), a bad checksum or TTL <= 1 drops, otherwise the
frame is forwarded with TTL - 1, a recomputed checksum and rewritten MACs.
"""

from __future__ import annotations

import random
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from p4switch.frontend import load_program
from p4switch.pipeline import Pipeline
from p4switch.runtime import PipelineAssertion
from p4switch.stf import run_stf
from p4switch.tables import Lpm, TableEntry

PROGRAMS = Path(__file__).parent / "p4programs"
NEXT_HOP_MAC = 0x0000000A0B0C
OUT_PORT = 2


def internet_checksum(header: bytes) -> int:
    total = sum(struct.unpack(f">{len(header) // 2}H", header))
    while total > 0xFFFF:
        total = (total & 0xFFFF) + (total >> 16)
    return (~total) & 0xFFFF


def router_model(frame: bytes) -> list[tuple[int, bytes]]:
    if len(frame) < 34 or frame[12:14] != b"\x08\x00":
        return []
    ip = frame[14:34]
    ihl, ttl = ip[0] & 0x0F, ip[8]
    if ihl == 5 and internet_checksum(ip[:10] + b"\x00\x00" + ip[12:]) != struct.unpack(">H", ip[10:12])[0]:
        return []
    if ttl <= 1 or ip[16] != 10:
        return []
    new_ip = bytearray(ip)
    new_ip[8] = ttl - 1
    new_ip[10:12] = b"\x00\x00"
    new_ip[10:12] = struct.pack(">H", internet_checksum(bytes(new_ip)))
    eth = NEXT_HOP_MAC.to_bytes(6, "big") + frame[0:6] + frame[12:14]
    return [(OUT_PORT, eth + bytes(new_ip) + frame[34:])]


@pytest.fixture(scope="module")
def router():
    pipe = Pipeline(load_program(PROGRAMS / "ipv4_router.p4"))
    pipe.tables["MyIngress.ipv4_lpm"].insert(
        TableEntry((Lpm(0x0A000000, 8),), 0, "MyIngress.ipv4_forward", (NEXT_HOP_MAC, OUT_PORT)))
    return pipe


def ipv4_frame(rng: random.Random, good_checksum: bool) -> bytes:
    ip = bytearray(rng.randbytes(20))
    ip[0] = 0x45 if rng.random() < 0.8 else rng.randrange(256)
    ip[16] = 10 if rng.random() < 0.7 else rng.randrange(256)
    if good_checksum:
        ip[10:12] = b"\x00\x00"
        ip[10:12] = struct.pack(">H", internet_checksum(bytes(ip)))
    return rng.randbytes(12) + b"\x08\x00" + bytes(ip) + rng.randbytes(rng.randrange(0, 40))


frames = st.one_of(
    st.binary(max_size=80),
    st.builds(lambda seed, good, cut: ipv4_frame(random.Random(seed), good)[:cut],
              st.integers(0, 2**32), st.booleans(), st.integers(0, 100)),
)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(frame=frames, port=st.integers(0, 510))
def test_router_matches_model_on_random_and_truncated_frames(router, frame, port):
    assert router.process(frame, port) == router_model(frame)


def test_router_many_seeded_frames(router):
    rng = random.Random(1234)
    forwarded = 0
    for i in range(3000):
        frame = ipv4_frame(rng, good_checksum=i % 3 != 0)
        frame = frame[:rng.randrange(len(frame) + 1)] if i % 4 == 0 else frame
        got = router.process(frame, 1)
        assert got == router_model(frame)
        forwarded += bool(got)
    assert 500 < forwarded < 2500  # both outcomes were exercised


REPO = Path(__file__).resolve().parents[1]
PROGRAM_STFS = {
    "ecmp": (PROGRAMS / "ecmp.p4", PROGRAMS / "ecmp.stf"),
    "acl": (PROGRAMS / "acl.p4", PROGRAMS / "acl.stf"),
    "ipv4_router": (PROGRAMS / "ipv4_router.p4", PROGRAMS / "ipv4_router.stf"),
    "ipv4_options": (PROGRAMS / "ipv4_options.p4", PROGRAMS / "ipv4_options.stf"),
    "dlcp": (REPO / "p4src" / "dlcp.p4", REPO / "tests" / "stf" / "dlcp_spray.stf"),
}


@pytest.mark.parametrize("name", sorted(PROGRAM_STFS))
def test_programs_survive_random_and_truncated_frames(name):
    source, stf = PROGRAM_STFS[name]
    pipe = Pipeline(load_program(source))
    run_stf(pipe, stf.read_text())  # install the STF's entries
    rng = random.Random(name)
    seeds = [bytes.fromhex(line.split(None, 2)[2].replace(" ", ""))
             for line in stf.read_text().splitlines()
             if line.startswith("packet ")]
    for i in range(1500):
        base = rng.choice(seeds)
        frame = bytearray(base[:rng.randrange(len(base) + 1)] if i % 2 else base)
        for _ in range(rng.randrange(3)):
            if frame:
                frame[rng.randrange(len(frame))] = rng.randrange(256)
        out = pipe.process(bytes(frame), rng.randrange(1, 8))
        for port, data in out:
            assert 0 <= port < 511 and data
            if name != "dlcp":
                assert len(data) == len(frame)  # these programs only rewrite headers in place


def test_features_program_survives_random_frames():
    pipe = Pipeline(load_program(PROGRAMS / "features.p4"))
    rng = random.Random(7)
    for i in range(1500):
        etype = rng.choice([b"\x90\x00", b"\x88\x47", b"\x08\x00", b"\x86\xdd", b"\x91\x00"])
        frame = rng.randbytes(12) + etype + rng.randbytes(rng.randrange(0, 60))
        try:
            out = pipe.process(frame, 1)
        except PipelineAssertion:
            assert frame[12:14] == b"\x90\x00" and frame[14] == 23 and frame[15] == 0xFF
            continue
        assert all(0 <= port < 511 for port, _ in out)
