"""The control-plane differential end to end against BMv2: the same seeded P4Runtime writes
over gRPC to a running p4switch (native datapath) and to simple_switch_grpc, the same frames
into both through veth pairs; statuses, frames out and final entries compared
(tests/p4runtime_differential_bmv2.py; 10^5 writes: ``python -m
tests.p4runtime_differential_bmv2 [--program p4src/dlcp.p4]``), for the IPv4 router and for
the DLCP program. A planted difference, one DELETE not sent to BMv2, is caught."""

from __future__ import annotations

from pathlib import Path

import pytest

from p4switch.native.build import find_compiler
from tests.p4runtime_differential_bmv2 import ROUTER, run, switches

DLCP = Path(__file__).parent.parent / "p4src" / "dlcp.p4"

pytestmark = [pytest.mark.netns, pytest.mark.bmv2,
              pytest.mark.skipif(find_compiler() is None, reason="no C compiler on this machine")]


def test_p4switch_and_bmv2_agree_on_every_write_and_frame(tmp_path: Path) -> None:
    with switches(ROUTER, tmp_path) as (p4switch, bmv2):
        report = run(p4switch, bmv2, writes=600, seed=11)
    print(f"{report.writes} writes {dict(report.statuses)}, {report.packets} packets, "
          f"{report.frames_out} frames out")
    assert report.statuses[0] > 100 and report.frames_out > 20, "the run exercises entries and forwarding"
    assert not report.mismatches, "\n".join(report.mismatches)


def test_p4switch_and_bmv2_agree_on_the_dlcp_program(tmp_path: Path) -> None:
    """dlcp.p4: every table kind (exact, LPM, ternary, range; ECMP groups and members, early-drop
    and ECN thresholds on queue depths, which the frames going into BMv2 one at a time keep
    at 0 on both switches)."""
    with switches(DLCP, tmp_path) as (p4switch, bmv2):
        report = run(p4switch, bmv2, writes=400, seed=2)
    print(f"{report.writes} writes {dict(report.statuses)}, {report.packets} packets, "
          f"{report.frames_out} frames out")
    assert report.statuses[0] > 150 and report.frames_out > 40, "the run exercises entries and forwarding"
    assert not report.mismatches, "\n".join(report.mismatches)


def test_a_planted_difference_is_caught(tmp_path: Path) -> None:
    with switches(ROUTER, tmp_path) as (p4switch, bmv2):
        report = run(p4switch, bmv2, writes=300, seed=11, skip_delete=0)
    # the route BMv2 kept forwards frames p4switch drops, or a later write meets it
    assert any(m.startswith(("packets after", "write", "final")) for m in report.mismatches), report.mismatches
