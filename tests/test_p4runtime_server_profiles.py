"""P4Runtime server: action profile members and groups, entries naming them, and parser value
sets, over gRPC in-process against tests/p4programs/ecmp_selector.p4, on the Python pipeline
and on the native datapath (members, groups and value sets in the C state)."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from google.rpc import code_pb2
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

from p4switch.device_config import device_config_bytes, program_from_device_config
from p4switch.frontend import load_program
from p4switch.native.build import find_compiler
from p4switch.native.pipeline import NativePipeline
from p4switch.p4info import build_p4info
from p4switch.server import P4RuntimeServer, wire
from tests.test_p4runtime_server import DEVICE_ID, RecordingTarget, Stream, update_errors

PROGRAM = Path(__file__).parent / "p4programs" / "ecmp_selector.p4"
U = p4runtime_pb2.Update
ETH = struct.Struct(">6s6sH")
IPV4 = struct.Struct(">BBHHHBBHII")
DMACS = {2: bytes.fromhex("0a0000000002"), 3: bytes.fromhex("0a0000000003"), 4: bytes.fromhex("0a0000000004")}


def crc16_arc(data: bytes) -> int:
    """CRC-16/ARC bit by bit, BMv2's crc16 (independent of p4switch.hashes)."""
    crc = 0
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0xA001 if crc & 1 else crc >> 1
    return crc


def bucket(src: int, dst: int, proto: int, size: int) -> int:
    """The group slot the selector picks: crc16 of the selector keys, 14 bits, mod size."""
    return (crc16_arc(struct.pack(">IIB", src, dst, proto)) & 0x3FFF) % size


def frame(src: int, dst: int, proto: int = 17, ethertype: int = 0x0800) -> bytes:
    eth = ETH.pack(b"\xff" * 6, bytes.fromhex("020000000001"), ethertype)
    return eth + IPV4.pack(0x45, 0, 20, 0, 0, 64, proto, 0, src, dst)


@dataclass
class Switch:
    stub: p4runtime_pb2_grpc.P4RuntimeStub
    target: RecordingTarget
    p4info: p4info_pb2.P4Info

    def id(self, kind: str, name: str) -> int:
        return next(x.preamble.id for x in getattr(self.p4info, kind) if x.preamble.name == name)

    def write(self, *updates: p4runtime_pb2.Update) -> None:
        request = p4runtime_pb2.WriteRequest(device_id=DEVICE_ID, updates=list(updates))
        request.election_id.low = 1
        self.stub.Write(request)

    def codes(self, *updates: p4runtime_pb2.Update) -> list[int]:
        with pytest.raises(grpc.RpcError) as info:
            self.write(*updates)
        return [e.canonical_code for e in update_errors(info.value)]

    def read(self, **entity: object) -> list[p4runtime_pb2.Entity]:
        request = p4runtime_pb2.ReadRequest(device_id=DEVICE_ID, entities=[p4runtime_pb2.Entity(**entity)])
        return [e for response in self.stub.Read(request) for e in response.entities]

    def send(self, data: bytes, port: int = 1) -> list[tuple[int, bytes]]:
        with self.target.lock:
            return self.target.pipeline.process(data, port)

    # -- builders ---------------------------------------------------------------------------

    @property
    def profile_id(self) -> int:
        return self.id("action_profiles", "Ing.ecmp_selector")

    def member(self, member_id: int, port: int) -> p4runtime_pb2.ActionProfileMember:
        msg = p4runtime_pb2.ActionProfileMember(action_profile_id=self.profile_id, member_id=member_id)
        msg.action.action_id = self.id("actions", "Ing.set_nhop")
        msg.action.params.add(param_id=1, value=DMACS.get(port, b"\x0a" + bytes(5)))
        msg.action.params.add(param_id=2, value=bytes([port]))  # canonical: the shortest form
        return msg

    def group(self, group_id: int, members: dict[int, int], max_size: int = 0) -> p4runtime_pb2.ActionProfileGroup:
        msg = p4runtime_pb2.ActionProfileGroup(action_profile_id=self.profile_id, group_id=group_id,
                                               max_size=max_size)
        for member_id, weight in members.items():
            msg.members.add(member_id=member_id, weight=weight)
        return msg

    def entry(self, dst: int, member_id: int = 0, group_id: int = 0) -> p4runtime_pb2.TableEntry:
        msg = p4runtime_pb2.TableEntry(table_id=self.id("tables", "Ing.ecmp"))
        msg.match.add(field_id=1).exact.value = dst.to_bytes(4, "big")
        if member_id:
            msg.action.action_profile_member_id = member_id
        if group_id:
            msg.action.action_profile_group_id = group_id
        return msg

    def value_set(self, name: str, *members: p4runtime_pb2.FieldMatch) -> p4runtime_pb2.ValueSetEntry:
        msg = p4runtime_pb2.ValueSetEntry(value_set_id=self.id("value_sets", name))
        for fm in members:
            msg.members.add().match.append(fm)
        return msg


