"""The P4Runtime gRPC service of one embedded switch.

Unary RPCs run on a thread pool. Each StreamChannel gets a reader thread that handles
arbitration and PacketOut, and an :class:`Outbox` through which arbitration updates, PacketIn
and digests reach the client. A stream holds a pool thread for its lifetime, so the pool has
``max_streams`` threads for streams on top of the ones for unary RPCs, and streams beyond
``max_streams`` (or that do not arbitrate in time) are ended. Pipeline state is touched only
under the target's lock, which the packet path shares; a Read takes it for one response's
worth of entities at a time.
"""

from __future__ import annotations

import collections
import functools
import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import grpc
from google.protobuf import any_pb2
from google.rpc import code_pb2, status_pb2
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

from p4switch.errors import P4SwitchError
from p4switch.server import codec, wire
from p4switch.server.arbitration import Arbiter
from p4switch.server.consistency import check_consistent
from p4switch.server.entities import EntityStore
from p4switch.server.errors import RpcError, invalid
from p4switch.server.outbox import Outbox
from p4switch.server.request_log import RequestLog, RequestLogInterceptor
from p4switch.server.schema import Schema

log = logging.getLogger("p4switch.p4runtime")

API_VERSION = "1.4.1"
READ_BATCH = 500  # entities per ReadResponse (and per hold of the pipeline lock)
MAX_READ_ENTITIES = 1000  # entities one ReadRequest may ask for
MAX_STREAMS = 16  # open StreamChannels; more are refused with RESOURCE_EXHAUSTED
UNARY_WORKERS = 8  # pool threads kept for unary RPCs
ARBITRATION_TIMEOUT = 10.0  # seconds a new stream has to send its arbitration update
MAX_ERROR_MESSAGE = 512  # characters of one failed update's message in a Write's details

PipelineFactory = Callable[[bytes], Any]
Action = p4runtime_pb2.SetForwardingPipelineConfigRequest


class Target(Protocol):
    """The data plane the service controls."""

    lock: threading.RLock

    def install(self, pipeline: Any | None) -> None:
        """Make ``pipeline`` the one packets go through (None: drop everything)."""

    def packet_out(self, frame: bytes) -> None:
        """Send a frame into the ingress pipeline as if it arrived on the CPU port."""


def default_pipeline_factory(device_config: bytes, seed: int = 0) -> Any:
    from p4switch.device_config import pipeline_from_device_config

    return pipeline_from_device_config(device_config, seed)


class _Status(collections.namedtuple("_Status", ("code", "details", "trailing_metadata")), grpc.Status):
    """A gRPC status with trailing metadata (for google.rpc.Status details)."""


@dataclass(frozen=True)
class MalformedRequest:
    """A request whose bytes do not parse: its handler answers INVALID_ARGUMENT (gRPC itself
    would answer INTERNAL for a deserializer that raises)."""

    reason: str


