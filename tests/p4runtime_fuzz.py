"""Seeded fuzzing of a P4Runtime server and of a switch's packet path.

:class:`RpcFuzzer` sends RPCs made from a P4Info, each often wrong in one of the ways a client
gets it wrong (and sometimes plain garbage bytes): Writes, Reads, pipeline configs, streams
with arbitration and PacketOut. The server must answer each with a status, never INTERNAL,
and stay responsive. :func:`malformed_frames` makes frames for the packet path: random
bytes, and Ethernet/IPv4/UDP/DLCP frames truncated or with random fields. Used by
``tests/test_p4runtime_fuzz.py`` (bounded) and ``tests/benchmarks/soak_p4runtime.py``.
"""

from __future__ import annotations

import random
import struct
import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

import grpc
from google.rpc import code_pb2, status_pb2
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

DLCP_PORT = 19600  # the UDP port p4src/dlcp.p4 parses the DLCP header behind
PRIMARY_ID = 1 << 127  # the fuzzer's own primary: higher than any id it fuzzes with
_MATCH_KINDS = ("exact", "lpm", "ternary", "range", "optional")
_KIND_OF = {p4info_pb2.MatchField.EXACT: "exact", p4info_pb2.MatchField.LPM: "lpm",
            p4info_pb2.MatchField.TERNARY: "ternary", p4info_pb2.MatchField.RANGE: "range",
            p4info_pb2.MatchField.OPTIONAL: "optional"}


class FuzzFailure(AssertionError):
    """The server answered in a way it never should (INTERNAL, or no status at all)."""


def _identity(data: bytes) -> bytes:
    return data