def update(kind: int, **entity: object) -> p4runtime_pb2.Update:
    return p4runtime_pb2.Update(type=kind, entity=p4runtime_pb2.Entity(**entity))


def exact(value: bytes) -> p4runtime_pb2.FieldMatch:
    fm = p4runtime_pb2.FieldMatch(field_id=1)
    fm.exact.value = value
    return fm


def ternary(value: int, mask: int) -> p4runtime_pb2.FieldMatch:
    fm = p4runtime_pb2.FieldMatch(field_id=1)
    fm.ternary.value, fm.ternary.mask = bytes([value]), bytes([mask])
    return fm


@pytest.fixture(scope="module")
def compiled() -> tuple[p4info_pb2.P4Info, bytes]:
    program = load_program(PROGRAM)
    return build_p4info(program), device_config_bytes(program)


def native_pipeline(device_config: bytes, seed: int = 0) -> NativePipeline:
    return NativePipeline(program_from_device_config(device_config), seed)


@contextmanager
def running(p4info: p4info_pb2.P4Info, device_config: bytes, datapath: str = "python") -> Iterator[Switch]:
    target = RecordingTarget()
    if datapath == "native":
        server = P4RuntimeServer(target, DEVICE_ID, "127.0.0.1:0", pipeline_factory=native_pipeline)
    else:
        server = P4RuntimeServer(target, DEVICE_ID, "127.0.0.1:0")
    server.start()
    channel = grpc.insecure_channel(server.address)
    stub = p4runtime_pb2_grpc.P4RuntimeStub(channel)
    stream = Stream(stub)
    try:
        assert stream.arbitrate(1).arbitration.status.code == code_pb2.OK
        request = p4runtime_pb2.SetForwardingPipelineConfigRequest(
            device_id=DEVICE_ID, action=p4runtime_pb2.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT)
        request.election_id.low = 1
        request.config.p4info.CopyFrom(p4info)
        request.config.p4_device_config = device_config
        stub.SetForwardingPipelineConfig(request)
        yield Switch(stub, target, p4info)
    finally:
        stream.close()
        channel.close()
        server.stop(0.5)


@pytest.fixture(params=["python", "native"])
def switch(compiled: tuple[p4info_pb2.P4Info, bytes], request: pytest.FixtureRequest) -> Iterator[Switch]:
    if request.param == "native" and find_compiler() is None:
        pytest.skip("no C compiler on this machine")
    with running(*compiled, datapath=request.param) as made:
        if request.param == "native":
            assert isinstance(made.target.pipeline, NativePipeline)
        yield made


DST_GROUP, DST_MEMBER = 0x0A000101, 0x0A000202


