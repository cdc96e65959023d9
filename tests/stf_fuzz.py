"""Differential fuzzing of p4switch against BMv2: generated packets become one STF file.

Seeded packets (the STF file's own packets as they are, truncated, with random bytes written
into their headers, and frames of random bytes) go through the embedded pipeline with the STF
file's table entries; every output becomes an exact ``expect`` (``$``) on its port. The file is
then run once on BMv2 through p4c's STF driver, which must see the same bytes on the same ports
in the same order. Input ports are drawn from 1..8, so every port either target could send to
is named and checked (a port named in the file must carry exactly the expected packets).
"""

from __future__ import annotations

import random
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from p4switch.frontend import load_program
from p4switch.pipeline import Pipeline
from p4switch.runtime import PipelineAssertion
from p4switch.stf import run_stf

PORTS = range(1, 9)
CONTROL = ("add ", "setdefault ", "mirroring_add ", "mc_mgrp_create ", "mc_node_create ", "mc_node_associate ")
#: The outputs' key for packets that failed (a false assert/assume): their error messages.
FAILED = -1
#: The outputs' key for the log_msg lines of all packets, in order.
LOGGED = -2


@dataclass
class FuzzCase:
    """One generated STF file and what the embedded target did with it."""

    text: str
    packets: int
    outputs: dict[int, list[bytes]]
    inputs: list[tuple[bytes, int]]  # (frame, ingress port), in order

    @property
    def forwarded(self) -> int:
        return sum(len(frames) for port, frames in self.outputs.items() if port >= 0)

    @property
    def failed(self) -> int:
        return len(self.outputs.get(FAILED, []))

    @property
    def logged(self) -> int:
        return len(self.outputs.get(LOGGED, []))


def control_lines(stf_text: str) -> list[str]:
    return [line for line in stf_text.splitlines() if line.startswith(CONTROL)]


def seed_packets(stf_text: str) -> list[bytes]:
    return [bytes.fromhex("".join(line.split()[2:]))
            for line in stf_text.splitlines() if line.startswith("packet ")]


def mutate(rng: random.Random, seeds: list[bytes]) -> bytes:
    """One frame: a seed as is, truncated, with random header bytes, or random bytes."""
    kind = rng.randrange(4)
    base = bytearray(rng.choice(seeds))
    if kind == 1:
        base = base[:rng.randrange(1, len(base) + 1)]
    elif kind == 2:
        for _ in range(rng.randrange(1, 5)):
            base[rng.randrange(min(len(base), 64))] = rng.randrange(256)
    elif kind == 3:
        base = bytearray(rng.randbytes(rng.randrange(1, 90)))
    return bytes(base)


def generate(program: Path, stf_text: str, count: int, seed: int) -> FuzzCase:
    """`count` packets through the embedded (Python) pipeline after the STF file's entries."""
    rng = random.Random(seed)
    controls = control_lines(stf_text)
    pipe = Pipeline(load_program(program))
    run_stf(pipe, "\n".join(controls) + "\n")
    seeds = seed_packets(stf_text)
    lines = [f"# generated: {count} packets, seed {seed}", *controls]
    outputs: dict[int, list[bytes]] = {}
    pipe.log = lambda line: outputs.setdefault(LOGGED, []).append(line.encode())
    inputs: list[tuple[bytes, int]] = []
    for i in range(count):
        frame, port = mutate(rng, seeds), rng.choice(PORTS)
        inputs.append((frame, port))
        lines.append(f"packet {port} {frame.hex().upper()}")
        for out_port, data in process(pipe, frame, port, i + 1):
            outputs.setdefault(out_port, []).append(data)
            if out_port == FAILED:
                lines.append(f"# the packet fails: {data.decode()}")
            else:
                lines.append(f"expect {out_port} {data.hex().upper()} $")
    return FuzzCase("\n".join(lines) + "\n", count, outputs, inputs)