def _lenient(parse: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    def deserialize(data: bytes) -> Any:
        try:
            return parse(data)
        except Exception as exc:  # noqa: BLE001 - any bytes a client sends must get a status
            return MalformedRequest(f"{type(exc).__name__}: {exc}")
    return deserialize


def _parsed(request: Any) -> Any:
    if isinstance(request, MalformedRequest):
        raise invalid(f"the request does not parse: {request.reason}")
    return request


@dataclass
class ForwardingConfig:
    p4info: p4info_pb2.P4Info
    device_config: bytes
    cookie: int


class P4RuntimeServicer(p4runtime_pb2_grpc.P4RuntimeServicer):
    """P4Runtime for one device: pipeline config, Write, Read and StreamChannel."""

    def __init__(self, target: Target, device_id: int,
                 pipeline_factory: PipelineFactory = default_pipeline_factory,
                 max_streams: int = MAX_STREAMS) -> None:
        self.target = target
        self.device_id = device_id
        if pipeline_factory is default_pipeline_factory:  # random() seeded by the device id
            pipeline_factory = functools.partial(default_pipeline_factory, seed=device_id)
        self.pipeline_factory = pipeline_factory
        self.arbiter = Arbiter(device_id)
        self.config: ForwardingConfig | None = None
        self.saved: tuple[ForwardingConfig, Any] | None = None
        self.store: EntityStore | None = None
        self._stream_ids = itertools.count(1)
        self._digest_list_ids = itertools.count(1)
        self.packet_ins_dropped = 0
        self.digests_dropped = 0
        self.max_streams = max_streams
        self.arbitration_timeout = ARBITRATION_TIMEOUT
        self._open_streams = 0
        self._streams_lock = threading.Lock()

    # -- pipeline configuration -------------------------------------------------------------

    def _build(self, config: p4runtime_pb2.ForwardingPipelineConfig) -> tuple[Schema, Any]:
        if not config.p4info.tables and not config.p4info.actions:
            raise invalid("the forwarding pipeline config has an empty P4Info")
        if not config.p4_device_config:
            raise invalid("the forwarding pipeline config has no p4_device_config")
        try:
            pipeline = self.pipeline_factory(config.p4_device_config)
        except P4SwitchError as exc:
            raise invalid(f"device config rejected: {exc}") from exc
        except Exception as exc:  # noqa: BLE001 - any broken config is the client's error
            raise invalid(f"device config is not one this target can load: {type(exc).__name__}: {exc}") from exc
        schema = Schema.build(config.p4info)
        check_consistent(schema, pipeline)
        return schema, pipeline

    def load(self, p4info: p4info_pb2.P4Info, device_config: bytes, pipeline: Any, cookie: int = 0) -> None:
        """Install a pipeline directly (a program given on the command line)."""
        schema = Schema.build(p4info)
        check_consistent(schema, pipeline)
        self._commit(ForwardingConfig(p4info, device_config, cookie), schema, pipeline)

    def _commit(self, config: ForwardingConfig, schema: Schema, pipeline: Any) -> None:
        with self.target.lock:
            pipeline.digest_sink = self._on_digest
            self.store = EntityStore(schema, pipeline)
            self.config = config
            self.target.install(pipeline)
        log.info("pipeline installed (%d tables)", len(schema.tables))

    def _commit_as_primary(self, election_id: p4runtime_pb2.Uint128, config: ForwardingConfig,
                           schema: Schema, pipeline: Any) -> None:
        """Commit if the client is still primary once the (slow) build is done."""
        with self.target.lock:
            self.arbiter.check_primary(election_id, "SetForwardingPipelineConfig")
            self._commit(config, schema, pipeline)

    def SetForwardingPipelineConfig(self, request: Any, context: grpc.ServicerContext) -> Any:
        with _AbortOnRpcError(context):
            _parsed(request)
            self._check_device(request.device_id)
            if request.role:
                raise RpcError(grpc.StatusCode.UNIMPLEMENTED, "only the default role is supported")
            self.arbiter.check_primary(request.election_id, "SetForwardingPipelineConfig")
            action = request.action
            cookie = request.config.cookie.cookie if request.config.HasField("cookie") else 0
            if action == Action.COMMIT:
                if self.saved is None:
                    raise RpcError(grpc.StatusCode.FAILED_PRECONDITION, "COMMIT without a saved config (VERIFY_AND_SAVE first)")
                config, (schema, pipeline) = self.saved[0], self.saved[1]
                self.saved = None
                self._commit_as_primary(request.election_id, config, schema, pipeline)
                return p4runtime_pb2.SetForwardingPipelineConfigResponse()
            if action not in (Action.VERIFY, Action.VERIFY_AND_SAVE, Action.VERIFY_AND_COMMIT,
                              Action.RECONCILE_AND_COMMIT):
                raise invalid("unspecified SetForwardingPipelineConfig action")
            schema, pipeline = self._build(request.config)
            config = ForwardingConfig(request.config.p4info, request.config.p4_device_config, cookie)
            if action == Action.VERIFY:
                return p4runtime_pb2.SetForwardingPipelineConfigResponse()
            if action == Action.VERIFY_AND_SAVE:
                self.saved = (config, (schema, pipeline))
                return p4runtime_pb2.SetForwardingPipelineConfigResponse()
            if action == Action.RECONCILE_AND_COMMIT and self.config is not None \
                    and self.config.p4info == config.p4info \
                    and self.config.device_config == config.device_config:
                self.config.cookie = cookie  # same program: keep every entry and counter
                return p4runtime_pb2.SetForwardingPipelineConfigResponse()
            self._commit_as_primary(request.election_id, config, schema, pipeline)
            return p4runtime_pb2.SetForwardingPipelineConfigResponse()

    def GetForwardingPipelineConfig(self, request: Any, context: grpc.ServicerContext) -> Any:
        with _AbortOnRpcError(context):
            _parsed(request)
            self._check_device(request.device_id)
            response = p4runtime_pb2.GetForwardingPipelineConfigResponse()
            config = self.config
            if config is None:
                raise RpcError(grpc.StatusCode.FAILED_PRECONDITION, "no forwarding pipeline config set")
            kind = request.response_type
            Get = p4runtime_pb2.GetForwardingPipelineConfigRequest
            response.config.cookie.cookie = config.cookie
            if kind in (Get.ALL, Get.P4INFO_AND_COOKIE):
                response.config.p4info.CopyFrom(config.p4info)
            if kind in (Get.ALL, Get.DEVICE_CONFIG_AND_COOKIE):
                response.config.p4_device_config = config.device_config
            return response

    def Capabilities(self, request: Any, context: grpc.ServicerContext) -> Any:
        with _AbortOnRpcError(context):
            _parsed(request)
        return p4runtime_pb2.CapabilitiesResponse(p4runtime_api_version=API_VERSION)

    # -- Write and Read ---------------------------------------------------------------------

    def _check_device(self, device_id: int) -> None:
        if device_id != self.device_id:
            raise RpcError(grpc.StatusCode.NOT_FOUND,
                           f"device id {device_id} is not this switch (device id {self.device_id})")

    def _store(self) -> EntityStore:
        if self.store is None:
            raise RpcError(grpc.StatusCode.FAILED_PRECONDITION,
                           "no forwarding pipeline config set (SetForwardingPipelineConfig first)")
        return self.store

    def Write(self, request: Any, context: grpc.ServicerContext) -> Any:
        with _AbortOnRpcError(context):
            _parsed(request)
            self._check_device(request.device_id)
            if request.role:
                raise RpcError(grpc.StatusCode.UNIMPLEMENTED, "only the default role is supported")
            if request.atomicity != p4runtime_pb2.WriteRequest.CONTINUE_ON_ERROR:
                raise RpcError(grpc.StatusCode.UNIMPLEMENTED, "only CONTINUE_ON_ERROR atomicity is supported")
            store = self._store()
            split = isinstance(request, wire.SplitWriteRequest)
            apply = store.write_serialized if split else store.write
            failures: list[tuple[int, int, str]] = []  # (update index, canonical code, message)
            with self.target.lock:
                # Checked under the lock: a client that becomes primary, then reads, sees every
                # write of the previous primary that was let through.
                self.arbiter.check_primary(request.election_id, "Write")
                for index, update in enumerate(request.updates):
                    try:
                        apply(update)
                    except RpcError as exc:
                        failures.append((index, exc.canonical_code, exc.message))
                    except Exception as exc:  # noqa: BLE001 - one bad update must not fail the others
                        log.exception("update failed")
                        failures.append((index, code_pb2.INTERNAL, f"{type(exc).__name__}: {exc}"))
            if failures:
                _abort_with_update_errors(context, len(request.updates), failures)
            return p4runtime_pb2.WriteResponse()

    def Read(self, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        """Serialized ReadResponses of at most READ_BATCH entities each (at least one response),
        each built under the pipeline lock and sent before the next is built, so a large read
        neither holds the lock nor its whole answer in memory; it stops when the client goes."""
        with _AbortOnRpcError(context):
            _parsed(request)
            self._check_device(request.device_id)
            store = self._store()
            if len(request.entities) > MAX_READ_ENTITIES:
                raise RpcError(grpc.StatusCode.RESOURCE_EXHAUSTED,
                               f"a ReadRequest may name at most {MAX_READ_ENTITIES} entities, "
                               f"got {len(request.entities)}")
            sent = False
            for entity in request.entities:
                found = store.read(entity)
                while context.is_active():
                    with self.target.lock:
                        batch = list(itertools.islice(found, READ_BATCH))
                    if not batch:
                        break
                    sent = True
                    yield wire.read_response(batch)
            if not sent:
                yield wire.read_response([])

    # -- StreamChannel ----------------------------------------------------------------------

    def StreamChannel(self, request_iterator: Iterator[Any], context: grpc.ServicerContext) -> Iterator[Any]:
        with self._streams_lock:
            if self._open_streams >= self.max_streams:
                context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                              f"too many open streams (at most {self.max_streams})")
            self._open_streams += 1
        stream_id = next(self._stream_ids)
        responses = Outbox()
        arbitrated = threading.Event()
        context.add_callback(lambda: responses.put(None))
        reader = threading.Thread(target=self._read_stream,
                                  args=(stream_id, request_iterator, responses, arbitrated),
                                  name=f"p4rt-stream-{stream_id}", daemon=True)
        reader.start()
        deadline = time.monotonic() + self.arbitration_timeout
        try:
            while True:
                try:
                    wait = None if arbitrated.is_set() else max(0.0, deadline - time.monotonic())
                    item = responses.get(timeout=wait)
                except TimeoutError:
                    if arbitrated.is_set():
                        continue
                    context.abort(grpc.StatusCode.DEADLINE_EXCEEDED,
                                  f"no arbitration update within {self.arbitration_timeout:g} s of opening the stream")
                if item is None:
                    return
                if isinstance(item, RpcError):
                    context.abort(item.code, item.message)
                yield item
        finally:
            self.arbiter.remove(stream_id)
            with self._streams_lock:
                self._open_streams -= 1

    def _read_stream(self, stream_id: int, requests: Iterator[Any], responses: Outbox,
                     arbitrated_event: threading.Event) -> None:
        arbitrated = False
        try:
            for message in requests:
                if isinstance(message, MalformedRequest):
                    responses.put(invalid(f"a stream message does not parse: {message.reason}"))
                    return
                kind = message.WhichOneof("update")
                try:
                    if kind == "arbitration":
                        self.arbiter.arbitrate(stream_id, message.arbitration, responses.put)
                        arbitrated = True
                        arbitrated_event.set()
                    elif not arbitrated:
                        raise RpcError(grpc.StatusCode.FAILED_PRECONDITION,
                                       "the first stream message must be an arbitration update")
                    elif kind == "packet":
                        self.arbiter.check_primary_stream(stream_id, "PacketOut")
                        self.packet_out(message.packet)
                    elif kind == "digest_ack":
                        pass  # digests are sent one list at a time, never held back
                    else:
                        raise RpcError(grpc.StatusCode.UNIMPLEMENTED, f"stream message {kind} is not supported")
                except RpcError as exc:
                    if kind == "arbitration":
                        responses.put(exc)  # a bad arbitration ends the stream
                        return
                    responses.put(_stream_error(exc, message))
        except grpc.RpcError:
            pass  # the client went away
        except Exception:  # noqa: BLE001 - a broken stream must not take the server down
            log.exception("stream %d failed", stream_id)
        finally:
            responses.put(None)

    def packet_out(self, packet: p4runtime_pb2.PacketOut) -> None:
        """A PacketOut from the primary: ``packet_out`` header fields, then the payload, into
        ingress on the CPU port."""
        store = self._store()
        frame = packet.payload
        header = store.schema.packet_out
        if header is not None:
            given = {m.metadata_id: m.value for m in packet.metadata}
            values = []
            for spec in header.fields:
                raw = given.get(spec.id)
                values.append((codec.to_int(raw, spec.bitwidth, f"packet_out {spec.name}") if raw else 0,
                               spec.bitwidth))
            frame = codec.pack_fields(values) + frame
        try:
            self.target.packet_out(frame)
        except P4SwitchError as exc:
            raise RpcError(grpc.StatusCode.FAILED_PRECONDITION, str(exc)) from exc

    def packet_in(self, frame: bytes) -> None:
        """A frame the pipeline sent to the CPU port: a PacketIn for the primary client."""
        store, notify = self.store, self.arbiter.primary_notify()
        if store is None or notify is None:
            self.packet_ins_dropped += 1
            return
        message = p4runtime_pb2.StreamMessageResponse()
        header = store.schema.packet_in
        payload = frame
        if header is not None:
            nbytes = header.bitwidth // 8
            if len(frame) < nbytes:
                self.packet_ins_dropped += 1
                return
            values = codec.unpack_fields(frame, [f.bitwidth for f in header.fields])
            for spec, value in zip(header.fields, values):
                message.packet.metadata.add(metadata_id=spec.id, value=codec.to_bytes(value))
            payload = frame[nbytes:]
        message.packet.payload = payload
        if notify(message) is False:
            self.packet_ins_dropped += 1

    def _on_digest(self, name: str, values: tuple[int, ...]) -> None:
        store, notify = self.store, self.arbiter.primary_notify()
        if store is None or notify is None:
            return
        digest = store.schema.digest_by_name(name)
        if digest is None or digest.id not in store.digest_configs:
            return
        message = p4runtime_pb2.StreamMessageResponse()
        digest_list = message.digest
        digest_list.digest_id = digest.id
        digest_list.list_id = next(self._digest_list_ids)
        digest_list.timestamp = time.time_ns()
        data = digest_list.data.add()
        if digest.is_tuple:
            for value in values:
                data.tuple.members.add(bitstring=codec.to_bytes(value))
        elif len(digest.member_widths) == 1 and len(values) == 1:
            data.bitstring = codec.to_bytes(values[0])
        else:
            for value in values:
                data.struct.members.add(bitstring=codec.to_bytes(value))
        if notify(message) is False:
            self.digests_dropped += 1


def _abort_with_update_errors(context: grpc.ServicerContext, count: int,
                              failures: list[tuple[int, int, str]]) -> None:
    """End a Write with UNKNOWN and one ``p4.v1.Error`` per update in the status details.

    The details travel in trailing metadata, which gRPC clients limit (16 KB by default), so an
    update that succeeded costs only its empty ``Error`` and a failed one's message is capped
    at MAX_ERROR_MESSAGE characters; clients sending large batches raise their limit."""
    status = status_pb2.Status(
        code=code_pb2.UNKNOWN,
        message=_cap(f"{len(failures)} of {count} update(s) failed; the first, #{failures[0][0]}: {failures[0][2]}"))
    by_index = {index: (code, message) for index, code, message in failures}
    ok = any_pb2.Any()
    ok.Pack(p4runtime_pb2.Error(canonical_code=code_pb2.OK))
    for index in range(count):
        if index in by_index:
            code, message = by_index[index]
            packed = any_pb2.Any()
            packed.Pack(p4runtime_pb2.Error(canonical_code=code, message=_cap(message)))
            status.details.append(packed)
        else:
            status.details.append(ok)
    context.abort_with_status(_Status(
        grpc.StatusCode.UNKNOWN, status.message,
        (("grpc-status-details-bin", status.SerializeToString()),),
    ))


def _cap(message: str) -> str:
    return message if len(message) <= MAX_ERROR_MESSAGE else message[:MAX_ERROR_MESSAGE - 3] + "..."


def _stream_error(exc: RpcError, message: p4runtime_pb2.StreamMessageRequest) -> p4runtime_pb2.StreamMessageResponse:
    response = p4runtime_pb2.StreamMessageResponse()
    response.error.canonical_code = exc.canonical_code
    response.error.message = exc.message
    if message.HasField("packet"):
        response.error.packet_out.packet_out.CopyFrom(message.packet)
    return response


class _AbortOnRpcError:
    """Turns an :class:`RpcError` raised inside a handler into the RPC's status."""

    def __init__(self, context: grpc.ServicerContext) -> None:
        self.context = context

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> bool:
        if isinstance(exc, RpcError):
            self.context.abort(exc.code, exc.message)
        return False


def _service_handler(servicer: P4RuntimeServicer) -> grpc.GenericRpcHandler:
    """The P4Runtime service as the generated code registers it, except that Write requests
    are split into serialized updates and Read responses come serialized already."""
    pb = p4runtime_pb2
    handlers = {
        "Write": grpc.unary_unary_rpc_method_handler(
            servicer.Write, request_deserializer=_lenient(wire.parse_write_request),
            response_serializer=pb.WriteResponse.SerializeToString),
        "Read": grpc.unary_stream_rpc_method_handler(
            servicer.Read, request_deserializer=_lenient(pb.ReadRequest.FromString), response_serializer=wire.serialize),
        "SetForwardingPipelineConfig": grpc.unary_unary_rpc_method_handler(
            servicer.SetForwardingPipelineConfig,
            request_deserializer=_lenient(pb.SetForwardingPipelineConfigRequest.FromString),
            response_serializer=pb.SetForwardingPipelineConfigResponse.SerializeToString),
        "GetForwardingPipelineConfig": grpc.unary_unary_rpc_method_handler(
            servicer.GetForwardingPipelineConfig,
            request_deserializer=_lenient(pb.GetForwardingPipelineConfigRequest.FromString),
            response_serializer=pb.GetForwardingPipelineConfigResponse.SerializeToString),
        "StreamChannel": grpc.stream_stream_rpc_method_handler(
            servicer.StreamChannel, request_deserializer=_lenient(pb.StreamMessageRequest.FromString),
            response_serializer=pb.StreamMessageResponse.SerializeToString),
        "Capabilities": grpc.unary_unary_rpc_method_handler(
            servicer.Capabilities, request_deserializer=_lenient(pb.CapabilitiesRequest.FromString),
            response_serializer=pb.CapabilitiesResponse.SerializeToString),
    }
    return grpc.method_handlers_generic_handler("p4.v1.P4Runtime", handlers)


class P4RuntimeServer:
    """A gRPC server for one switch; ``port`` is the bound port (useful with ``:0``)."""

    def __init__(self, target: Target, device_id: int, address: str = "127.0.0.1:9559",
                 request_log: Path | None = None, pipeline_factory: PipelineFactory = default_pipeline_factory,
                 max_streams: int = MAX_STREAMS, unary_workers: int = UNARY_WORKERS,
                 extra_handlers: tuple[grpc.GenericRpcHandler, ...] = ()) -> None:
        self.servicer = P4RuntimeServicer(target, device_id, pipeline_factory, max_streams)
        max_workers = max_streams + unary_workers
        self.request_log = RequestLog(request_log) if request_log else None
        interceptors = [RequestLogInterceptor(self.request_log)] if self.request_log else []
        self.server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="p4rt"),
            interceptors=interceptors,
            options=[("grpc.max_receive_message_length", 256 << 20),
                     ("grpc.max_send_message_length", 256 << 20),
                     ("grpc.so_reuseport", 0)],
        )
        self.server.add_generic_rpc_handlers((_service_handler(self.servicer),))
        if extra_handlers:
            self.server.add_generic_rpc_handlers(extra_handlers)
        try:
            self.port = self.server.add_insecure_port(address)
        except RuntimeError as exc:
            raise P4SwitchError(f"cannot listen on {address}: {exc}") from exc
        if self.port == 0:
            raise P4SwitchError(f"cannot listen on {address} (address in use?)")
        host = address.rsplit(":", 1)[0]
        self.address = f"{host}:{self.port}"

    def start(self) -> None:
        self.server.start()

    def stop(self, grace: float = 1.0) -> None:
        self.server.stop(grace).wait(grace + 1)
        if self.request_log:
            self.request_log.close()