def test_group_members_carry_flows_by_hash(switch: Switch) -> None:
    switch.write(*(update(U.INSERT, action_profile_member=switch.member(10 + i, port)) for i, port in enumerate((2, 3, 4))))
    switch.write(update(U.INSERT, action_profile_group=switch.group(1, {10: 1, 11: 1, 12: 1})),
                 update(U.INSERT, table_entry=switch.entry(DST_GROUP, group_id=1)),
                 update(U.INSERT, table_entry=switch.entry(DST_MEMBER, member_id=11)))
    seen = set()
    for flow in range(40):
        src = 0x0B000001 + flow * 13
        expected = (2, 3, 4)[bucket(src, DST_GROUP, 17, 3)]
        for _ in range(2):  # the same flow takes the same member every time
            [(port, out)] = switch.send(frame(src, DST_GROUP))
            assert port == expected
            assert out[:6] == DMACS[expected] and out[14 + 8] == 63  # dmac rewritten, ttl decremented
        seen.add(port)
    assert seen == {2, 3, 4}
    assert {switch.send(frame(0x0B000001 + f, DST_MEMBER))[0][0] for f in range(10)} == {3}
    assert switch.send(frame(1, 0x0A0000FF)) == []  # miss: default drop

    # Weights: member 10 takes two of three buckets.
    switch.write(update(U.MODIFY, action_profile_group=switch.group(1, {10: 2, 12: 1})))
    for flow in range(30):
        src = 0x0C000001 + flow * 7
        assert switch.send(frame(src, DST_GROUP))[0][0] == (2, 2, 4)[bucket(src, DST_GROUP, 17, 3)]
    # A member's new action applies to every group and entry using it.
    switch.write(update(U.MODIFY, action_profile_member=switch.member(11, 5)))
    assert switch.send(frame(7, DST_MEMBER))[0][0] == 5


def test_read_back_with_wildcards(switch: Switch) -> None:
    switch.write(*(update(U.INSERT, action_profile_member=switch.member(m, m)) for m in (2, 3, 4)))
    switch.write(update(U.INSERT, action_profile_group=switch.group(7, {2: 1, 4: 3}, max_size=8)),
                 update(U.INSERT, action_profile_group=switch.group(8, {})),
                 update(U.INSERT, table_entry=switch.entry(DST_GROUP, group_id=7)),
                 update(U.INSERT, table_entry=switch.entry(DST_MEMBER, member_id=3)))
    everything = p4runtime_pb2.ActionProfileMember()
    members = switch.read(action_profile_member=everything)
    assert [m.action_profile_member.member_id for m in members] == [2, 3, 4]
    assert members[1].action_profile_member == switch.member(3, 3)
    one = switch.read(action_profile_member=p4runtime_pb2.ActionProfileMember(
        action_profile_id=switch.profile_id, member_id=4))
    assert [m.action_profile_member for m in one] == [switch.member(4, 4)]
    groups = switch.read(action_profile_group=p4runtime_pb2.ActionProfileGroup(action_profile_id=switch.profile_id))
    assert [g.action_profile_group for g in groups] == [switch.group(7, {2: 1, 4: 3}, max_size=8), switch.group(8, {})]
    only = switch.read(action_profile_group=p4runtime_pb2.ActionProfileGroup(group_id=8))
    assert [g.action_profile_group.group_id for g in only] == [8]
    entries = switch.read(table_entry=p4runtime_pb2.TableEntry(table_id=switch.id("tables", "Ing.ecmp")))
    assert sorted((e.table_entry.action.WhichOneof("type"), e.table_entry.match[0].exact.value) for e in entries) == [
        ("action_profile_group_id", DST_GROUP.to_bytes(4, "big")),
        ("action_profile_member_id", DST_MEMBER.to_bytes(4, "big"))]
    assert {e.table_entry.SerializeToString() for e in entries} == {
        switch.entry(DST_GROUP, group_id=7).SerializeToString(),
        switch.entry(DST_MEMBER, member_id=3).SerializeToString()}
    assert switch.read(action_profile_member=p4runtime_pb2.ActionProfileMember(member_id=99)) == []


def test_entries_naming_members_leave_the_hand_decoded_path(switch: Switch) -> None:
    """Plain entries keep the fast Write path; entries naming a member or group use protobuf."""
    plain = switch.entry(DST_GROUP)
    plain.action.action.CopyFrom(switch.member(1, 2).action)
    assert wire.table_update(update(U.INSERT, table_entry=plain).SerializeToString()) is not None
    for indirect in (switch.entry(DST_GROUP, member_id=1), switch.entry(DST_GROUP, group_id=1)):
        assert wire.table_update(update(U.INSERT, table_entry=indirect).SerializeToString()) is None


