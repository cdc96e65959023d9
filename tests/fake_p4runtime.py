"""An in-process P4Runtime server for controller tests (no switch, no root).

It keeps the pipeline set by SetForwardingPipelineConfig and the table entries,
default entries, counters and multicast groups written against it, keyed the way
P4Runtime identifies them. Tests can make it refuse writes (``refuse``) and restart it
with its state lost (``restart``), as a switch process that was killed and started again.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent import futures

import grpc
from google.protobuf import any_pb2
from google.rpc import code_pb2, status_pb2
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc


def _entry_key(te: p4runtime_pb2.TableEntry) -> tuple:
    match = tuple(sorted(m.SerializeToString(deterministic=True) for m in te.match))
    return te.table_id, match, te.priority


class FakeP4RuntimeServicer(p4runtime_pb2_grpc.P4RuntimeServicer):
    def __init__(self, device_id: int) -> None:
        self.device_id = device_id
        self.lock = threading.Lock()
        self.config: p4runtime_pb2.ForwardingPipelineConfig | None = None
        self.entries: dict[tuple, p4runtime_pb2.TableEntry] = {}
        self.defaults: dict[int, p4runtime_pb2.TableEntry] = {}
        self.groups: dict[int, p4runtime_pb2.MulticastGroupEntry] = {}
        self.counters: dict[tuple[int, int], tuple[int, int]] = {}
        self.direct_counts: dict[tuple, tuple[int, int]] = {}
        self.election_id = (0, 0)
        #: Called with each update; returning an error message refuses that update.
        self.refuse: Callable[[p4runtime_pb2.Update], str | None] = lambda update: None
        self.applied_updates = 0
        self.write_requests = 0
        self.pipeline_sets = 0

    def _sizes(self) -> dict[int, int]:
        assert self.config is not None
        return {c.preamble.id: c.size for c in self.config.p4info.counters}

    # -- pipeline -------------------------------------------------------------------------
    def SetForwardingPipelineConfig(self, request, context):
        self._check_primary(request.election_id, context)
        with self.lock:
            self.config = p4runtime_pb2.ForwardingPipelineConfig()
            self.config.CopyFrom(request.config)
            self.entries.clear()
            self.defaults.clear()
            self.counters.clear()
            self.pipeline_sets += 1
        return p4runtime_pb2.SetForwardingPipelineConfigResponse()

    def GetForwardingPipelineConfig(self, request, context):
        if self.config is None:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, "no forwarding pipeline config set")
        reply = p4runtime_pb2.GetForwardingPipelineConfigResponse()
        reply.config.cookie.CopyFrom(self.config.cookie)
        if request.response_type in (request.ALL, request.P4INFO_AND_COOKIE):
            reply.config.p4info.CopyFrom(self.config.p4info)
        if request.response_type in (request.ALL, request.DEVICE_CONFIG_AND_COOKIE):
            reply.config.p4_device_config = self.config.p4_device_config
        return reply

    # -- arbitration ----------------------------------------------------------------------
    def _check_primary(self, election_id, context) -> None:
        if (election_id.high, election_id.low) != self.election_id or self.election_id == (0, 0):
            context.abort(grpc.StatusCode.PERMISSION_DENIED, "not the primary controller")

    def StreamChannel(self, request_iterator, context) -> Iterator[p4runtime_pb2.StreamMessageResponse]:
        for request in request_iterator:
            if request.HasField("arbitration"):
                arb = request.arbitration
                ours = (arb.election_id.high, arb.election_id.low)
                with self.lock:
                    primary = ours >= self.election_id
                    if primary:
                        self.election_id = ours
                reply = p4runtime_pb2.StreamMessageResponse()
                reply.arbitration.CopyFrom(arb)
                reply.arbitration.status.code = code_pb2.OK if primary else code_pb2.ALREADY_EXISTS
                yield reply

    # -- writes ---------------------------------------------------------------------------
    def Write(self, request, context):
        self._check_primary(request.election_id, context)
        if self.config is None:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, "no forwarding pipeline config set")
        self.write_requests += 1
        errors = []
        with self.lock:
            for update in request.updates:
                message = self.refuse(update) or self._apply(update)
                errors.append(message)
        if any(errors):
            status = status_pb2.Status(code=code_pb2.UNKNOWN, message="write failure")
            for message in errors:
                error = p4runtime_pb2.Error(canonical_code=code_pb2.OK)
                if message:
                    code, _, text = message.partition(":")
                    error.canonical_code = code_pb2.Code.Value(code)
                    error.message = text.strip()
                detail = any_pb2.Any()
                detail.Pack(error)
                status.details.append(detail)
            context.abort_with_status(_RpcStatus(status))
        return p4runtime_pb2.WriteResponse()

    def _apply(self, update: p4runtime_pb2.Update) -> str | None:
        kind = update.entity.WhichOneof("entity")
        if kind == "table_entry":
            te = update.entity.table_entry
            if te.is_default_action:
                if update.type != update.MODIFY:
                    return "INVALID_ARGUMENT: default entries can only be modified"
                self.defaults[te.table_id] = te
            else:
                key = _entry_key(te)
                if update.type == update.INSERT:
                    if key in self.entries:
                        return "ALREADY_EXISTS: entry exists"
                    self.entries[key] = te
                elif key not in self.entries:
                    return "NOT_FOUND: no such entry"
                elif update.type == update.MODIFY:
                    self.entries[key] = te
                else:
                    del self.entries[key]
        elif kind == "packet_replication_engine_entry":
            group = update.entity.packet_replication_engine_entry.multicast_group_entry
            gid = group.multicast_group_id
            if update.type == update.INSERT and gid in self.groups:
                return "ALREADY_EXISTS: group exists"
            if update.type != update.INSERT and gid not in self.groups:
                return "NOT_FOUND: no such group"
            if update.type == update.DELETE:
                del self.groups[gid]
            else:
                self.groups[gid] = group
        else:
            return f"UNIMPLEMENTED: {kind}"
        self.applied_updates += 1
        return None

    # -- reads ----------------------------------------------------------------------------
    def Read(self, request, context):
        if self.config is None:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, "no forwarding pipeline config set")
        reply = p4runtime_pb2.ReadResponse()
        with self.lock:
            for wanted in request.entities:
                kind = wanted.WhichOneof("entity")
                if kind == "table_entry":
                    te = wanted.table_entry
                    if te.is_default_action:
                        found = self.defaults.get(te.table_id) or p4runtime_pb2.TableEntry(
                            table_id=te.table_id, is_default_action=True
                        )
                        reply.entities.add(table_entry=found)
                        continue
                    for entry in self.entries.values():
                        if te.table_id in (0, entry.table_id):
                            reply.entities.add(table_entry=entry)
                elif kind == "counter_entry":
                    ce = wanted.counter_entry
                    for counter_id, size in self._sizes().items():
                        if ce.counter_id not in (0, counter_id):
                            continue
                        indices = [ce.index.index] if ce.HasField("index") else range(size)
                        for index in indices:
                            packets, octets = self.counters.get((counter_id, index), (0, 0))
                            out = reply.entities.add().counter_entry
                            out.counter_id, out.index.index = counter_id, index
                            out.data.packet_count, out.data.byte_count = packets, octets
                elif kind == "direct_counter_entry":
                    table_id = wanted.direct_counter_entry.table_entry.table_id
                    for key, entry in self.entries.items():
                        if entry.table_id == table_id:
                            packets, octets = self.direct_counts.get(key, (0, 0))
                            out = reply.entities.add().direct_counter_entry
                            out.table_entry.CopyFrom(entry)
                            out.data.packet_count, out.data.byte_count = packets, octets
                elif kind == "packet_replication_engine_entry":
                    for group in self.groups.values():
                        reply.entities.add().packet_replication_engine_entry.multicast_group_entry.CopyFrom(group)
        yield reply

    def Capabilities(self, request, context):
        return p4runtime_pb2.CapabilitiesResponse(p4runtime_api_version="1.4.1")


class _RpcStatus(grpc.Status):
    def __init__(self, status: status_pb2.Status) -> None:
        self.code = grpc.StatusCode.UNKNOWN
        self.details = status.message
        self.trailing_metadata = (("grpc-status-details-bin", status.SerializeToString()),)


class FakeSwitch:
    """A fake P4Runtime server on 127.0.0.1 (a free port, kept across restarts)."""

    def __init__(self, device_id: int = 1, port: int = 0) -> None:
        self.device_id = device_id
        self.port = port
        self.servicer = FakeP4RuntimeServicer(device_id)
        #: What the embedded target's ``p4switch.Control/Stats`` answers; None: no such service
        #: (as on BMv2).
        self.control_stats: dict | None = None
        self._server: grpc.Server | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> FakeSwitch:
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        p4runtime_pb2_grpc.add_P4RuntimeServicer_to_server(self.servicer, self._server)
        self._server.add_generic_rpc_handlers([self._control_handler()])
        self.port = self._server.add_insecure_port(f"127.0.0.1:{self.port}")
        if self.port == 0:
            raise RuntimeError("fake P4Runtime server could not bind a port")
        self._server.start()
        return self

    def _control_handler(self) -> grpc.GenericRpcHandler:
        import json

        def stats(request: bytes, context: grpc.ServicerContext) -> bytes:
            if self.control_stats is None:
                context.abort(grpc.StatusCode.UNIMPLEMENTED, "no control service")
            return json.dumps(self.control_stats).encode()

        handler = grpc.unary_unary_rpc_method_handler(stats)
        return grpc.method_handlers_generic_handler("p4switch.Control", {"Stats": handler})

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(grace=None).wait(5)
            self._server = None

    def restart(self) -> None:
        """Stop, lose every state (pipeline, entries, arbitration), start on the same port."""
        self.stop()
        refuse = self.servicer.refuse
        self.servicer = FakeP4RuntimeServicer(self.device_id)
        self.servicer.refuse = refuse
        self.start()

    def entries(self) -> list[p4runtime_pb2.TableEntry]:
        return list(self.servicer.entries.values())

    def __enter__(self) -> FakeSwitch:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
