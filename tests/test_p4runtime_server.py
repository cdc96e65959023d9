"""P4Runtime server: arbitration, pipeline config, Write/Read status codes, streams, request log.

The server runs over a pipeline stand-in made of the real table and extern classes, so it is
tested on its own; the end-to-end switch tests use real programs.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import text_format
from google.rpc import code_pb2, status_pb2
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

from p4switch import tables
from p4switch.externs import CounterArray, MeterArray, ReplicationEngine
from p4switch.server import P4RuntimeServer

DEVICE_ID = 7

P4INFO_TEXT = """
tables {
  preamble { id: 1 name: "Ing.ipv4_lpm" alias: "ipv4_lpm" }
  match_fields { id: 1 name: "hdr.ipv4.dstAddr" bitwidth: 32 match_type: LPM }
  action_refs { id: 11 } action_refs { id: 12 } action_refs { id: 13 }
  size: 64
}
tables {
  preamble { id: 2 name: "Ing.acl" alias: "acl" }
  match_fields { id: 1 name: "hdr.tcp.dstPort" bitwidth: 16 match_type: TERNARY }
  match_fields { id: 2 name: "meta.prio" bitwidth: 3 match_type: RANGE }
  action_refs { id: 12 } action_refs { id: 13 }
  direct_resource_ids: 31
  size: 16
}
actions { preamble { id: 11 name: "Ing.forward" alias: "forward" }
  params { id: 1 name: "port" bitwidth: 9 } params { id: 2 name: "dmac" bitwidth: 48 } }
actions { preamble { id: 12 name: "Ing.drop" alias: "drop" } }
actions { preamble { id: 13 name: "NoAction" alias: "NoAction" } }
counters { preamble { id: 21 name: "Ing.rx" alias: "rx" } spec { unit: BOTH } size: 8 }
direct_counters { preamble { id: 31 name: "Ing.acl_hits" alias: "acl_hits" } spec { unit: BOTH }
  direct_table_id: 2 }
meters { preamble { id: 41 name: "Ing.police" alias: "police" } spec { unit: PACKETS } size: 4 }
controller_packet_metadata { preamble { id: 51 name: "packet_in" }
  metadata { id: 1 name: "ingress_port" bitwidth: 9 } metadata { id: 2 name: "_pad" bitwidth: 7 } }
controller_packet_metadata { preamble { id: 52 name: "packet_out" }
  metadata { id: 1 name: "egress_port" bitwidth: 9 } metadata { id: 2 name: "_pad" bitwidth: 7 } }
digests { preamble { id: 61 name: "learn_t" } type_spec { struct { name: "learn_t" } } }
type_info { structs { key: "learn_t" value {
  members { name: "mac" type_spec { bitstring { bit { bitwidth: 48 } } } }
  members { name: "port" type_spec { bitstring { bit { bitwidth: 9 } } } } } } }