def test_status_codes_of_bad_profile_writes(switch: Switch) -> None:
    switch.write(*(update(U.INSERT, action_profile_member=switch.member(m, 2)) for m in (1, 2, 3, 4, 5, 6)))
    switch.write(update(U.INSERT, action_profile_group=switch.group(1, {1: 1, 2: 1})),
                 update(U.INSERT, table_entry=switch.entry(DST_GROUP, group_id=1)),
                 update(U.INSERT, table_entry=switch.entry(DST_MEMBER, member_id=3)))
    one_shot = switch.entry(0x0A000303)
    one_shot.action.action_profile_action_set.action_profile_actions.add().action.CopyFrom(switch.member(9, 2).action)
    direct = switch.entry(0x0A000404)
    direct.action.action.CopyFrom(switch.member(9, 2).action)
    bad_action = switch.member(20, 2)
    bad_action.action.action_id = 12345
    watched = switch.group(4, {4: 1})
    watched.members[0].watch_port = b"\x02"
    assert switch.codes(
        update(U.DELETE, action_profile_member=switch.member(1, 2)),          # in group 1
        update(U.DELETE, action_profile_member=switch.member(3, 2)),          # used by an entry
        update(U.DELETE, action_profile_group=switch.group(1, {})),           # used by an entry
        update(U.INSERT, action_profile_group=switch.group(2, {1: 1, 9: 1})),  # no member 9
        update(U.INSERT, action_profile_group=switch.group(3, {m: 3 for m in range(1, 7)})),  # 18 > 16
        update(U.INSERT, action_profile_group=switch.group(3, {1: 1}, max_size=17)),
        update(U.INSERT, action_profile_group=switch.group(3, {1: 1, 2: 1, 4: 1}, max_size=2)),
        update(U.INSERT, action_profile_group=switch.group(3, {1: 0})),       # weight 0
        update(U.INSERT, action_profile_group=switch.group(1, {1: 1})),       # exists
        update(U.INSERT, action_profile_member=switch.member(1, 4)),          # exists
        update(U.MODIFY, action_profile_member=switch.member(50, 4)),         # missing
        update(U.INSERT, action_profile_member=bad_action),
        update(U.INSERT, action_profile_member=p4runtime_pb2.ActionProfileMember(action_profile_id=77, member_id=1)),
        update(U.INSERT, table_entry=switch.entry(0x0A000505, group_id=9)),   # no group 9
        update(U.INSERT, table_entry=switch.entry(0x0A000606, member_id=9)),  # no member 9
        update(U.INSERT, table_entry=one_shot),
        update(U.INSERT, table_entry=direct),                                 # an action on a selector table
        update(U.INSERT, action_profile_group=watched),
    ) == [code_pb2.FAILED_PRECONDITION] * 3 + [code_pb2.NOT_FOUND] + [code_pb2.RESOURCE_EXHAUSTED] * 3 + [
        code_pb2.INVALID_ARGUMENT, code_pb2.ALREADY_EXISTS, code_pb2.ALREADY_EXISTS, code_pb2.NOT_FOUND,
        code_pb2.NOT_FOUND, code_pb2.NOT_FOUND, code_pb2.NOT_FOUND, code_pb2.NOT_FOUND,
        code_pb2.UNIMPLEMENTED, code_pb2.INVALID_ARGUMENT, code_pb2.UNIMPLEMENTED]
    # Nothing refused was applied; taken apart in order, everything goes.
    pipeline_profile = switch.target.pipeline.action_profiles["Ing.ecmp_selector"]
    assert sorted(pipeline_profile.groups) == [1] and sorted(pipeline_profile.members) == [1, 2, 3, 4, 5, 6]
    switch.write(update(U.DELETE, table_entry=switch.entry(DST_GROUP)),
                 update(U.DELETE, table_entry=switch.entry(DST_MEMBER)),
                 update(U.DELETE, action_profile_group=switch.group(1, {})),
                 *(update(U.DELETE, action_profile_member=switch.member(m, 2)) for m in (1, 2, 3, 4, 5, 6)))
    assert switch.read(action_profile_member=p4runtime_pb2.ActionProfileMember()) == []
    assert switch.read(action_profile_group=p4runtime_pb2.ActionProfileGroup()) == []