def replay_native(program: Path, stf_text: str, case: FuzzCase) -> dict[int, list[bytes]]:
    """The case's packets, in order, through the native datapath after the same entries."""
    from p4switch.native.pipeline import NativePipeline

    pipe = NativePipeline(load_program(program))
    run_stf(pipe, "\n".join(control_lines(stf_text)) + "\n")
    outputs: dict[int, list[bytes]] = {}
    pipe.log = lambda line: outputs.setdefault(LOGGED, []).append(line.encode())
    for i, (frame, port) in enumerate(case.inputs):
        for out_port, data in process(pipe, frame, port, i + 1):
            outputs.setdefault(out_port, []).append(data)
    return outputs


def process(pipe: Any, frame: bytes, port: int, now_us: int) -> list[tuple[int, bytes]]:
    """The frames a packet sends, or (FAILED, its error message) when an assertion fails it."""
    try:
        return pipe.process(frame, port, now_us)
    except PipelineAssertion as failed:
        return [(FAILED, str(failed).encode())]


def output_differences(python: dict[int, list[bytes]], native: dict[int, list[bytes]],
                       limit: int = 5) -> list[str]:
    """Readable differences between the Python pipeline's outputs and the native datapath's."""
    found: list[str] = []
    for port in sorted(set(python) | set(native)):
        want, got = python.get(port, []), native.get(port, [])
        if len(want) != len(got):
            found.append(f"port {port}: Python sent {len(want)} packets, native {len(got)}")
        for i, (a, b) in enumerate(zip(want, got)):
            if a != b:
                found.append(f"port {port} packet {i}:\n  python {a.hex()}\n  native {b.hex()}")
            if len(found) >= limit:
                return found
    return found


def read_pcap(path: Path) -> list[bytes]:
    """The frames of a classic pcap file (as BMv2 writes them)."""
    data = path.read_bytes()
    if len(data) < 24:
        return []
    endian = "<" if data[:4] == b"\xd4\xc3\xb2\xa1" else ">"
    frames, offset = [], 24
    while offset + 16 <= len(data):
        incl = struct.unpack(endian + "IIII", data[offset:offset + 16])[2]
        frames.append(data[offset + 16:offset + 16 + incl])
        offset += 16 + incl
    return frames


def ipv4_ecn_blind(frame: bytes) -> bytes:
    """`frame` with an IPv4 packet's ECN bits and header checksum zeroed (what a queue-depth
    dependent ECN mark changes), other frames as they are."""
    if len(frame) < 26 or frame[12:14] != b"\x08\x00":
        return frame
    out = bytearray(frame)
    out[15] &= 0xFC
    out[24:26] = b"\x00\x00"
    return bytes(out)


def ecn_blind_stf(text: str) -> str:
    """STF text whose expected IPv4 frames do not check ECN bits and header checksum (``*``)."""
    lines = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[0] == "expect" and len(parts[2]) >= 52 and parts[2][24:28] == "0800":
            data = parts[2]
            data = data[:31] + "*" + data[32:48] + "****" + data[52:]
            line = " ".join([parts[0], parts[1], data, *parts[3:]])
        lines.append(line)
    return "\n".join(lines) + "\n"


def differences(expected: dict[int, list[bytes]], pcaps: dict[int, Path], limit: int = 5,
                blind: Any = None) -> list[str]:
    """Readable differences between the embedded outputs and BMv2's output pcaps (`blind`: a
    function applied to both sides first, e.g. :func:`ipv4_ecn_blind`)."""
    found: list[str] = []
    for port in sorted(p for p in set(expected) | set(pcaps) if p >= 0):  # BMv2 has no FAILED, LOGGED
        want = expected.get(port, [])
        got = read_pcap(pcaps[port]) if port in pcaps else []
        if blind is not None:
            want, got = [blind(f) for f in want], [blind(f) for f in got]
        if len(want) != len(got):
            found.append(f"port {port}: p4switch sent {len(want)} packets, BMv2 {len(got)}")
        for i, (a, b) in enumerate(zip(want, got)):
            if a != b:
                found.append(f"port {port} packet {i}:\n  p4switch {a.hex()}\n  bmv2     {b.hex()}")
            if len(found) >= limit:
                return found
    return found
