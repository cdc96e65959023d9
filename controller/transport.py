"""A thin synchronous wrapper of one P4Runtime gRPC connection.

It owns the channel and the StreamChannel (arbitration, packet-in), turns gRPC errors into
:mod:`controller.errors` types whose messages name the switch and the refused updates, and
records every request in the switch's :class:`RequestLog`.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator, Sequence

import grpc
from google.rpc import code_pb2, status_pb2
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

from controller.arbitration import ElectionId
from controller.errors import ArbitrationRefused, ConnectionFailed, RpcError, WriteRefused
from controller.request_log import RequestLog

_DISCONNECTED = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED, grpc.StatusCode.DEADLINE_EXCEEDED)
#: Stream endings worth another try (a switch starting, or with all its streams in use).
_RETRYABLE = _DISCONNECTED + (grpc.StatusCode.RESOURCE_EXHAUSTED,)
#: Answers of a switch that restarted under us: no pipeline any more, or no primary.
_SESSION_LOST = _DISCONNECTED + (grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.PERMISSION_DENIED)


#: Large messages both ways, and room for the per-update errors of a large batch: they travel
#: in trailing metadata, which gRPC limits to 16 KB by default (about 465 updates' worth).
CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", 64 << 20),
    ("grpc.max_send_message_length", 64 << 20),
    ("grpc.max_metadata_size", 16 << 20),
]


def _code_name(code: int) -> str:
    return code_pb2.Code.Name(code) if code in code_pb2.Code.values() else str(code)


def write_failures(error: grpc.RpcError, described: Sequence[str]) -> list[str]:
    """The refused updates of a failed Write, each named by its description and the switch's reason."""
    status = None
    for key, value in error.trailing_metadata() or ():
        if key == "grpc-status-details-bin":
            status = status_pb2.Status.FromString(value)
    if status is None or not status.details:
        return [f"{error.code().name}: {error.details()}"]
    failures = []
    for index, detail in enumerate(status.details):
        p4_error = p4runtime_pb2.Error()
        detail.Unpack(p4_error)
        if p4_error.canonical_code == code_pb2.OK:
            continue
        what = described[index] if index < len(described) else f"update #{index}"
        failures.append(f"{what}: {_code_name(p4_error.canonical_code)} {p4_error.message}".rstrip())
    return failures


class _Described(Sequence[str]):
    """Descriptions of a batch's updates, computed only for the ones asked for."""

    def __init__(self, describe: Callable[[int], str], count: int) -> None:
        self._describe, self._count = describe, count

    def __getitem__(self, index):  # type: ignore[override]
        return self._describe(index)

    def __len__(self) -> int:
        return self._count


