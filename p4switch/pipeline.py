"""The v1model pipeline of one loaded program, with BMv2 (simple_switch) semantics.

`ingress()` runs parser, checksum verification and ingress and returns what goes to the
traffic manager; `egress()` runs egress, checksum update and deparser for one job; `process()`
chains both with empty queues (what STF tests use). Drop port is 511.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable

from p4switch.action_profiles import ActionProfile
from p4switch.compiler.program import Compiler
from p4switch.externs import CounterArray, MeterArray, RegisterArray, ReplicationEngine, ValueSet
from p4switch.frontend.program import Program
from p4switch.runtime import (
    DROP_PORT, PKT_EGRESS_CLONE, PKT_INGRESS_CLONE, PKT_NORMAL, PKT_RECIRC, PKT_REPLICATION,
    PKT_RESUBMIT, ExitSignal, PacketContext, ParserError,
)
from p4switch.tables import Table

LOG = logging.getLogger("p4switch.pipeline")
_MAX_LOOPS = 16  # resubmit/recirculate rounds per original packet


@dataclass(frozen=True)
class QueueMeta:
    """What the traffic manager tells egress about the queue the packet went through."""

    enq_timestamp: int = 0
    enq_qdepth: int = 0
    deq_timedelta: int = 0
    deq_qdepth: int = 0
    qid: int = 0


_NO_QUEUE = QueueMeta()


@dataclass(slots=True)
class EgressJob:
    """A packet between ingress and egress; `state` is opaque to the traffic manager."""

    egress_port: int
    priority: int
    instance_type: int
    egress_rid: int
    state: Any = field(repr=False, default=None)
    length: int = 0


class Pipeline:
    """A compiled program with its tables, externs and replication engine."""

    def __init__(self, program: Program, seed: int = 0) -> None:
        self.program = program
        compiled = Compiler(program.tree, program.source.locate, seed).build()
        self._c = compiled
        self.info = compiled.info
        self.tables: dict[str, Table] = compiled.tables
        self.counters: dict[str, CounterArray] = compiled.counters
        self.meters: dict[str, MeterArray] = compiled.meters
        self.registers: dict[str, RegisterArray] = compiled.registers
        self.action_profiles: dict[str, ActionProfile] = compiled.action_profiles
        self.value_sets: dict[str, ValueSet] = compiled.value_sets
        self.pre = ReplicationEngine()
        self.digest_sink: Callable[[str, tuple[int, ...]], None] = lambda name, values: None
        self.log: Callable[[str], None] = LOG.info
        self._template = compiled.template
        std = compiled.std
        self._ingress_port = std["ingress_port"]
        self._egress_spec = std["egress_spec"]
        self._egress_port = std["egress_port"]
        self._instance_type = std["instance_type"]
        self._packet_length = std["packet_length"]
        self._enq_timestamp = std["enq_timestamp"]
        self._enq_qdepth = std["enq_qdepth"]
        self._deq_timedelta = std["deq_timedelta"]
        self._deq_qdepth = std["deq_qdepth"]
        self._ingress_ts = std["ingress_global_timestamp"]
        self._egress_ts = std["egress_global_timestamp"]
        self._mcast_grp = std["mcast_grp"]
        self._egress_rid = std["egress_rid"]
        self._parser_error = std["parser_error"]
        self._priority = std["priority"]
        self._run_verify = compiled.verify
        self._run_ingress = compiled.ingress
        self._run_egress = compiled.egress
        self._run_compute = compiled.compute
        self._run_deparser = compiled.deparser
        self._ingress_slots = (self._ingress_port, self._instance_type, self._packet_length,
                               self._ingress_ts, self._parser_error, self._priority,
                               self._mcast_grp, self._egress_spec)

    # -- helpers -------------------------------------------------------------------------------

    def _digest(self, name: str, values: tuple[int, ...]) -> None:
        self.digest_sink(name, values)

    def _fresh(self, data: bytes, now_us: int) -> list:
        s = list(self._template)
        s[0] = PacketContext(data, now_us, self._digest, self.log)
        return s

    def _run_parser(self, s: list) -> None:
        c = self._c
        try:
            c.parser(s)
        except ParserError as exc:
            if exc.error != "$reject":
                s[self._parser_error] = exc.error
        ctx = s[0]
        ctx.payload = ctx.data[ctx.pos:]

    def _preserve(self, s: list, index: int | None) -> list[tuple[int, Any]]:
        if index is None or index < 0:
            return []
        return [(slot, s[slot]) for slot in self._c.field_lists.get(index, [])]

    # -- ingress -------------------------------------------------------------------------------

    def ingress(self, packet: bytes, port: int, now_us: int = 0,
                _instance_type: int = PKT_NORMAL, _preserved: list | None = None,
                _depth: int = 0) -> list[EgressJob]:
        """Parser, checksum verification and ingress; the jobs for the traffic manager."""
        in_port, itype, length, in_ts, perror, prio, mcast, espec = self._ingress_slots
        s = self._template.copy()
        s[0] = ctx = PacketContext(packet, now_us, self._digest, self.log)
        s[in_port] = port
        s[itype] = _instance_type
        s[length] = ctx.length
        s[in_ts] = now_us
        try:
            self._c.parser(s)
        except ParserError as exc:
            if exc.error != "$reject":
                s[perror] = exc.error
        ctx.payload = packet[ctx.pos:] if ctx.pos else packet
        if _preserved:
            for slot, value in _preserved:
                s[slot] = value
        self._run_verify(s)
        try:
            self._run_ingress(s)
        except ExitSignal:
            pass
        priority = s[prio]
        if ctx.clone is None and ctx.resubmit is None and not s[mcast]:  # unicast
            spec = s[espec]
            if spec == DROP_PORT:
                return []
            return [EgressJob(spec, priority, s[itype], 0, s, ctx.length)]
        jobs: list[EgressJob] = []
        if ctx.clone is not None:
            ctype, session, index = ctx.clone
            if ctype == "I2E":
                jobs.extend(self._clones(packet, port, now_us, session, index, s))
        if ctx.resubmit is not None:
            if _depth < _MAX_LOOPS:
                jobs.extend(self.ingress(packet, port, now_us, PKT_RESUBMIT,
                                         self._preserve(s, ctx.resubmit), _depth + 1))
            return jobs
        group = s[self._mcast_grp]
        if group:
            for rport, rid in self.pre.groups.get(group, []):
                copy = list(s)
                copy[self._egress_rid] = rid
                copy[self._instance_type] = PKT_REPLICATION
                copy[0] = self._copy_ctx(ctx)
                jobs.append(EgressJob(rport, priority, PKT_REPLICATION, rid, copy, len(packet)))
            return jobs
        spec = s[self._egress_spec]
        if spec == DROP_PORT:
            return jobs
        jobs.append(EgressJob(spec, priority, s[self._instance_type], 0, s, len(packet)))
        return jobs

    def _copy_ctx(self, ctx: PacketContext) -> PacketContext:
        new = PacketContext(ctx.data, ctx.now_us, ctx.digest, ctx.log)
        new.pos = ctx.pos
        new.payload = ctx.payload
        return new

    def _clones(self, packet: bytes, port: int, now_us: int, session: int, index: int | None,
                s: list) -> list[EgressJob]:
        replicas, truncate_len = self.pre.clone_sessions.get(session, ([], 0))
        preserved = self._preserve(s, index)
        jobs = []
        for rport, rid in replicas:
            t = self._fresh(packet, now_us)
            t[self._ingress_port] = port
            t[self._packet_length] = len(packet)
            self._run_parser(t)
            for slot, value in preserved:
                t[slot] = value
            t[self._instance_type] = PKT_INGRESS_CLONE
            t[self._egress_rid] = rid
            t[self._egress_spec] = rport
            if truncate_len:
                t[0].truncate = truncate_len
            jobs.append(EgressJob(rport, s[self._priority], PKT_INGRESS_CLONE, rid, t, len(packet)))
        return jobs

    # -- egress --------------------------------------------------------------------------------

    def egress(self, job: EgressJob, queue: QueueMeta | None = None, _depth: int = 0) -> list[tuple[int, bytes]]:
        """Egress, checksum update and deparser for one job; the frames to transmit."""
        q = queue or _NO_QUEUE
        return self._egress(job, q.enq_timestamp, q.enq_qdepth, q.deq_timedelta, q.deq_qdepth,
                            _depth)

    def _egress(self, job: EgressJob, enq_timestamp: int, enq_qdepth: int, deq_timedelta: int,
                deq_qdepth: int, _depth: int = 0) -> list[tuple[int, bytes]]:
        s = job.state
        ctx: PacketContext = s[0]
        ctx.clone = None
        port = job.egress_port
        s[self._egress_port] = port
        s[self._egress_spec] = port
        s[self._enq_timestamp] = enq_timestamp & 0xFFFFFFFF
        s[self._enq_qdepth] = enq_qdepth & 0x7FFFF
        s[self._deq_timedelta] = deq_timedelta & 0xFFFFFFFF
        s[self._deq_qdepth] = deq_qdepth & 0x7FFFF
        s[self._egress_ts] = (enq_timestamp + deq_timedelta) & 0xFFFFFFFFFFFF
        try:
            self._run_egress(s)
        except ExitSignal:
            pass
        if s[self._egress_spec] == DROP_PORT:
            frame = None
        else:
            self._run_compute(s)
            ctx.out = out_parts = []
            self._run_deparser(s)
            frame = b"".join(out_parts) + ctx.payload
            if ctx.truncate:
                frame = frame[:ctx.truncate]
        clone = ctx.clone
        if clone is None and ctx.recirculate is None:  # the usual case: one frame out
            return [] if frame is None else [(port, frame)]
        out: list[tuple[int, bytes]] = []
        if clone is not None and clone[0] == "E2E" and _depth < _MAX_LOOPS:
            out.extend(self._egress_clones(s, clone[1], clone[2], _depth))
        if frame is None:
            return out
        if ctx.recirculate is not None:
            if _depth < _MAX_LOOPS:
                preserved = self._preserve(s, ctx.recirculate)
                for job2 in self.ingress(frame, s[self._ingress_port], ctx.now_us, PKT_RECIRC,
                                         preserved, _depth + 1):
                    out.extend(self.egress(job2, None, _depth + 1))
            return out
        out.append((port, frame))
        return out

    def _deparse(self, s: list) -> bytes:
        c = self._c
        ctx: PacketContext = s[0]
        c.compute(s)
        ctx.out = []
        c.deparser(s)
        frame = b"".join(ctx.out) + ctx.payload
        if ctx.truncate:
            frame = frame[:ctx.truncate]
        return frame

    def _egress_clones(self, s: list, session: int, index: int | None, depth: int) -> list[tuple[int, bytes]]:
        replicas, truncate_len = self.pre.clone_sessions.get(session, ([], 0))
        ctx: PacketContext = s[0]
        out = []
        snapshot = list(s)
        snapshot[0] = self._copy_ctx(ctx)
        frame = self._deparse(snapshot)
        preserved = self._preserve(s, index)
        for rport, rid in replicas:
            t = self._fresh(frame, ctx.now_us)
            t[self._ingress_port] = s[self._ingress_port]
            t[self._packet_length] = len(frame)
            self._run_parser(t)
            for slot, value in preserved:
                t[slot] = value
            t[self._instance_type] = PKT_EGRESS_CLONE
            t[self._egress_rid] = rid
            if truncate_len:
                t[0].truncate = truncate_len
            job = EgressJob(rport, s[self._priority], PKT_EGRESS_CLONE, rid, t, len(frame))
            out.extend(self.egress(job, None, depth + 1))
        return out

    # -- both ----------------------------------------------------------------------------------

    def process(self, packet: bytes, port: int, now_us: int = 0) -> list[tuple[int, bytes]]:
        """Ingress then egress with empty queues: the (port, frame) pairs that leave."""
        jobs = self.ingress(packet, port, now_us)
        if len(jobs) == 1:
            return self._egress(jobs[0], now_us, 0, 0, 0)
        out: list[tuple[int, bytes]] = []
        for job in jobs:
            out.extend(self._egress(job, now_us, 0, 0, 0))
        return out

    def reset_state(self) -> None:
        """Forget counters, registers and meter state (tables are kept)."""
        for counter in self.counters.values():
            counter.reset()
        for reg in self.registers.values():
            reg.reset()