"""


def p4info() -> p4info_pb2.P4Info:
    return text_format.Parse(P4INFO_TEXT, p4info_pb2.P4Info())


@dataclass
class StandInPipeline:
    """The control-plane surface of a pipeline, from the real table and extern classes."""

    tables: dict[str, tables.Table] = field(default_factory=dict)
    counters: dict[str, CounterArray] = field(default_factory=dict)
    meters: dict[str, MeterArray] = field(default_factory=dict)
    registers: dict[str, Any] = field(default_factory=dict)
    pre: ReplicationEngine = field(default_factory=ReplicationEngine)
    digest_sink: Any = None


def stand_in_pipeline(device_config: bytes) -> StandInPipeline:
    if device_config != b"stand-in":
        raise ValueError("not a stand-in device config")
    actions = {
        "Ing.forward": tables.ActionSpec("Ing.forward", (9, 48)),
        "Ing.drop": tables.ActionSpec("Ing.drop", ()),
        "NoAction": tables.ActionSpec("NoAction", ()),
    }
    lpm = tables.Table("Ing.ipv4_lpm", (tables.KeyField("hdr.ipv4.dstAddr", "lpm", 32),),
                       actions, size=64, initial_default=("Ing.drop", ()))
    acl = tables.Table("Ing.acl", (tables.KeyField("hdr.tcp.dstPort", "ternary", 16),
                                   tables.KeyField("meta.prio", "range", 3)),
                       {k: v for k, v in actions.items() if k != "Ing.forward"}, size=16)
    return StandInPipeline(
        tables={t.name: t for t in (lpm, acl)},
        counters={"Ing.rx": CounterArray("Ing.rx", 8)},
        meters={"Ing.police": MeterArray("Ing.police", 4)},
    )


@dataclass
class RecordingTarget:
    """A data plane that records what the server asks of it."""

    lock: threading.RLock = field(default_factory=threading.RLock)
    pipeline: Any = None
    sent: list[bytes] = field(default_factory=list)

    def install(self, pipeline: Any) -> None:
        self.pipeline = pipeline

    def packet_out(self, frame: bytes) -> None:
        self.sent.append(frame)


class Stream:
    """One StreamChannel: send messages, receive responses with a timeout."""

    def __init__(self, stub: p4runtime_pb2_grpc.P4RuntimeStub) -> None:
        self._out: queue.Queue[Any] = queue.Queue()
        self.received: queue.Queue[Any] = queue.Queue()
        self._call = stub.StreamChannel(iter(self._out.get, None))
        self._thread = threading.Thread(target=self._pump, daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        try:
            for message in self._call:
                self.received.put(message)
        except grpc.RpcError as exc:
            self.received.put(exc)

    def send(self, message: p4runtime_pb2.StreamMessageRequest) -> None:
        self._out.put(message)

    def arbitrate(self, election_id: int, device_id: int = DEVICE_ID) -> p4runtime_pb2.StreamMessageResponse:
        request = p4runtime_pb2.StreamMessageRequest()
        request.arbitration.device_id = device_id
        request.arbitration.election_id.low = election_id
        self.send(request)
        return self.next()

    def next(self, timeout: float = 30) -> Any:  # a wait for a response; the bound only for a loaded machine
        return self.received.get(timeout=timeout)

    def close(self) -> None:
        self._out.put(None)
        self._thread.join(timeout=5)


@dataclass
class Client:
    stub: p4runtime_pb2_grpc.P4RuntimeStub
    server: P4RuntimeServer
    target: RecordingTarget
    streams: list[Stream] = field(default_factory=list)

    def stream(self) -> Stream:
        made = Stream(self.stub)
        self.streams.append(made)
        return made

    def write(self, *updates: p4runtime_pb2.Update, election_id: int = 1) -> p4runtime_pb2.WriteResponse:
        request = p4runtime_pb2.WriteRequest(device_id=DEVICE_ID, updates=list(updates))
        request.election_id.low = election_id
        return self.stub.Write(request)

    def read(self, *entities: p4runtime_pb2.Entity) -> list[p4runtime_pb2.Entity]:
        request = p4runtime_pb2.ReadRequest(device_id=DEVICE_ID, entities=list(entities))
        return [e for response in self.stub.Read(request) for e in response.entities]

    def set_pipeline(self, election_id: int = 1, device_config: bytes = b"stand-in",
                     action: int = p4runtime_pb2.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT,
                     cookie: int = 0) -> None:
        request = p4runtime_pb2.SetForwardingPipelineConfigRequest(device_id=DEVICE_ID, action=action)
        request.election_id.low = election_id
        request.config.p4info.CopyFrom(p4info())
        request.config.p4_device_config = device_config
        request.config.cookie.cookie = cookie
        self.stub.SetForwardingPipelineConfig(request)


def update_errors(exc: grpc.RpcError) -> list[p4runtime_pb2.Error]:
    """The per-update p4.v1.Error details of a failed Write."""
    for key, value in exc.trailing_metadata() or ():
        if key == "grpc-status-details-bin":
            status = status_pb2.Status.FromString(value)
            errors = []
            for detail in status.details:
                error = p4runtime_pb2.Error()
                detail.Unpack(error)
                errors.append(error)
            return errors
    raise AssertionError(f"no status details in {exc}")


@contextmanager
def running_server(request_log: Any = None) -> Iterator[Client]:
    target = RecordingTarget()
    server = P4RuntimeServer(target, DEVICE_ID, "127.0.0.1:0", request_log=request_log,
                             pipeline_factory=stand_in_pipeline)
    server.start()
    channel = grpc.insecure_channel(server.address)
    client = Client(p4runtime_pb2_grpc.P4RuntimeStub(channel), server, target)
    try:
        yield client
    finally:
        for stream in client.streams:
            stream.close()
        channel.close()
        server.stop(0.5)


# -- builders ---------------------------------------------------------------------------------

U = p4runtime_pb2.Update


def lpm_entry(prefix: int, plen: int, port: int | None = None, table_id: int = 1,
              value_bytes: bytes | None = None) -> p4runtime_pb2.TableEntry:
    entry = p4runtime_pb2.TableEntry(table_id=table_id)
    fm = entry.match.add(field_id=1)
    fm.lpm.value = value_bytes if value_bytes is not None else prefix.to_bytes(4, "big")
    fm.lpm.prefix_len = plen
    if port is not None:
        entry.action.action.action_id = 11
        entry.action.action.params.add(param_id=1, value=port.to_bytes(2, "big"))
        entry.action.action.params.add(param_id=2, value=bytes.fromhex("0000000000aa"))
    return entry


def update(kind: int, **entity: Any) -> p4runtime_pb2.Update:
    return p4runtime_pb2.Update(type=kind, entity=p4runtime_pb2.Entity(**entity))


@pytest.fixture
def client() -> Iterator[Client]:
    with running_server() as made:
        yield made


@pytest.fixture
def primary(client: Client) -> Client:
    """A client that is primary (election id 1) with the stand-in pipeline installed."""
    stream = client.stream()
    assert stream.arbitrate(1).arbitration.status.code == code_pb2.OK
    client.set_pipeline()
    return client


def write_codes(client: Client, *updates: p4runtime_pb2.Update, election_id: int = 1) -> list[int]:
    with pytest.raises(grpc.RpcError) as info:
        client.write(*updates, election_id=election_id)
    assert info.value.code() == grpc.StatusCode.UNKNOWN
    return [e.canonical_code for e in update_errors(info.value)]


# -- tests ------------------------------------------------------------------------------------


def test_capabilities(client: Client) -> None:
    reply = client.stub.Capabilities(p4runtime_pb2.CapabilitiesRequest())
    assert reply.p4runtime_api_version == "1.4.1"


def test_arbitration_primary_backup_and_takeover(client: Client) -> None:
    first, second = client.stream(), client.stream()
    assert first.arbitrate(5).arbitration.status.code == code_pb2.OK
    reply = second.arbitrate(3).arbitration
    assert reply.status.code == code_pb2.ALREADY_EXISTS and reply.election_id.low == 5
    # A higher election id takes over and both clients hear of it.
    third = client.stream()
    assert third.arbitrate(9).arbitration.status.code == code_pb2.OK
    assert first.next().arbitration.status.code == code_pb2.ALREADY_EXISTS
    assert second.next().arbitration.election_id.low == 9
    # When the primary leaves there is no primary (P4Runtime 1.4 section 5) until a client
    # arbitrates with an id at least the highest seen.
    third.close()
    client.streams.remove(third)
    left = first.next().arbitration
    assert left.status.code == code_pb2.NOT_FOUND and left.election_id.low == 9
    assert first.arbitrate(5).arbitration.status.code == code_pb2.NOT_FOUND
    assert first.arbitrate(9).arbitration.status.code == code_pb2.OK


def test_duplicate_election_id_and_wrong_device_end_the_stream(client: Client) -> None:
    client.stream().arbitrate(4)
    duplicate = client.stream().arbitrate(4)
    assert isinstance(duplicate, grpc.RpcError) and duplicate.code() == grpc.StatusCode.INVALID_ARGUMENT
    stranger = client.stream().arbitrate(8, device_id=99)
    assert isinstance(stranger, grpc.RpcError) and stranger.code() == grpc.StatusCode.NOT_FOUND


def test_non_primary_cannot_write_or_set_pipeline(client: Client) -> None:
    client.stream().arbitrate(10)
    client.set_pipeline(election_id=10)
    client.stream().arbitrate(2)
    with pytest.raises(grpc.RpcError) as info:
        client.write(update(U.INSERT, table_entry=lpm_entry(0x0A000000, 8, 1)), election_id=2)
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
    with pytest.raises(grpc.RpcError) as info:
        client.set_pipeline(election_id=2)
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert client.read(p4runtime_pb2.Entity(table_entry=p4runtime_pb2.TableEntry())) == []


def test_pipeline_config_actions_and_get(client: Client) -> None:
    Set = p4runtime_pb2.SetForwardingPipelineConfigRequest
    Get = p4runtime_pb2.GetForwardingPipelineConfigRequest
    client.stream().arbitrate(1)
    with pytest.raises(grpc.RpcError) as info:
        client.stub.GetForwardingPipelineConfig(Get(device_id=DEVICE_ID))
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    with pytest.raises(grpc.RpcError) as info:
        client.set_pipeline(device_config=b"garbage")
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    client.set_pipeline(action=Set.VERIFY)
    assert client.target.pipeline is None
    client.set_pipeline(action=Set.VERIFY_AND_SAVE, cookie=42)
    assert client.target.pipeline is None
    commit = Set(device_id=DEVICE_ID, action=Set.COMMIT)
    commit.election_id.low = 1
    client.stub.SetForwardingPipelineConfig(commit)
    assert client.target.pipeline is not None
    reply = client.stub.GetForwardingPipelineConfig(Get(device_id=DEVICE_ID, response_type=Get.ALL))
    assert reply.config.cookie.cookie == 42 and reply.config.p4_device_config == b"stand-in"
    assert reply.config.p4info == p4info()
    cookie_only = client.stub.GetForwardingPipelineConfig(
        Get(device_id=DEVICE_ID, response_type=Get.COOKIE_ONLY))
    assert not cookie_only.config.HasField("p4info") and cookie_only.config.p4_device_config == b""
    # Reconciling to the same program keeps the entries.
    client.write(update(U.INSERT, table_entry=lpm_entry(0x0A000000, 8, 1)))
    client.set_pipeline(action=Set.RECONCILE_AND_COMMIT)
    assert len(client.read(p4runtime_pb2.Entity(table_entry=p4runtime_pb2.TableEntry(table_id=1)))) == 1
    client.set_pipeline()  # a fresh commit starts empty
    assert client.read(p4runtime_pb2.Entity(table_entry=p4runtime_pb2.TableEntry(table_id=1))) == []


def test_write_without_pipeline_is_failed_precondition(client: Client) -> None:
    client.stream().arbitrate(1)
    with pytest.raises(grpc.RpcError) as info:
        client.write(update(U.INSERT, table_entry=lpm_entry(0x0A000000, 8, 1)))
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION


def test_table_entry_insert_read_modify_delete(primary: Client) -> None:
    primary.write(update(U.INSERT, table_entry=lpm_entry(0x0A000100, 24, 1)),
                  update(U.INSERT, table_entry=lpm_entry(0x0A000200, 24, 2)))
    entries = primary.read(p4runtime_pb2.Entity(table_entry=p4runtime_pb2.TableEntry()))
    ports = sorted(e.table_entry.action.action.params[0].value for e in entries)
    assert ports == [b"\x01", b"\x02"]  # canonical byte strings
    table = primary.target.pipeline.tables["Ing.ipv4_lpm"]
    primary.write(update(U.MODIFY, table_entry=lpm_entry(0x0A000100, 24, 7)))
    assert table.get((tables.Lpm(0x0A000100, 24),)).args == (7, 0xAA)
    one = primary.read(p4runtime_pb2.Entity(table_entry=lpm_entry(0x0A000100, 24)))
    assert len(one) == 1 and one[0].table_entry.action.action.params[0].value == b"\x07"
    primary.write(update(U.DELETE, table_entry=lpm_entry(0x0A000100, 24)))
    assert [e.args[0] for e in table.entries()] == [2]


def test_bad_writes_have_per_update_status_codes(primary: Client) -> None:
    primary.write(update(U.INSERT, table_entry=lpm_entry(0x0A000000, 8, 1)))
    codes = write_codes(
        primary,
        update(U.INSERT, table_entry=lpm_entry(0x0B000000, 8, 1)),  # fine
        update(U.INSERT, table_entry=lpm_entry(0x0A000000, 8, 1)),  # duplicate
        update(U.DELETE, table_entry=lpm_entry(0x0C000000, 8)),  # missing
        update(U.INSERT, table_entry=lpm_entry(0, 8, 1, table_id=999)),  # unknown table
        update(U.INSERT, table_entry=lpm_entry(0, 8, 1, value_bytes=b"\x01\x00\x00\x00\x00")),  # too wide
        update(U.INSERT, table_entry=lpm_entry(0x0D000000, 8, 600)),  # port does not fit 9 bits
        update(U.INSERT, table_entry=lpm_entry(0x0A000001, 8, 1)),  # bits beyond the prefix
        update(U.INSERT, table_entry=lpm_entry(0x0E000000, 8, 1, value_bytes=b"")),  # empty value
    )
    # Values wider than their field are OUT_OF_RANGE (P4Runtime specification, Bytestrings).
    assert codes == [code_pb2.OK, code_pb2.ALREADY_EXISTS, code_pb2.NOT_FOUND, code_pb2.NOT_FOUND,
                     code_pb2.OUT_OF_RANGE, code_pb2.OUT_OF_RANGE, code_pb2.INVALID_ARGUMENT,
                     code_pb2.OUT_OF_RANGE]
    # The good update of the batch was applied all the same.
    assert len(primary.target.pipeline.tables["Ing.ipv4_lpm"].entries()) == 2


def test_priority_entries_direct_counters_and_idle_timeout(primary: Client) -> None:
    entry = p4runtime_pb2.TableEntry(table_id=2, priority=10)
    fm = entry.match.add(field_id=1)
    fm.ternary.value, fm.ternary.mask = b"\x00\x50", b"\xff\xff"
    entry.action.action.action_id = 12
    no_priority = p4runtime_pb2.TableEntry()
    no_priority.CopyFrom(entry)
    no_priority.priority = 0
    timed = p4runtime_pb2.TableEntry()
    timed.CopyFrom(entry)
    timed.idle_timeout_ns = 10**9
    assert write_codes(primary, update(U.INSERT, table_entry=no_priority),
                       update(U.INSERT, table_entry=timed)) == [code_pb2.INVALID_ARGUMENT, code_pb2.UNIMPLEMENTED]
    primary.write(update(U.INSERT, table_entry=entry))
    direct = p4runtime_pb2.DirectCounterEntry(table_entry=entry)
    direct.data.packet_count, direct.data.byte_count = 5, 500
    primary.write(update(U.MODIFY, direct_counter_entry=direct))
    query = p4runtime_pb2.TableEntry(table_id=2)
    query.counter_data.SetInParent()
    read = primary.read(p4runtime_pb2.Entity(table_entry=query))
    assert len(read) == 1 and read[0].table_entry.priority == 10
    assert read[0].table_entry.counter_data.packet_count == 5
    counters = primary.read(p4runtime_pb2.Entity(direct_counter_entry=p4runtime_pb2.DirectCounterEntry(
        table_entry=p4runtime_pb2.TableEntry(table_id=2))))
    assert [(c.direct_counter_entry.data.packet_count, c.direct_counter_entry.data.byte_count)
            for c in counters] == [(5, 500)]


def test_default_entry_modify_and_read(primary: Client) -> None:
    default = p4runtime_pb2.TableEntry(table_id=1, is_default_action=True)
    default.action.action.action_id = 13
    primary.write(update(U.MODIFY, table_entry=default))
    assert primary.target.pipeline.tables["Ing.ipv4_lpm"].default == ("NoAction", ())
    read = primary.read(p4runtime_pb2.Entity(table_entry=p4runtime_pb2.TableEntry(
        table_id=1, is_default_action=True)))
    assert read[0].table_entry.is_default_action and read[0].table_entry.action.action.action_id == 13
    assert write_codes(primary, update(U.INSERT, table_entry=default)) == [code_pb2.INVALID_ARGUMENT]
    primary.write(update(U.MODIFY, table_entry=p4runtime_pb2.TableEntry(table_id=1, is_default_action=True)))
    assert primary.target.pipeline.tables["Ing.ipv4_lpm"].default == ("Ing.drop", ())


def test_counters_and_meters(primary: Client) -> None:
    primary.target.pipeline.counters["Ing.rx"].count(3, 100)
    counter = p4runtime_pb2.CounterEntry(counter_id=21)
    counter.index.index = 3
    read = primary.read(p4runtime_pb2.Entity(counter_entry=counter))
    assert [(e.counter_entry.data.packet_count, e.counter_entry.data.byte_count) for e in read] == [(1, 100)]
    everything = primary.read(p4runtime_pb2.Entity(counter_entry=p4runtime_pb2.CounterEntry()))
    assert len(everything) == 8
    counter.index.index = 8
    assert write_codes(primary, update(U.MODIFY, counter_entry=counter)) == [code_pb2.OUT_OF_RANGE]
    primary.write(update(U.MODIFY, counter_entry=p4runtime_pb2.CounterEntry(counter_id=21)))  # reset all
    assert primary.target.pipeline.counters["Ing.rx"].read(3) == (0, 0)
    meter = p4runtime_pb2.MeterEntry(meter_id=41)
    meter.index.index = 2
    meter.config.cir, meter.config.cburst, meter.config.pir, meter.config.pburst = 10, 5, 20, 10
    primary.write(update(U.MODIFY, meter_entry=meter))
    read = primary.read(p4runtime_pb2.Entity(meter_entry=p4runtime_pb2.MeterEntry(meter_id=41)))
    assert [e.meter_entry.config.pir for e in read] == [0, 0, 20, 0]


def test_multicast_groups_and_clone_sessions(primary: Client) -> None:
    pre = p4runtime_pb2.PacketReplicationEngineEntry()
    pre.multicast_group_entry.multicast_group_id = 1
    pre.multicast_group_entry.replicas.add(egress_port=1, instance=0)
    pre.multicast_group_entry.replicas.add(egress_port=2, instance=0)
    primary.write(update(U.INSERT, packet_replication_engine_entry=pre))
    assert primary.target.pipeline.pre.groups[1] == [(1, 0), (2, 0)]
    assert write_codes(primary, update(U.INSERT, packet_replication_engine_entry=pre)) == [code_pb2.ALREADY_EXISTS]
    clone = p4runtime_pb2.PacketReplicationEngineEntry()
    clone.clone_session_entry.session_id = 5
    clone.clone_session_entry.packet_length_bytes = 64
    clone.clone_session_entry.replicas.add(egress_port=3, instance=1)
    assert write_codes(primary, update(U.MODIFY, packet_replication_engine_entry=clone)) == [code_pb2.NOT_FOUND]
    primary.write(update(U.INSERT, packet_replication_engine_entry=clone))
    query = p4runtime_pb2.PacketReplicationEngineEntry()
    query.clone_session_entry.SetInParent()
    read = primary.read(p4runtime_pb2.Entity(packet_replication_engine_entry=query))
    session = read[0].packet_replication_engine_entry.clone_session_entry
    assert session.session_id == 5 and session.packet_length_bytes == 64 and session.replicas[0].egress_port == 3
    primary.write(update(U.DELETE, packet_replication_engine_entry=pre))
    assert 1 not in primary.target.pipeline.pre.groups


def test_registers_are_unimplemented_as_on_bmv2(primary: Client) -> None:
    register = p4runtime_pb2.RegisterEntry(register_id=1)
    assert write_codes(primary, update(U.MODIFY, register_entry=register)) == [code_pb2.UNIMPLEMENTED]
    with pytest.raises(grpc.RpcError) as info:
        primary.read(p4runtime_pb2.Entity(register_entry=register))
    assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED


def test_packet_out_packet_in_and_digests(client: Client) -> None:
    stream = client.stream()
    stream.arbitrate(1)
    client.set_pipeline()
    out = p4runtime_pb2.StreamMessageRequest()
    out.packet.payload = b"\xaa" * 20
    out.packet.metadata.add(metadata_id=1, value=(3).to_bytes(2, "big"))
    stream.send(out)
    deadline = time.monotonic() + 30  # a wait for the event, bounded for a loaded machine
    while not client.target.sent and time.monotonic() < deadline:
        time.sleep(0.01)
    # egress_port 3 in 9 bits, then 7 bits of padding, then the payload.
    assert client.target.sent == [bytes([0x01, 0x80]) + b"\xaa" * 20]

    client.server.servicer.packet_in(bytes([0x02, 0x00]) + b"\xbb" * 10)  # ingress_port 4
    packet_in = stream.next().packet
    assert packet_in.payload == b"\xbb" * 10
    assert {m.metadata_id: m.value for m in packet_in.metadata} == {1: b"\x04", 2: b"\x00"}

    sink = client.target.pipeline.digest_sink
    sink("learn_t", (0x0000000000AB, 5))  # not enabled yet: nothing is sent
    client.write(update(U.INSERT, digest_entry=p4runtime_pb2.DigestEntry(digest_id=61)))
    sink("learn_t", (0x0000000000AB, 5))
    digest = stream.next().digest
    assert digest.digest_id == 61
    assert [m.bitstring for m in digest.data[0].struct.members] == [b"\xab", b"\x05"]


def test_stream_error_for_packet_out_before_pipeline(client: Client) -> None:
    stream = client.stream()
    stream.arbitrate(1)
    out = p4runtime_pb2.StreamMessageRequest()
    out.packet.payload = b"x"
    stream.send(out)
    error = stream.next().error
    assert error.canonical_code == code_pb2.FAILED_PRECONDITION
    assert error.packet_out.packet_out.payload == b"x"


def test_client_disconnect_keeps_table_state(client: Client) -> None:
    stream = client.stream()
    stream.arbitrate(1)
    client.set_pipeline()
    client.write(update(U.INSERT, table_entry=lpm_entry(0x0A000000, 8, 1)))
    stream.close()
    client.streams.remove(stream)
    again = client.stream()
    assert again.arbitrate(2).arbitration.status.code == code_pb2.OK
    assert len(client.read(p4runtime_pb2.Entity(table_entry=p4runtime_pb2.TableEntry(table_id=1)))) == 1


def test_request_log_records_each_request(tmp_path: Path) -> None:
    path = tmp_path / "p4rt.log"
    with running_server(request_log=path) as client:
        client.stream().arbitrate(1)
        client.set_pipeline()
        client.write(update(U.INSERT, table_entry=lpm_entry(0x0A000000, 8, 1)))
    text = path.read_text()
    assert "/p4.v1.P4Runtime/Write" in text and "prefix_len: 8" in text
    assert "/p4.v1.P4Runtime/SetForwardingPipelineConfig" in text
    assert "/p4.v1.P4Runtime/StreamChannel" in text and "election_id" in text


def test_packet_out_from_a_backup_is_refused(primary: Client) -> None:
    backup = primary.stream()
    assert backup.arbitrate(0).arbitration.status.code == code_pb2.ALREADY_EXISTS  # no election id
    out = p4runtime_pb2.StreamMessageRequest()
    out.packet.payload = b"\x00\x00frame"
    backup.send(out)
    assert backup.next().error.canonical_code == code_pb2.PERMISSION_DENIED
    assert primary.target.sent == []
