"""P4Runtime server under hostile and careless use: streams that hold threads, reads that
amplify, refused updates that must leave no trace, mismatched P4Info, arbitration as the
specification (P4Runtime 1.4 section 5) says, match formats (section 9.1), PacketIn to a client
that does not read, and the error details of large batches.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import grpc
import pytest
from google.protobuf import text_format
from google.rpc import code_pb2
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

from controller.arbitration import ElectionId
from controller.errors import WriteRefused
from controller.transport import Transport
from p4switch.externs import CounterArray
from p4switch.server import P4RuntimeServer
from p4switch.server.outbox import DATA_LIMIT
from p4switch.server.servicer import MAX_READ_ENTITIES, MAX_STREAMS, READ_BATCH
from tests.test_p4runtime_server import (
    DEVICE_ID,
    P4INFO_TEXT,
    U,
    Client,
    RecordingTarget,
    lpm_entry,
    p4info,
    running_server,
    stand_in_pipeline,
    update,
    write_codes,
)

BIG = 30_000  # cells of the counter of the read-amplification test


@pytest.fixture
def client() -> Iterator[Client]:
    with running_server() as made:
        yield made


@pytest.fixture
def primary(client: Client) -> Client:
    assert client.stream().arbitrate(1).arbitration.status.code == code_pb2.OK
    client.set_pipeline()
    return client


def pipeline_request(info: p4info_pb2.P4Info, election_id: int = 1) -> p4runtime_pb2.SetForwardingPipelineConfigRequest:
    request = p4runtime_pb2.SetForwardingPipelineConfigRequest(
        device_id=DEVICE_ID, action=p4runtime_pb2.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT)
    request.election_id.low = election_id
    request.config.p4info.CopyFrom(info)
    request.config.p4_device_config = b"stand-in"
    return request


def read_all(client: Client, entity: p4runtime_pb2.Entity) -> list[p4runtime_pb2.Entity]:
    return client.read(entity)


def lpm_entries(client: Client) -> list[p4runtime_pb2.Entity]:
    return read_all(client, p4runtime_pb2.Entity(table_entry=p4runtime_pb2.TableEntry(table_id=1)))


# -- 1. streams do not starve other RPCs ------------------------------------------------------

def test_open_streams_neither_starve_rpcs_nor_stay_unarbitrated(primary: Client) -> None:
    primary.server.servicer.arbitration_timeout = 1.0
    idle = [primary.stub.StreamChannel(iter(threading.Event().wait, None)) for _ in range(MAX_STREAMS + 4)]
    time.sleep(0.3)
    # Unary RPCs still answer at once.
    primary.stub.Capabilities(p4runtime_pb2.CapabilitiesRequest(), timeout=2)
    request = p4runtime_pb2.WriteRequest(device_id=DEVICE_ID, updates=[update(U.INSERT, table_entry=lpm_entry(0x0A000000, 8, 1))])
    request.election_id.low = 1
    primary.stub.Write(request, timeout=2)
    assert len(lpm_entries(primary)) == 1
    # Streams past the limit are refused at once rather than queued.
    ends = []
    for call in idle:
        try:
            next(call)
        except grpc.RpcError as exc:
            ends.append(exc.code())
    assert grpc.StatusCode.RESOURCE_EXHAUSTED in ends
    # The others end when they do not arbitrate in time, so a new client can arbitrate.
    assert set(ends) <= {grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.DEADLINE_EXCEEDED}
    newcomer = primary.stream()
    assert newcomer.arbitrate(2).arbitration.status.code == code_pb2.OK


# -- 2. reads stream their answer and do not hold the pipeline lock ---------------------------

def big_counter_pipeline(device_config: bytes):  # noqa: ANN201 - the stand-in pipeline type
    pipeline = stand_in_pipeline(device_config)
    pipeline.counters["Ing.rx"] = CounterArray("Ing.rx", BIG)
    return pipeline


@contextmanager
def big_counter_server() -> Iterator[Client]:
    target = RecordingTarget()
    server = P4RuntimeServer(target, DEVICE_ID, "127.0.0.1:0", pipeline_factory=big_counter_pipeline)
    server.start()
    channel = grpc.insecure_channel(server.address)
    client = Client(p4runtime_pb2_grpc.P4RuntimeStub(channel), server, target)
    try:
        assert client.stream().arbitrate(1).arbitration.status.code == code_pb2.OK
        info = p4info()
        info.counters[0].size = BIG
        client.stub.SetForwardingPipelineConfig(pipeline_request(info))
        yield client
    finally:
        for stream in client.streams:
            stream.close()
        channel.close()
        server.stop(0.5)


class CountingLock:
    """The pipeline lock, counting its holds; once armed, the first thread to take it (the
    read under test) waits before its third hold until ``go`` is set."""

    def __init__(self, inner: threading.RLock) -> None:
        self.inner, self.holds, self.reader_holds = inner, 0, 0
        self.armed, self.go = False, threading.Event()
        self.reader: int | None = None

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if self.armed and self.reader in (None, threading.get_ident()):
            self.reader = threading.get_ident()
            self.reader_holds += 1
            if self.reader_holds == 3:
                self.go.wait(180)  # past the read's 120 s deadline
        taken = self.inner.acquire(blocking, timeout)
        self.holds += taken
        return taken

    def release(self) -> None:
        self.inner.release()

    def __enter__(self) -> CountingLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def test_wildcard_reads_stream_and_let_writes_and_packets_through() -> None:
    """Events, not times: the first response arrives, and a Write goes through, while the read
    waits before building its third batch; every response is built under a hold of its own."""
    with big_counter_server() as client:
        lock = client.target.lock = CountingLock(client.target.lock)
        wildcard = p4runtime_pb2.Entity(counter_entry=p4runtime_pb2.CounterEntry(counter_id=21))
        request = p4runtime_pb2.ReadRequest(device_id=DEVICE_ID, entities=[wildcard] * 20)
        lock.armed = True
        responses = client.stub.Read(request, timeout=120)
        # The read waits before its third hold: a read built whole would end in DEADLINE_EXCEEDED.
        assert len(next(responses).entities) == READ_BATCH
        # A Write goes through while the read is under way; then the client gives up.
        write = p4runtime_pb2.WriteRequest(device_id=DEVICE_ID,
                                           updates=[update(U.INSERT, table_entry=lpm_entry(0x0A000000, 8, 1))])
        write.election_id.low = 1
        client.stub.Write(write, timeout=30)  # a read holding the lock from its first batch (for its 120 s) times this out
        assert lock.reader_holds <= 3 and not lock.go.is_set(), "the read was under way"
        responses.cancel()
        lock.armed = False
        lock.go.set()
        # Each cell once, all of them, one hold of the lock per response.
        before = lock.holds
        cells = [e.counter_entry.index.index for e in client.read(wildcard)]
        assert cells == list(range(BIG))
        assert lock.holds - before >= BIG // READ_BATCH


def test_read_requests_are_bounded(primary: Client) -> None:
    entity = p4runtime_pb2.Entity(counter_entry=p4runtime_pb2.CounterEntry(counter_id=21))
    with pytest.raises(grpc.RpcError) as info:
        primary.read(*[entity] * (MAX_READ_ENTITIES + 1))
    assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


# -- 3 and 6. refused updates leave no state; table entry rules --------------------------------

def test_refused_direct_resources_leave_no_entry(primary: Client) -> None:
    with_meter = lpm_entry(0x0A000000, 8, 1)
    with_meter.meter_config.cir = 10
    with_counter = lpm_entry(0x0B000000, 8, 1)
    with_counter.counter_data.packet_count = 5
    assert write_codes(primary, update(U.INSERT, table_entry=with_meter),
                       update(U.INSERT, table_entry=with_counter)) == [code_pb2.INVALID_ARGUMENT] * 2
    assert lpm_entries(primary) == []


def test_match_format_rules(primary: Client) -> None:
    slash0 = lpm_entry(0, 0, 1)
    mask0 = p4runtime_pb2.TableEntry(table_id=2, priority=1)
    mask0.match.add(field_id=1).ternary.CopyFrom(p4runtime_pb2.FieldMatch.Ternary(value=b"\x00", mask=b"\x00"))
    mask0.action.action.action_id = 12
    full = p4runtime_pb2.TableEntry(table_id=2, priority=1)
    full.match.add(field_id=2).range.CopyFrom(p4runtime_pb2.FieldMatch.Range(low=b"\x00", high=b"\x07"))
    full.action.action.action_id = 12
    const = lpm_entry(0x0C000000, 8, 1)
    const.is_const = True
    codes = write_codes(primary, *(update(U.INSERT, table_entry=e) for e in (slash0, mask0, full, const)))
    assert codes == [code_pb2.INVALID_ARGUMENT] * 4
    assert lpm_entries(primary) == [] and read_all(
        primary, p4runtime_pb2.Entity(table_entry=p4runtime_pb2.TableEntry(table_id=2))) == []
    # A narrower range is fine.
    full.match[0].range.high = b"\x06"
    primary.write(update(U.INSERT, table_entry=full))


def test_modify_without_an_action_keeps_the_action(primary: Client) -> None:
    primary.write(update(U.INSERT, table_entry=lpm_entry(0x0A000000, 8, 3)))
    bare = lpm_entry(0x0A000000, 8)
    primary.write(update(U.MODIFY, table_entry=bare))
    (entity,) = lpm_entries(primary)
    assert entity.table_entry.action.action.action_id == 11
    assert entity.table_entry.action.action.params[0].value == b"\x03"
    missing = lpm_entry(0x0B000000, 8)
    assert write_codes(primary, update(U.MODIFY, table_entry=missing)) == [code_pb2.NOT_FOUND]


# -- 4. P4Info checked against the device config ---------------------------------------------

def _variant(edit: str) -> p4info_pb2.P4Info:
    info = p4info()
    if edit == "width":
        info.tables[0].match_fields[0].bitwidth = 16
    elif edit == "kind":
        info.tables[0].match_fields[0].match_type = p4info_pb2.MatchField.EXACT
    elif edit == "param":
        info.actions[0].params[0].bitwidth = 16
    elif edit == "action_ref":
        info.tables[0].action_refs.add(id=99)
    elif edit == "duplicate":
        info.counters[0].preamble.id = 1  # the id of table Ing.ipv4_lpm
    elif edit == "size":
        info.counters[0].size = 9
    return info


@pytest.mark.parametrize("edit, named", [
    ("width", "hdr.ipv4.dstAddr"), ("kind", "hdr.ipv4.dstAddr"), ("param", "Ing.forward"),
    ("action_ref", "99"), ("duplicate", "0x1"), ("size", "Ing.rx"),
])
def test_mismatching_p4info_is_refused_by_name(primary: Client, edit: str, named: str) -> None:
    primary.write(update(U.INSERT, table_entry=lpm_entry(0x0A000000, 8, 1)))
    with pytest.raises(grpc.RpcError) as info:
        primary.stub.SetForwardingPipelineConfig(pipeline_request(_variant(edit)))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert named in info.value.details()
    assert len(lpm_entries(primary)) == 1  # the running pipeline is untouched


def test_unchanged_p4info_text_is_accepted(primary: Client) -> None:
    primary.stub.SetForwardingPipelineConfig(pipeline_request(text_format.Parse(P4INFO_TEXT, p4info_pb2.P4Info())))


# -- 5. arbitration as P4Runtime 1.4 section 5 says ------------------------------------------

def test_no_primary_after_the_primary_leaves_until_the_highest_id_returns(client: Client) -> None:
    backup, primary = client.stream(), client.stream()
    assert backup.arbitrate(3).arbitration.status.code == code_pb2.OK
    assert primary.arbitrate(8).arbitration.status.code == code_pb2.OK
    assert backup.next().arbitration.status.code == code_pb2.ALREADY_EXISTS
    primary.close()
    client.streams.remove(primary)
    note = backup.next().arbitration
    assert note.status.code == code_pb2.NOT_FOUND and note.election_id.low == 8
    with pytest.raises(grpc.RpcError) as info:
        client.set_pipeline(election_id=3)
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert client.stream().arbitrate(7).arbitration.status.code == code_pb2.NOT_FOUND
    assert client.stream().arbitrate(8).arbitration.status.code == code_pb2.OK


def test_a_primary_lowering_its_id_becomes_a_backup(client: Client) -> None:
    first, other = client.stream(), client.stream()
    assert first.arbitrate(6).arbitration.status.code == code_pb2.OK
    assert other.arbitrate(2).arbitration.status.code == code_pb2.ALREADY_EXISTS
    assert first.arbitrate(4).arbitration.status.code == code_pb2.NOT_FOUND
    assert other.next().arbitration.status.code == code_pb2.NOT_FOUND
    with pytest.raises(grpc.RpcError) as info:
        client.set_pipeline(election_id=4)
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED


def test_explicit_zero_ids_are_unique_and_unset_ids_never_primary(client: Client) -> None:
    first = client.stream()
    assert first.arbitrate(0).arbitration.status.code == code_pb2.OK  # 0 is an id: set, not unset
    duplicate = client.stream().arbitrate(0)
    assert isinstance(duplicate, grpc.RpcError) and duplicate.code() == grpc.StatusCode.INVALID_ARGUMENT
    unset = client.stream()
    request = p4runtime_pb2.StreamMessageRequest()
    request.arbitration.device_id = DEVICE_ID
    unset.send(request)
    assert unset.next().arbitration.status.code == code_pb2.ALREADY_EXISTS


def test_notifications_leave_the_id_unset_before_any_primary(client: Client) -> None:
    unset = client.stream()
    request = p4runtime_pb2.StreamMessageRequest()
    request.arbitration.device_id = DEVICE_ID
    unset.send(request)
    note = unset.next().arbitration
    assert note.status.code == code_pb2.NOT_FOUND and not note.HasField("election_id")


def test_a_device_id_change_on_a_stream_is_failed_precondition(client: Client) -> None:
    stream = client.stream()
    assert stream.arbitrate(5).arbitration.status.code == code_pb2.OK
    ended = stream.arbitrate(5, device_id=DEVICE_ID + 1)
    assert isinstance(ended, grpc.RpcError) and ended.code() == grpc.StatusCode.FAILED_PRECONDITION


# -- 7. PacketIn to a primary that never reads ------------------------------------------------

def test_packet_in_to_a_client_that_does_not_read_is_bounded(primary: Client) -> None:
    gate = threading.Event()

    def outgoing() -> Iterator[p4runtime_pb2.StreamMessageRequest]:
        request = p4runtime_pb2.StreamMessageRequest()
        request.arbitration.device_id = DEVICE_ID
        request.arbitration.election_id.low = 50
        yield request
        gate.wait(30)

    call = primary.stub.StreamChannel(outgoing())
    assert next(call).arbitration.status.code == code_pb2.OK  # then this client stops reading
    servicer = primary.server.servicer
    sent = 20_000
    for i in range(sent):
        servicer.packet_in(b"\x00\x80" + i.to_bytes(4, "big") * 16)
    # Queued at most DATA_LIMIT, in gRPC's flow-control window a few thousand at most.
    assert servicer.packet_ins_dropped >= sent - DATA_LIMIT - 5000
    gate.set()
    call.cancel()


# -- 8. the error details of a large batch reach the controller -------------------------------

def test_large_batch_failures_reach_the_controller(primary: Client) -> None:
    transport = Transport("s1", primary.server.address, DEVICE_ID)
    assert transport.open(ElectionId(0, 100))
    count = 1000  # the table holds 64: the rest are RESOURCE_EXHAUSTED, one Error each
    request = p4runtime_pb2.WriteRequest()
    for i in range(count):
        u = request.updates.add()
        u.CopyFrom(update(U.INSERT, table_entry=lpm_entry((10 << 24) | (i << 8), 24, 1)))
    try:
        with pytest.raises(WriteRefused) as info:
            transport.write(request, lambda i: f"route #{i}")
    finally:
        transport.close()
    failures = info.value.failures
    assert len(failures) == count - 64
    assert failures[0].startswith("route #64: RESOURCE_EXHAUSTED")