def test_max_group_size_from_the_p4info(compiled: tuple[p4info_pb2.P4Info, bytes]) -> None:
    p4info = p4info_pb2.P4Info()
    p4info.CopyFrom(compiled[0])
    p4info.action_profiles[0].max_group_size = 2
    with running(p4info, compiled[1]) as switch:
        switch.write(*(update(U.INSERT, action_profile_member=switch.member(m, 2)) for m in (1, 2, 3)))
        assert switch.codes(update(U.INSERT, action_profile_group=switch.group(1, {1: 1, 2: 1, 3: 1})),
                            update(U.INSERT, action_profile_group=switch.group(2, {1: 1, 2: 1}))) == [
            code_pb2.RESOURCE_EXHAUSTED, code_pb2.OK]


def test_value_sets_steer_the_parser(switch: Switch) -> None:
    switch.write(update(U.INSERT, action_profile_member=switch.member(1, 2)),
                 update(U.INSERT, table_entry=switch.entry(DST_MEMBER, member_id=1)))
    tunnel = frame(5, DST_MEMBER, ethertype=0x88B5)
    assert switch.send(tunnel) == []  # not parsed as IPv4: dropped
    types = switch.value_set("Prs.ipv4_ethertypes", exact(b"\x88\xb5"), exact(b"\x86\xdd"))
    switch.write(update(U.MODIFY, value_set_entry=types))
    assert switch.send(tunnel)[0][0] == 2

    fast = switch.value_set("Prs.fast_protocols", ternary(0x10, 0xF0))
    switch.write(update(U.MODIFY, value_set_entry=fast))
    diffserv = 14 + 1
    assert switch.send(frame(5, DST_MEMBER, proto=0x11))[0][1][diffserv] == 0xB8
    assert switch.send(frame(5, DST_MEMBER, proto=0x06))[0][1][diffserv] == 0

    every = switch.read(value_set_entry=p4runtime_pb2.ValueSetEntry())
    assert [e.value_set_entry for e in every] == sorted([fast, types], key=lambda v: v.value_set_id)
    [only] = switch.read(value_set_entry=p4runtime_pb2.ValueSetEntry(value_set_id=types.value_set_id))
    assert only.value_set_entry == types

    too_many = switch.value_set("Prs.fast_protocols", ternary(1, 0xFF), ternary(2, 0xFF), ternary(3, 0xFF))
    missing_field = switch.value_set("Prs.ipv4_ethertypes")
    missing_field.members.add()
    assert switch.codes(
        update(U.INSERT, value_set_entry=types),
        update(U.DELETE, value_set_entry=types),
        update(U.MODIFY, value_set_entry=too_many),
        update(U.MODIFY, value_set_entry=missing_field),
        update(U.MODIFY, value_set_entry=switch.value_set("Prs.ipv4_ethertypes", exact(b"\x01\x00\x00"))),
        update(U.MODIFY, value_set_entry=switch.value_set("Prs.fast_protocols", exact(b"\x11"))),
        update(U.MODIFY, value_set_entry=switch.value_set("Prs.fast_protocols", ternary(0x11, 0xF0))),
        update(U.MODIFY, value_set_entry=p4runtime_pb2.ValueSetEntry(value_set_id=404)),
    ) == [code_pb2.INVALID_ARGUMENT, code_pb2.INVALID_ARGUMENT, code_pb2.RESOURCE_EXHAUSTED,
          code_pb2.INVALID_ARGUMENT, code_pb2.OUT_OF_RANGE, code_pb2.INVALID_ARGUMENT,
          code_pb2.INVALID_ARGUMENT, code_pb2.NOT_FOUND]
    assert switch.send(tunnel)[0][0] == 2  # refused writes left the sets as they were

    switch.write(update(U.MODIFY, value_set_entry=switch.value_set("Prs.ipv4_ethertypes")))
    assert switch.send(tunnel) == []
    [cleared] = switch.read(value_set_entry=p4runtime_pb2.ValueSetEntry(value_set_id=types.value_set_id))
    assert list(cleared.value_set_entry.members) == []