class RpcFuzzer:
    """Random RPCs against one device; ``outcomes`` counts the status codes seen."""

    def __init__(self, channel: grpc.Channel, device_id: int, config: p4runtime_pb2.ForwardingPipelineConfig,
                 seed: int) -> None:
        self.rng = random.Random(seed)
        self.channel = channel
        self.stub = p4runtime_pb2_grpc.P4RuntimeStub(channel)
        self.device_id = device_id
        self.config = config
        self.p4info = config.p4info
        self.outcomes: Counter[str] = Counter()
        #: Called after a pipeline config was committed (its state starts empty).
        self.after_commit: Any = None
        self._raw = {name: channel.unary_unary(f"/p4.v1.P4Runtime/{name}", request_serializer=_identity,
                                               response_deserializer=_identity)
                     for name in ("Write", "SetForwardingPipelineConfig")}
        self._raw_read = channel.unary_stream("/p4.v1.P4Runtime/Read", request_serializer=_identity,
                                              response_deserializer=_identity)

    # -- values -----------------------------------------------------------------------------
    def value(self, width: int) -> bytes:
        rng = self.rng
        roll = rng.random()
        if roll < 0.04:
            return b""
        if roll < 0.08:
            return (1 << width).to_bytes((width + 8) // 8, "big")  # one bit too wide
        if roll < 0.2:
            return rng.choice((0, 1, (1 << width) - 1)).to_bytes(max(1, (width + 7) // 8), "big")
        return rng.getrandbits(width).to_bytes(max(1, (width + 7) // 8) + (roll < 0.25), "big")

    def pick_id(self, ids: list[int]) -> int:
        return self.rng.choice(ids) if ids and self.rng.random() > 0.05 else self.rng.choice((0, 1, 99, 0x7FFFFFFF))

    def field_match(self, fm: p4runtime_pb2.FieldMatch, field_id: int, kind: str, width: int) -> None:
        rng = self.rng
        fm.field_id = field_id if rng.random() > 0.03 else rng.randrange(1 << 10)
        kind = kind if rng.random() > 0.05 else rng.choice(_MATCH_KINDS)
        if kind == "exact":
            fm.exact.value = self.value(width)
        elif kind == "lpm":
            fm.lpm.value = self.value(width)
            fm.lpm.prefix_len = rng.choice((0, 1, width // 2, width, width + 1, -1))
        elif kind == "ternary":
            fm.ternary.value, fm.ternary.mask = self.value(width), self.value(width)
        elif kind == "range":
            fm.range.low, fm.range.high = self.value(width), self.value(width)
        else:
            fm.optional.value = self.value(width)

    # -- entities ---------------------------------------------------------------------------
    def table_entry(self, te: p4runtime_pb2.TableEntry, for_read: bool = False) -> None:
        rng = self.rng
        tables = list(self.p4info.tables)
        table = rng.choice(tables) if tables else None
        te.table_id = table.preamble.id if table and rng.random() > 0.05 else self.pick_id([])
        if for_read and rng.random() < 0.4:
            te.table_id = 0 if rng.random() < 0.5 else te.table_id
            return
        if table is None:
            return
        for m in table.match_fields:
            if rng.random() < 0.2 and _KIND_OF.get(m.match_type) != "exact":
                continue
            self.field_match(te.match.add(), m.id, _KIND_OF.get(m.match_type, "exact"), m.bitwidth)
        if rng.random() < 0.85:
            refs = [r.id for r in table.action_refs]
            action_id = self.pick_id(refs)
            te.action.action.action_id = action_id
            action = next((a for a in self.p4info.actions if a.preamble.id == action_id), None)
            for p in action.params if action else ():
                if rng.random() > 0.05:
                    te.action.action.params.add(param_id=p.id if rng.random() > 0.03 else 77,
                                                value=self.value(p.bitwidth))
        elif rng.random() < 0.3:
            te.action.action_profile_member_id = rng.randrange(4)
        te.priority = rng.choice((0, 0, 1, 2, 10, -1))
        extra = rng.random()
        if extra < 0.04:
            te.counter_data.packet_count = rng.randrange(100)
        elif extra < 0.07:
            te.meter_config.cir = rng.randrange(100)
        elif extra < 0.09:
            te.is_const = True
        elif extra < 0.11:
            te.idle_timeout_ns = 5
        elif extra < 0.14:
            te.is_default_action = True
            if rng.random() < 0.7:
                te.ClearField("match")
                te.priority = 0

    def entity(self, entity: p4runtime_pb2.Entity, for_read: bool = False) -> None:
        rng = self.rng
        kind = rng.choices(("table", "counter", "direct_counter", "meter", "pre", "digest", "register", "other"),
                           (60, 8, 5, 6, 8, 4, 2, 2))[0]
        info = self.p4info
        if kind == "table":
            self.table_entry(entity.table_entry, for_read)
        elif kind == "counter":
            ce = entity.counter_entry
            ce.counter_id = self.pick_id([c.preamble.id for c in info.counters]) if rng.random() > 0.2 or not for_read else 0
            if rng.random() < 0.7:
                ce.index.index = rng.choice((0, 1, 5, 1 << 20, -1))
            ce.data.packet_count, ce.data.byte_count = rng.randrange(1000), rng.randrange(1 << 40)
        elif kind == "direct_counter":
            self.table_entry(entity.direct_counter_entry.table_entry, for_read)
            entity.direct_counter_entry.data.packet_count = rng.randrange(10)
        elif kind == "meter":
            me = entity.meter_entry
            me.meter_id = self.pick_id([m.preamble.id for m in info.meters])
            if rng.random() < 0.7:
                me.index.index = rng.choice((0, 1, 3, 1 << 20))
            if rng.random() < 0.7:
                me.config.cir, me.config.cburst = rng.randrange(-5, 1000), rng.randrange(1000)
                me.config.pir, me.config.pburst = rng.randrange(1000), rng.randrange(1000)
        elif kind == "pre":
            pre = entity.packet_replication_engine_entry
            if rng.random() < 0.6:
                group = pre.multicast_group_entry
                group.multicast_group_id = rng.choice((0, 1, 2, 7))
                for _ in range(rng.randrange(4)):
                    group.replicas.add(egress_port=rng.randrange(8), instance=rng.randrange(3))
            elif rng.random() < 0.8:
                session = pre.clone_session_entry
                session.session_id = rng.choice((0, 1, 5))
                session.packet_length_bytes = rng.choice((0, 64))
                for _ in range(rng.randrange(3)):
                    session.replicas.add(egress_port=rng.randrange(8), instance=rng.randrange(2))
        elif kind == "digest":
            entity.digest_entry.digest_id = self.pick_id([d.preamble.id for d in info.digests])
            entity.digest_entry.config.max_list_size = rng.randrange(4)
        elif kind == "register":
            entity.register_entry.register_id = self.pick_id([r.preamble.id for r in info.registers])
        # "other": an empty entity

    # -- RPCs -------------------------------------------------------------------------------
    def _call(self, what: str, function: Any, *args: Any) -> None:
        try:
            # A hang, not a slow answer: a wildcard read of the 32,264 counter cells costs 1 s of
            # CPU and took 7-27 s at a load of 15 on 2 cores, past the 30 s this bound once was.
            result = function(*args, timeout=120)
            if what == "Read":
                for _ in result:
                    pass
        except grpc.RpcError as exc:
            code = exc.code()
            self.outcomes[f"{what} {code.name}"] += 1
            if code in (grpc.StatusCode.INTERNAL, grpc.StatusCode.DEADLINE_EXCEEDED):
                raise FuzzFailure(f"{what}: {code.name} {exc.details()}") from None
            self._check_details(what, exc)
            return
        self.outcomes[f"{what} OK"] += 1

    def _check_details(self, what: str, exc: grpc.RpcError) -> None:
        for key, value in exc.trailing_metadata() or ():
            if key != "grpc-status-details-bin":
                continue
            for detail in status_pb2.Status.FromString(value).details:
                error = p4runtime_pb2.Error()
                detail.Unpack(error)
                if error.canonical_code == code_pb2.INTERNAL:
                    raise FuzzFailure(f"{what}: an update failed with INTERNAL: {error.message}")

    def write(self) -> None:
        rng = self.rng
        request = p4runtime_pb2.WriteRequest(device_id=self.device_id)
        if rng.random() < 0.03:
            request.device_id = rng.randrange(1 << 20)
        election = PRIMARY_ID if rng.random() > 0.05 else rng.randrange(1 << 64)
        request.election_id.high, request.election_id.low = election >> 64, election & ((1 << 64) - 1)
        if rng.random() < 0.02:
            request.atomicity = rng.choice((1, 2))
        if rng.random() < 0.01:
            request.role = "someone"
        for _ in range(rng.choice((1, 1, 2, 3, 8))):
            update = request.updates.add()
            update.type = rng.choices((1, 2, 3, 0), (50, 20, 25, 5))[0]
            self.entity(update.entity)
        if rng.random() < 0.08:
            self._call("Write", self._raw["Write"], self.mangle(request.SerializeToString()))
        else:
            self._call("Write", self.stub.Write, request)

    def read(self) -> None:
        rng = self.rng
        request = p4runtime_pb2.ReadRequest(device_id=self.device_id if rng.random() > 0.03 else 9)
        for _ in range(rng.choice((1, 1, 2, 4))):
            self.entity(request.entities.add(), for_read=True)
        if rng.random() < 0.05:
            self._call("Read", self._raw_read, self.mangle(request.SerializeToString()))
        else:
            self._call("Read", self.stub.Read, request)

    def pipeline(self) -> None:
        rng = self.rng
        request = p4runtime_pb2.SetForwardingPipelineConfigRequest(device_id=self.device_id)
        request.election_id.high, request.election_id.low = PRIMARY_ID >> 64, 0
        request.action = rng.choice((1, 1, 1, 2, 0, 4, 3))
        config = request.config
        config.CopyFrom(self.config)
        if rng.random() < 0.3:
            config.p4_device_config = self.mangle(config.p4_device_config)
        else:
            self.mutate_p4info(config.p4info)
        if request.action == 3 and rng.random() < 0.9:
            request.action = 1  # COMMIT of a mutated config is refused anyway; keep the pipeline
        before = self.outcomes["SetForwardingPipelineConfig OK"]
        if rng.random() < 0.1:
            self._call("SetForwardingPipelineConfig", self._raw["SetForwardingPipelineConfig"],
                       self.mangle(request.SerializeToString()))
        else:
            self._call("SetForwardingPipelineConfig", self.stub.SetForwardingPipelineConfig, request)
        if self.outcomes["SetForwardingPipelineConfig OK"] != before and self.after_commit is not None:
            self.after_commit()

    def mutate_p4info(self, info: p4info_pb2.P4Info) -> None:
        rng = self.rng
        choice = rng.randrange(7)
        if choice == 0 and info.tables:
            table = rng.choice(info.tables)
            if table.match_fields:
                rng.choice(table.match_fields).bitwidth += rng.choice((-1, 1, 8))
        elif choice == 1 and info.tables:
            table = rng.choice(info.tables)
            if table.match_fields:
                rng.choice(table.match_fields).match_type = rng.randrange(6)
        elif choice == 2 and info.actions:
            action = rng.choice(info.actions)
            if action.params:
                rng.choice(action.params).bitwidth = rng.randrange(1, 64)
        elif choice == 3 and info.tables:
            rng.choice(info.tables).action_refs.add(id=rng.randrange(1 << 30))
        elif choice == 4 and info.counters:
            info.counters[0].preamble.id = info.tables[0].preamble.id if info.tables else 0
        elif choice == 5 and info.counters:
            rng.choice(info.counters).size = rng.randrange(1 << 20)
        elif info.tables:
            del info.tables[rng.randrange(len(info.tables))]

    def stream(self) -> None:
        rng = self.rng
        messages: list[p4runtime_pb2.StreamMessageRequest] = []
        first = p4runtime_pb2.StreamMessageRequest()
        arb = first.arbitration
        arb.device_id = self.device_id if rng.random() > 0.1 else rng.randrange(1 << 16)
        if rng.random() > 0.1:
            election = rng.choice((0, 1, rng.randrange(1, 1 << 100), PRIMARY_ID))
            arb.election_id.high, arb.election_id.low = election >> 64, election & ((1 << 64) - 1)
        if rng.random() < 0.05:
            arb.role.name = "r"
        if rng.random() > 0.05:
            messages.append(first)
        for _ in range(rng.randrange(4)):
            message = p4runtime_pb2.StreamMessageRequest()
            roll = rng.random()
            if roll < 0.6:
                message.packet.payload = rng.randbytes(rng.randrange(80))
                for _ in range(rng.randrange(3)):
                    message.packet.metadata.add(metadata_id=rng.randrange(4), value=self.value(9))
            elif roll < 0.8:
                message.arbitration.CopyFrom(arb)
                message.arbitration.device_id = rng.choice((arb.device_id, arb.device_id + 1))
            elif roll < 0.9:
                message.digest_ack.digest_id = rng.randrange(5)
            messages.append(message)
        try:
            for reply in self.stub.StreamChannel(iter(messages), timeout=5):
                kind = reply.WhichOneof("update")
                self.outcomes[f"StreamChannel {kind}"] += 1
        except grpc.RpcError as exc:
            code = exc.code()
            self.outcomes[f"StreamChannel {code.name}"] += 1
            if code == grpc.StatusCode.INTERNAL:
                raise FuzzFailure(f"StreamChannel: INTERNAL {exc.details()}") from None

    def other(self) -> None:
        rng = self.rng
        if rng.random() < 0.5:
            self._call("Capabilities", self.stub.Capabilities, p4runtime_pb2.CapabilitiesRequest())
        else:
            request = p4runtime_pb2.GetForwardingPipelineConfigRequest(
                device_id=self.device_id if rng.random() > 0.1 else 3, response_type=rng.randrange(5))
            self._call("GetForwardingPipelineConfig", self.stub.GetForwardingPipelineConfig, request)

    def mangle(self, data: bytes) -> bytes:
        """Bytes a broken client might send: flipped, truncated, spliced or random."""
        rng = self.rng
        data = bytearray(data)
        roll = rng.random()
        if roll < 0.3 and data:
            for _ in range(rng.randrange(1, 4)):
                data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        elif roll < 0.55 and data:
            del data[rng.randrange(len(data)):]
        elif roll < 0.75 and data:
            at = rng.randrange(len(data))
            data[at:at] = rng.randbytes(rng.randrange(1, 12))
        else:
            data = bytearray(rng.randbytes(rng.randrange(64)))
        return bytes(data)

    def one(self) -> None:
        """One fuzzed RPC (a stream counts as one)."""
        kind = self.rng.choices(("write", "read", "pipeline", "stream", "other"), (55, 25, 0.4, 12, 7.6))[0]
        getattr(self, kind)()


class NullPort:
    """A switch port that counts what it is given and keeps nothing."""

    def __init__(self, number: int) -> None:
        self.number, self.name, self.sent = number, f"null{number}", 0

    def send(self, frame: bytes) -> None:
        self.sent += 1

    def close(self) -> None:
        pass


class FuzzBed:
    """The embedded switch's packet path running p4src/dlcp.p4 behind its P4Runtime server (on
    loopback, in this process), and a primary client that sends PacketOut but never reads."""

    DEVICE_ID = 1
    CPU_PORT = 510

    def __init__(self) -> None:
        from pathlib import Path

        from controller.transport import CHANNEL_OPTIONS
        from p4switch.device_config import device_config_bytes
        from p4switch.frontend import load_program
        from p4switch.p4info import build_p4info
        from p4switch.pipeline import Pipeline
        from p4switch.server import P4RuntimeServer
        from p4switch.switch import Datapath
        from p4switch.traffic_manager import TrafficManager

        program = load_program(Path(__file__).resolve().parent.parent / "p4src" / "dlcp.p4")
        self.config = p4runtime_pb2.ForwardingPipelineConfig(p4info=build_p4info(program),
                                                             p4_device_config=device_config_bytes(program))
        device_config = self.config.p4_device_config

        def factory(data: bytes) -> Any:  # the program compiled once; a fresh pipeline each time
            if data != device_config:
                from p4switch.device_config import pipeline_from_device_config
                return pipeline_from_device_config(data)
            return Pipeline(program)

        self.datapath = Datapath(TrafficManager(priority_queues=8), cpu_port=self.CPU_PORT, immediate=True)
        for number in (1, 2, 3, 4):
            self.datapath.add_port(NullPort(number))  # type: ignore[arg-type]
        self.server = P4RuntimeServer(self.datapath, self.DEVICE_ID, "127.0.0.1:0", pipeline_factory=factory)
        self.datapath.packet_in = self.server.servicer.packet_in
        self.server.start()
        self.channel = grpc.insecure_channel(self.server.address, options=CHANNEL_OPTIONS)
        self.stub = p4runtime_pb2_grpc.P4RuntimeStub(self.channel)
        self._outgoing: list[p4runtime_pb2.StreamMessageRequest] = []
        self._ready = threading.Condition()
        self._closed = False
        self._primary = self.stub.StreamChannel(self._requests())
        reply = next(self._primary)
        if reply.arbitration.status.code != code_pb2.OK:
            raise FuzzFailure(f"the fuzzer's client did not become primary: {reply}")
        request = p4runtime_pb2.SetForwardingPipelineConfigRequest(
            device_id=self.DEVICE_ID, action=p4runtime_pb2.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT,
            config=self.config)
        request.election_id.high = PRIMARY_ID >> 64
        self.stub.SetForwardingPipelineConfig(request)
        self.install_routes()

    def install_routes(self) -> None:
        """10.0.<port>.0/24 out of ports 1..4 (and 10.0.0.0/8 to the CPU port), so frames go
        through ingress, the traffic manager and egress, not only the parser."""
        from controller.entities import TableEntry, Update
        from controller.schema import P4Schema

        schema = P4Schema(self.config.p4info)
        routes = [TableEntry.build(schema, "ipv4_lpm", {"hdr.ipv4.dstAddr": f"10.0.{port}.0/24"}, "set_nhop",
                                   {"port": port, "smac": 0x0A, "dmac": 0x0B}) for port in (1, 2, 3)]
        routes.append(TableEntry.build(schema, "ipv4_lpm", {"hdr.ipv4.dstAddr": "10.0.0.0/8"}, "set_nhop",
                                       {"port": self.CPU_PORT, "smac": 0x0A, "dmac": 0x0B}))
        request = p4runtime_pb2.WriteRequest(device_id=self.DEVICE_ID)
        request.election_id.high = PRIMARY_ID >> 64
        for route in routes:
            Update("INSERT", route).encode_into(request.updates.add(), schema)
        try:
            self.stub.Write(request)
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.UNKNOWN:  # UNKNOWN: some routes were there already
                raise

    def _requests(self) -> Iterator[p4runtime_pb2.StreamMessageRequest]:
        message = p4runtime_pb2.StreamMessageRequest()
        message.arbitration.device_id = self.DEVICE_ID
        message.arbitration.election_id.high = PRIMARY_ID >> 64
        yield message
        while True:
            with self._ready:
                self._ready.wait_for(lambda: self._outgoing or self._closed)
                if self._closed:
                    return
                batch, self._outgoing = self._outgoing, []
            yield from batch

    def frame(self, frame: bytes, port: int) -> None:
        """A frame arriving on a port (or, for the CPU port, a PacketOut from the primary)."""
        if port == self.CPU_PORT:
            message = p4runtime_pb2.StreamMessageRequest()
            message.packet.payload = frame
            with self._ready:
                self._outgoing.append(message)
                self._ready.notify()
            return
        self.datapath.receive(frame, port)

    @property
    def pipeline_errors(self) -> int:
        return self.datapath.stats["pipeline_error"]

    def check_alive(self) -> None:
        """The server answers, and a new client can still arbitrate (as a backup)."""
        self.stub.Capabilities(p4runtime_pb2.CapabilitiesRequest(), timeout=60)  # bounds for a loaded machine
        message = p4runtime_pb2.StreamMessageRequest()
        message.arbitration.device_id = self.DEVICE_ID
        message.arbitration.election_id.low = 12345
        call = self.stub.StreamChannel(iter([message]), timeout=60)
        reply = next(call)
        call.cancel()
        if reply.arbitration.status.code != code_pb2.ALREADY_EXISTS:
            raise FuzzFailure(f"a new backup client got {reply}")

    def close(self) -> None:
        with self._ready:
            self._closed = True
            self._ready.notify()
        self._primary.cancel()
        self.channel.close()
        self.server.stop(0)

    def __enter__(self) -> FuzzBed:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _checksum(header: bytes) -> int:
    total = sum(struct.unpack(f">{len(header) // 2}H", header))
    while total > 0xFFFF:
        total = (total & 0xFFFF) + (total >> 16)
    return (~total) & 0xFFFF


def malformed_frames(rng: random.Random) -> Iterator[tuple[bytes, int]]:
    """Endless (frame, ingress port) pairs: random bytes, and real headers truncated or with
    random fields (Ethernet, IPv4 with bad lengths and checksums, UDP, the DLCP header)."""
    while True:
        roll = rng.random()
        port = rng.choice((1, 2, 3, 4, 5, 0, 511))
        if roll < 0.3:
            yield rng.randbytes(rng.randrange(0, 100)), port
            continue
        eth = rng.randbytes(12) + rng.choice((b"\x08\x00", b"\x08\x00", b"\x86\xdd", b"\x81\x00", rng.randbytes(2)))
        ihl = rng.choice((5, 5, 5, 0, 4, 6, 15))
        total = rng.choice((20, 28, 60, 0, 65535, rng.randrange(1 << 16)))
        fields = [(4 << 4) | ihl if rng.random() > 0.05 else rng.randrange(256),
                  rng.randrange(256), total, rng.randrange(1 << 16),
                  rng.choice((0, 0, 0x4000, rng.randrange(1 << 16))),
                  rng.choice((64, 1, 0, rng.randrange(256))), rng.choice((17, 17, 6, rng.randrange(256))), 0,
                  rng.randbytes(4), bytes((10, 0, rng.randrange(4), rng.randrange(4)))]
        ip = struct.pack(">BBHHHBBH4s4s", *fields)
        if rng.random() < 0.5:  # a valid checksum: the frame gets past the parser's verify
            fields[7] = _checksum(ip)
        else:
            fields[7] = rng.randrange(1 << 16)
        ip = struct.pack(">BBHHHBBH4s4s", *fields)
        udp = struct.pack(">HHHH", rng.randrange(1 << 16), rng.choice((DLCP_PORT, DLCP_PORT, 4791, rng.randrange(1 << 16))),
                          rng.randrange(1 << 16), rng.randrange(1 << 16))
        body = rng.randbytes(rng.randrange(0, 64))
        frame = eth + ip + udp + body
        if rng.random() < 0.6:
            frame = frame[:rng.randrange(len(frame) + 1)]
        yield frame, port
