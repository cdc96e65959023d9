"""The lossy-link table of p4src/dlcp.p4 (``DlcpEgress.link_loss``) on p4switch, both datapaths.

Probabilities 0 and 1 are exact STF tests (tests/stf/dlcp_link_loss_*.stf, on BMv2 too);
here a 10% link loses a share of packets inside the binomial's 99.9% interval, the counter
counts exactly the packets that did not come out, and the link of another port loses none.
"""

from __future__ import annotations

from typing import Any

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw
from scipy.stats import binom

from gradfabric.paths import P4SRC
from p4switch.frontend import load_program
from p4switch.tables import Exact, Lpm, TableEntry

PACKETS = 4000
PROBABILITY = 0.10
LOSSY_PORT, CLEAN_PORT = 3, 2
FRAME = bytes(Ether(src="00:00:0a:00:01:01", dst="00:00:00:00:01:01")
              / IP(src="10.0.1.1", dst="10.0.3.2", ttl=64) / UDP(sport=5000, dport=6000) / Raw(b"x" * 40))


def threshold(probability: float) -> int:
    """The table's parameter for a probability (p4src/README.md: probability x (2^32 - 1))."""
    return round(probability * 0xFFFFFFFF)


def _pipeline(kind: str, seed: int) -> Any:
    program = load_program(P4SRC / "dlcp.p4")
    if kind == "python":
        from p4switch.pipeline import Pipeline

        return Pipeline(program, seed=seed)
    from p4switch.native.pipeline import NativePipeline

    return NativePipeline(program, seed=seed)


def _route(pipe: Any, prefix: int, port: int) -> None:
    pipe.tables["DlcpIngress.ipv4_lpm"].insert(TableEntry(
        match=(Lpm(prefix, 24),), priority=0, action="DlcpIngress.set_nhop",
        args=(port, 0x000000000100 + port, 0x00000A000002 + (port << 8))))


@pytest.mark.parametrize("kind", ["python", "native"])
def test_a_ten_percent_link_loses_a_binomial_share(kind: str) -> None:
    pipe = _pipeline(kind, seed=29)
    _route(pipe, 0x0A000300, LOSSY_PORT)
    _route(pipe, 0x0A000200, CLEAN_PORT)
    pipe.tables["DlcpEgress.link_loss"].insert(TableEntry(
        match=(Exact(LOSSY_PORT),), priority=0, action="DlcpEgress.lose_on_link", args=(threshold(PROBABILITY),)))
    clean = Ether(FRAME)
    clean[IP].dst = "10.0.2.2"
    del clean[IP].chksum
    clean_frame = bytes(clean)
    out_lossy = out_clean = 0
    for _ in range(PACKETS):
        out_lossy += sum(1 for port, _ in pipe.process(FRAME, 1) if port == LOSSY_PORT)
        out_clean += sum(1 for port, _ in pipe.process(clean_frame, 1) if port == CLEAN_PORT)
    lost = PACKETS - out_lossy
    low, high = binom.interval(0.999, PACKETS, PROBABILITY)
    assert low <= lost <= high, f"{lost} of {PACKETS} lost at p = {PROBABILITY} ({kind}): outside [{low}, {high}]"
    assert out_clean == PACKETS
    assert pipe.counters["DlcpEgress.link_loss_drops"].read(LOSSY_PORT)[0] == lost
    assert pipe.counters["DlcpEgress.link_loss_drops"].read(CLEAN_PORT)[0] == 0


def test_the_threshold_covers_both_ends() -> None:
    assert threshold(0.0) == 0 and threshold(1.0) == 0xFFFFFFFF
    assert threshold(0.001) == 4294967  # 0.1%, by hand: 4,294,967,295 / 1000 = 4,294,967.3