class Transport:
    """One switch's channel, stub and stream; not shared between switches."""

    def __init__(self, name: str, address: str, device_id: int, log: RequestLog | None = None) -> None:
        self.name = name
        self.address = address
        self.device_id = device_id
        self.log = log or RequestLog(None)
        self._channel: grpc.Channel | None = None
        self._stub: p4runtime_pb2_grpc.P4RuntimeStub | None = None
        self._requests: queue.Queue[p4runtime_pb2.StreamMessageRequest | None] = queue.Queue()
        #: Arbitration answers; a grpc.RpcError when the switch ended the stream instead.
        self._arbitration: queue.Queue[p4runtime_pb2.MasterArbitrationUpdate | grpc.RpcError] = queue.Queue()
        self.packets_in: queue.Queue[p4runtime_pb2.PacketIn] = queue.Queue()
        self._reader: threading.Thread | None = None
        self.stream_open = False
        self.primary = False

    # -- connection -----------------------------------------------------------------------
    def open(self, election_id: ElectionId, timeout: float = 5.0) -> bool:
        """Connect, open the stream and arbitrate; returns whether this client is primary."""
        self.close()
        self._channel = grpc.insecure_channel(self.address, options=CHANNEL_OPTIONS)
        try:
            grpc.channel_ready_future(self._channel).result(timeout=timeout)
        except grpc.FutureTimeoutError:
            self.close()
            raise ConnectionFailed(
                f"{self.name}: no P4Runtime server at {self.address} (waited {timeout:g} s)"
            ) from None
        self._stub = p4runtime_pb2_grpc.P4RuntimeStub(self._channel)
        self._requests = queue.Queue()
        self._arbitration = queue.Queue()
        responses = self._stub.StreamChannel(iter(self._requests.get, None))
        self.stream_open = True
        self._reader = threading.Thread(
            target=self._read_stream, args=(responses, self._arbitration), daemon=True, name=f"p4rt-{self.name}"
        )
        self._reader.start()
        self.election_id = election_id
        update = p4runtime_pb2.MasterArbitrationUpdate(device_id=self.device_id)
        update.election_id.high, update.election_id.low = election_id.high, election_id.low
        self._requests.put(p4runtime_pb2.StreamMessageRequest(arbitration=update))
        self.log.record("StreamChannel arbitration", [f"device_id={self.device_id} election_id={election_id}"])
        try:
            reply = self._arbitration.get(timeout=timeout)
        except queue.Empty:
            self.close()
            raise ConnectionFailed(
                f"{self.name}: no arbitration answer from {self.address} within {timeout:g} s"
            ) from None
        if isinstance(reply, grpc.RpcError):
            self.close()
            self.log.record("arbitration answer", result=reply.code().name)
            kind = ConnectionFailed if reply.code() in _RETRYABLE else ArbitrationRefused
            raise kind(
                f"{self.name}: {self.address} refused arbitration as device {self.device_id}: "
                f"{reply.code().name} {reply.details()}"
            )
        self.primary = reply.status.code == code_pb2.OK
        self.log.record("arbitration answer", result="primary" if self.primary else "backup")
        return self.primary

    def _read_stream(self, responses: Iterator[p4runtime_pb2.StreamMessageResponse],
                     answers: queue.Queue[p4runtime_pb2.MasterArbitrationUpdate | grpc.RpcError]) -> None:
        try:
            for message in responses:
                kind = message.WhichOneof("update")
                if kind == "arbitration":
                    self.primary = message.arbitration.status.code == code_pb2.OK
                    answers.put(message.arbitration)
                elif kind == "packet":
                    self.packets_in.put(message.packet)
        except grpc.RpcError as error:
            answers.put(error)  # open() waiting for an answer hears why the stream ended
        finally:
            self.stream_open = False
            self.primary = False

    def close(self) -> None:
        if self._channel is not None:
            self._requests.put(None)
            self._channel.close()
            if self._reader is not None:
                self._reader.join(timeout=2)
        self._channel = None
        self._stub = None
        self.stream_open = False
        self.primary = False

    @property
    def stub(self) -> p4runtime_pb2_grpc.P4RuntimeStub:
        if self._stub is None:
            raise ConnectionFailed(f"{self.name}: not connected to {self.address}")
        return self._stub

    def _rpc_error(self, rpc: str, error: grpc.RpcError) -> Exception:
        if error.code() in _SESSION_LOST:
            self.stream_open = False
            return ConnectionFailed(
                f"{self.name}: {rpc} failed, session with {self.address} lost ({error.code().name} {error.details()})"
            )
        return RpcError(f"{self.name}: {rpc} failed: {error.code().name} {error.details()}")

    # -- RPCs -----------------------------------------------------------------------------
    def write(self, request: p4runtime_pb2.WriteRequest, describe: Callable[[int], str]) -> None:
        """Send one batch (built in place by the caller); raises WriteRefused naming every refused update.

        ``describe(i)`` names update i; it is only called for the request log and for failures.
        """
        request.device_id = self.device_id
        request.election_id.high, request.election_id.low = self.election_id.high, self.election_id.low
        count = len(request.updates)
        lines = (lambda: [describe(i) for i in range(count)]) if self.log.path else (lambda: [])
        try:
            self.stub.Write(request, timeout=120)
        except grpc.RpcError as error:
            if error.code() in _SESSION_LOST:
                self.log.record(f"Write {count} update(s)", lines(), result=error.code().name)
                raise self._rpc_error("Write", error) from None
            failures = write_failures(error, _Described(describe, count))
            self.log.record(f"Write {count} update(s)", lines(), result="; ".join(failures))
            raise WriteRefused(self.name, failures) from None
        self.log.record(f"Write {count} update(s)", lines(), result="OK")

    def read(self, entities: Sequence[p4runtime_pb2.Entity], what: str) -> list[p4runtime_pb2.Entity]:
        request = p4runtime_pb2.ReadRequest(device_id=self.device_id, entities=entities)
        try:
            found = [e for reply in self.stub.Read(request, timeout=60) for e in reply.entities]
        except grpc.RpcError as error:
            self.log.record(f"Read {what}", result=error.code().name)
            raise self._rpc_error(f"Read {what}", error) from None
        self.log.record(f"Read {what}", result=f"{len(found)} entities")
        return found

    def read_raw(self, entities: Sequence[p4runtime_pb2.Entity], what: str) -> list[bytes]:
        """A Read whose replies stay serialized: one ReadResponse's bytes per streamed reply
        (for :mod:`controller.counter_wire`; parsing them into messages costs far more)."""
        request = p4runtime_pb2.ReadRequest(device_id=self.device_id, entities=entities)
        if self._channel is None:
            raise ConnectionFailed(f"{self.name}: not connected to {self.address}")
        call = self._channel.unary_stream(
            "/p4.v1.P4Runtime/Read", request_serializer=p4runtime_pb2.ReadRequest.SerializeToString,
            response_deserializer=None,
        )
        try:
            replies = list(call(request, timeout=60))
        except grpc.RpcError as error:
            self.log.record(f"Read {what}", result=error.code().name)
            raise self._rpc_error(f"Read {what}", error) from None
        self.log.record(f"Read {what}", result=f"{len(replies)} replies, {sum(map(len, replies))} bytes")
        return replies

    def get_pipeline(self, response_type: int) -> p4runtime_pb2.ForwardingPipelineConfig | None:
        """The loaded pipeline, or None when the switch has none."""
        request = p4runtime_pb2.GetForwardingPipelineConfigRequest(
            device_id=self.device_id, response_type=response_type
        )
        try:
            reply = self.stub.GetForwardingPipelineConfig(request, timeout=30)
        except grpc.RpcError as error:
            if error.code() in (grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.NOT_FOUND):
                self.log.record("GetForwardingPipelineConfig", result="no pipeline")
                return None
            raise self._rpc_error("GetForwardingPipelineConfig", error) from None
        self.log.record("GetForwardingPipelineConfig", result=f"cookie={reply.config.cookie.cookie}")
        return reply.config

    def set_pipeline(self, config: p4runtime_pb2.ForwardingPipelineConfig) -> None:
        request = p4runtime_pb2.SetForwardingPipelineConfigRequest(
            device_id=self.device_id,
            action=p4runtime_pb2.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT,
            config=config,
        )
        request.election_id.high, request.election_id.low = self.election_id.high, self.election_id.low
        try:
            self.stub.SetForwardingPipelineConfig(request, timeout=60)
        except grpc.RpcError as error:
            self.log.record("SetForwardingPipelineConfig", result=error.code().name)
            raise self._rpc_error("SetForwardingPipelineConfig", error) from None
        self.log.record(
            "SetForwardingPipelineConfig",
            [f"{len(config.p4info.tables)} tables, device config {len(config.p4_device_config)} bytes"],
            result=f"OK cookie={config.cookie.cookie}",
        )

    def send_packet(self, packet: p4runtime_pb2.PacketOut) -> None:
        if not self.stream_open:
            raise ConnectionFailed(f"{self.name}: stream to {self.address} is closed")
        self._requests.put(p4runtime_pb2.StreamMessageRequest(packet=packet))
        self.log.record("PacketOut", [f"{len(packet.payload)} bytes"])


