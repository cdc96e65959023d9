"""The control-plane differential end to end against BMv2: the same seeded P4Runtime writes
over gRPC to a running p4switch (native datapath) and to simple_switch_grpc, the same frames
into both through veth pairs; statuses, frames out and final entries compared
(tests/p4runtime_differential_bmv2.py; 10^5 writes: ``python -m
tests.p4runtime_differential_bmv2 [--program p4src/dlcp.p4]``), for the IPv4 router and for
the DLCP program. A planted difference, one DELETE not sent to BMv2, is caught."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import pytest
from p4.v1 import p4runtime_pb2

from p4switch.native.build import find_compiler
from tests.p4runtime_differential import DLCP_UDP_PORT, _csum
from tests.p4runtime_differential_bmv2 import ROUTER, send_in_turn, run, switches

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
          f"{report.frames_out} frames out, left out {dict(report.left_out)}")
    assert report.statuses[0] > 150 and report.frames_out > 40, "the run exercises entries and forwarding"
    assert not report.mismatches, "\n".join(report.mismatches)


def test_a_planted_difference_is_caught(tmp_path: Path) -> None:
    with switches(ROUTER, tmp_path) as (p4switch, bmv2):
        report = run(p4switch, bmv2, writes=300, seed=11, skip_delete=0)
    # the route BMv2 kept forwards frames p4switch drops, or a later write meets it
    assert any(m.startswith(("packets after", "write", "final")) for m in report.mismatches), report.mismatches


def _action(p4info: Any, name: str, **params: int) -> p4runtime_pb2.Action:
    info = next(a for a in p4info.actions if a.preamble.name == name)
    action = p4runtime_pb2.Action(action_id=info.preamble.id)
    for p in info.params:
        action.params.add(param_id=p.id, value=params[p.name].to_bytes((p.bitwidth + 7) // 8, "big"))
    return action


def _default(p4info: Any, table: str, action: p4runtime_pb2.Action) -> p4runtime_pb2.Update:
    info = next(t for t in p4info.tables if t.preamble.name == table)
    entry = p4runtime_pb2.TableEntry(table_id=info.preamble.id, is_default_action=True)
    entry.action.action.CopyFrom(action)
    return p4runtime_pb2.Update(type=p4runtime_pb2.Update.MODIFY, entity=p4runtime_pb2.Entity(table_entry=entry))


def _dlcp_frame(ident: int, tos: int) -> bytes:
    """A DLCP data frame to 10.0.2.2 (job 1, not drop-eligible) whose IPv4 identification is `ident`."""
    dlcp = struct.pack("!BBHHHIIIHBBI", 0x10, 0, 1, 0, 1, 0, 0, 1000, 4, 1, 0, ident)
    l4 = struct.pack("!HHHH", 1000, DLCP_UDP_PORT, 8 + len(dlcp), 0) + dlcp
    ip = bytearray(struct.pack("!BBHHHBBHII", 0x45, tos, 20 + len(l4), ident, 0, 64, 17, 0, 0x0A000101, 0x0A000202))
    ip[10:12] = struct.pack("!H", _csum(bytes(ip)))
    return bytes.fromhex("000000000101") + bytes.fromhex("00000a000101") + b"\x08\x00" + bytes(ip) + l4


def test_frames_in_turn_meet_round_robin_and_depth_thresholds_as_sent(tmp_path: Path) -> None:
    """What makes dlcp.p4 comparable: frames of a batch through one port, into BMv2 one at a time.
    Round-robin ECMP over a group of 2 whose member 1 has no entry forwards the 1st, 3rd, ...
    frame a switch takes, so both must take them in the order sent; RED and ECN thresholds of 1
    must find every queue empty (depth 0 < 1: nothing dropped, nothing marked)."""
    with switches(DLCP, tmp_path) as (p4switch, bmv2):
        info = p4switch.client.p4info
        member = next(t for t in info.tables if t.preamble.name == "DlcpIngress.ecmp_member")
        entry = p4runtime_pb2.TableEntry(table_id=member.preamble.id)
        for field, value in zip(member.match_fields, (1, 0)):
            entry.match.add(field_id=field.id).exact.value = value.to_bytes(2, "big")
        entry.action.action.CopyFrom(_action(info, "DlcpIngress.set_nhop", port=2, smac=2, dmac=3))
        updates = [_default(info, "DlcpIngress.ipv4_lpm",
                            _action(info, "DlcpIngress.set_ecmp_group", group_id=1, group_size=2)),
                   _default(info, "DlcpIngress.spray_mode", _action(info, "DlcpIngress.spray_round_robin")),
                   p4runtime_pb2.Update(type=p4runtime_pb2.Update.INSERT,
                                        entity=p4runtime_pb2.Entity(table_entry=entry))]
        for update in updates:
            assert (p4switch.write(update)[0], bmv2.write(update)[0]) == (0, 0)
        for side in (p4switch, bmv2):
            side.wires.drain()
        for start in range(0, 24, 8):  # rr_position counts every frame: ids 0, 2, 4, ... get member 0
            outs = send_in_turn(p4switch, bmv2, [(_dlcp_frame(i, 0), 3) for i in range(start, start + 8)], 0.5)
            for name, out in zip(("p4switch", "bmv2"), outs):
                got = sorted(struct.unpack("!H", frame[18:20])[0] for _, frame in out)
                assert got == list(range(start, start + 8, 2)), f"{name} forwarded {got}"
        updates = [_default(info, "DlcpIngress.ipv4_lpm", _action(info, "DlcpIngress.set_nhop", port=2, smac=2, dmac=3)),
                   _default(info, "DlcpIngress.profile", _action(info, "DlcpIngress.profile_commodity")),
                   _default(info, "DlcpIngress.queue_red", _action(info, "DlcpIngress.red_drop_above", queue_threshold=1)),
                   _default(info, "DlcpEgress.queue_ecn", _action(info, "DlcpEgress.mark_above", queue_threshold=1))]
        for update in updates:
            assert (p4switch.write(update)[0], bmv2.write(update)[0]) == (0, 0)
        for start in range(0, 24, 8):  # Not-ECT and ECT(1) in turn
            outs = send_in_turn(p4switch, bmv2, [(_dlcp_frame(i, i % 2), 3) for i in range(start, start + 8)], 0.5)
            for name, out in zip(("p4switch", "bmv2"), outs):
                assert sorted((frame[18:20], frame[15] & 3) for _, frame in out) == \
                    [(i.to_bytes(2, "big"), i % 2) for i in range(start, start + 8)], f"{name}: dropped or marked"
