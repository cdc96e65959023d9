"""Differential control-plane fuzzing: the same P4Runtime writes and packets, two datapaths.

:class:`Side` is one pipeline (Python or native) behind the P4Runtime server's write path
(:class:`p4switch.server.entities.EntityStore`, serialized updates as a Write request carries
them). :class:`WriteMaker` makes seeded updates from a P4Info: table INSERT, MODIFY, DELETE
and default-action changes with key values from small pools (so writes meet earlier entries
and packets meet the entries), counter, direct counter, meter, multicast and clone session
writes, register writes (UNIMPLEMENTED over P4Runtime, so also written through the
pipeline's API), and deliberately invalid updates. :func:`run` applies them to both sides,
interleaved with packets whose key fields come from the same pools, and compares each
update's status, every packet out (port and bytes), and the final entries, defaults,
counters, meters, replication groups and registers. Used by tests/test_native_control_plane.py
and tests/benchmarks/soak_p4runtime.py.
"""

from __future__ import annotations

import random
import struct
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2

from p4switch.p4info import build_p4info
from p4switch.runtime import PipelineAssertion
from p4switch.server.entities import EntityStore
from p4switch.server.errors import RpcError
from p4switch.server.schema import Schema

Update = p4runtime_pb2.Update
INSERT, MODIFY, DELETE = Update.INSERT, Update.MODIFY, Update.DELETE
OK = 0
PORTS = (1, 2, 3, 4)
DLCP_UDP_PORT = 19600
#: Field values packets and entries share: few per field, so that they meet.
ADDRESSES = tuple(0x0A000000 | (a << 16) | (b << 8) | c for a in (0, 1) for b in (1, 2, 3) for c in (1, 2))


def _canon(value: int) -> bytes:
    return value.to_bytes(max(1, (value.bit_length() + 7) // 8), "big")


class Side:
    """One datapath behind the P4Runtime server's write path."""

    def __init__(self, pipeline: Any, p4info: p4info_pb2.P4Info) -> None:
        self.pipeline = pipeline
        self.schema = Schema.build(p4info)
        self.store = EntityStore(self.schema, pipeline)

    def write(self, data: bytes) -> tuple[int, str]:
        """Apply one serialized update: (canonical status code, message)."""
        try:
            self.store.write_serialized(data)
        except RpcError as exc:
            return exc.canonical_code, exc.message
        except Exception as exc:  # noqa: BLE001 - the server would answer INTERNAL: compared
            return 13, f"{type(exc).__name__}: {exc}"
        return OK, ""

    def send(self, frame: bytes, port: int, now_us: int) -> list[tuple[int, bytes]] | str:
        """The (port, bytes) a packet sends, or the message of a failed assertion."""
        try:
            return self.pipeline.process(frame, port, now_us)
        except PipelineAssertion as failed:
            return str(failed)

    def read(self, entity: p4runtime_pb2.Entity) -> list[bytes]:
        items = []
        for item in self.store.read(entity):
            items.append(item if isinstance(item, bytes) else item.SerializeToString())
        return sorted(items)

    def snapshot(self) -> dict[str, list[Any]]:
        """Entries (with direct counters), defaults, counters, meters, replication, registers."""
        entity = p4runtime_pb2.Entity
        shot: dict[str, list[Any]] = {}
        query = entity(table_entry=p4runtime_pb2.TableEntry())
        query.table_entry.counter_data.SetInParent()
        shot["entries"] = self.read(query)
        shot["defaults"] = [b for t in sorted(self.schema.tables) for b in self.read(
            entity(table_entry=p4runtime_pb2.TableEntry(table_id=t, is_default_action=True)))]
        if self.schema.counters:
            shot["counters"] = self.read(entity(counter_entry=p4runtime_pb2.CounterEntry()))
        if self.schema.meters:
            shot["meters"] = self.read(entity(meter_entry=p4runtime_pb2.MeterEntry()))
        for kind in ("multicast_group_entry", "clone_session_entry"):
            pre = p4runtime_pb2.PacketReplicationEngineEntry()
            getattr(pre, kind).SetInParent()
            shot[kind] = self.read(entity(packet_replication_engine_entry=pre))
        shot["registers"] = [(name, [reg.read(i) for i in range(reg.size)])
                             for name, reg in sorted(self.pipeline.registers.items())]
        return shot


@dataclass
class Installed:
    """An entry the Python side accepted: its match, priority and table."""

    table_id: int
    matches: list[p4runtime_pb2.FieldMatch]
    priority: int


#: Actions that draw random numbers: each datapath draws its own, so their outputs differ by design.
RANDOM_ACTIONS = frozenset({"DlcpIngress.spray_random", "DlcpEgress.lose_on_link"})


class WriteMaker:
    """Seeded P4Runtime updates from a P4Info; `accepted()` tells it what the reference side
    took, so later writes aim at installed entries (MODIFY, DELETE, duplicates)."""

    def __init__(self, p4info: p4info_pb2.P4Info, seed: int, exclude_actions: frozenset[str] = frozenset()) -> None:
        self.rng = random.Random(seed)
        self.p4info = p4info
        self.schema = Schema.build(p4info)
        self.tables = [t for t in p4info.tables if not t.is_const_table]
        self.actions = {a.preamble.id: a for a in p4info.actions if a.preamble.name not in exclude_actions}
        # tables with an entry action left (a table of excluded actions only gets default writes)
        self.keyed = [t for t in self.tables if t.match_fields and any(
            r.id in self.actions and r.scope != p4info_pb2.ActionRef.DEFAULT_ONLY for r in t.action_refs)]
        self.installed: dict[bytes, Installed] = {}
        self.register_names: list[tuple[str, int, int]] = []  # (name, size, width), set by run()
        self.pool: dict[str, tuple[int, ...]] = {}
        for table in self.tables:
            for mf in table.match_fields:
                self.pool.setdefault(mf.name, self._values(mf.name, mf.bitwidth))

    def _values(self, name: str, width: int) -> tuple[int, ...]:
        if "dstAddr" in name and width == 32:
            return ADDRESSES
        if width <= 3:
            return tuple(range(1 << width))
        extra = self.rng.randrange(1 << width)
        return (0, 1, 2, 3, extra)

    # -- values ---------------------------------------------------------------------------

    def _param(self, width: int) -> int:
        if width == 9:
            return self.rng.choice(PORTS)
        if width <= 3:
            return self.rng.randrange(1 << width)
        return self.rng.choice((0, 1, 2, 3, self.rng.randrange(1 << width)))

    def _match(self, table: p4info_pb2.Table) -> list[p4runtime_pb2.FieldMatch]:
        out = []
        for mf in table.match_fields:
            fm = p4runtime_pb2.FieldMatch(field_id=mf.id)
            width, value = mf.bitwidth, self.rng.choice(self.pool[mf.name])
            full = (1 << width) - 1
            kind = mf.match_type
            if kind == p4info_pb2.MatchField.EXACT:
                fm.exact.value = _canon(value)
            elif kind == p4info_pb2.MatchField.LPM:
                plen = self.rng.choice([0, width // 4, width // 2, 3 * width // 4, width])
                if plen == 0:
                    continue  # a /0 is a wildcard: omitted
                fm.lpm.value = _canon(value & full ^ (value & ((1 << (width - plen)) - 1)))
                fm.lpm.prefix_len = plen
            elif kind == p4info_pb2.MatchField.TERNARY:
                mask = self.rng.choice([0, full, full, full & ~3, 1])
                if mask == 0:
                    continue
                fm.ternary.value, fm.ternary.mask = _canon(value & mask), _canon(mask)
            elif kind == p4info_pb2.MatchField.RANGE:
                low, high = sorted((value, self.rng.choice(self.pool[mf.name])))
                if (low, high) == (0, full):
                    continue
                fm.range.low, fm.range.high = _canon(low), _canon(high)
            elif kind == p4info_pb2.MatchField.OPTIONAL:
                if self.rng.random() < 0.3:
                    continue
                fm.optional.value = _canon(value)
            out.append(fm)
        return out

    def _action(self, table: p4info_pb2.Table, default: bool = False) -> p4runtime_pb2.Action:
        refs = [r.id for r in table.action_refs if r.id in self.actions
                and (default or r.scope != p4info_pb2.ActionRef.DEFAULT_ONLY)]
        action = self.actions[self.rng.choice(refs)]
        msg = p4runtime_pb2.Action(action_id=action.preamble.id)
        for p in action.params:
            msg.params.add(param_id=p.id, value=_canon(self._param(p.bitwidth)))
        return msg

    @staticmethod
    def _needs_priority(table: p4info_pb2.Table) -> bool:
        return any(m.match_type in (p4info_pb2.MatchField.TERNARY, p4info_pb2.MatchField.RANGE,
                                    p4info_pb2.MatchField.OPTIONAL) for m in table.match_fields)

    @staticmethod
    def _ident(table_id: int, matches: Any, priority: int) -> bytes:
        key = p4runtime_pb2.TableEntry(table_id=table_id, priority=priority)
        key.match.extend(sorted(matches, key=lambda m: m.field_id))
        return key.SerializeToString(deterministic=True)

    # -- updates --------------------------------------------------------------------------

    def _table_update(self) -> Update:
        rng = self.rng
        update = Update()
        entry = update.entity.table_entry
        roll = rng.random()
        if roll < 0.06:  # the default entry: set or reset
            table = rng.choice(self.tables)
            update.type = MODIFY
            entry.table_id = table.preamble.id
            entry.is_default_action = True
            if rng.random() < 0.8:
                entry.action.action.CopyFrom(self._action(table, default=True))
            return update
        if self.installed and roll < 0.5:
            found = rng.choice(list(self.installed.values()))
            table = next(t for t in self.keyed if t.preamble.id == found.table_id)
            entry.table_id, entry.priority = found.table_id, found.priority
            entry.match.extend(found.matches)
            update.type = rng.choice((MODIFY, DELETE, DELETE, INSERT))
        else:
            table = rng.choice(self.keyed)
            entry.table_id = table.preamble.id
            entry.match.extend(self._match(table))
            if self._needs_priority(table):
                entry.priority = rng.choice((1, 2, 3, 10))
            update.type = rng.choice((INSERT, INSERT, INSERT, MODIFY, DELETE))
        if update.type != DELETE and (update.type == INSERT or rng.random() < 0.9):
            entry.action.action.CopyFrom(self._action(table))
        return update

    def _indexed_update(self) -> Update:
        rng = self.rng
        update = Update(type=MODIFY)
        pick = rng.random()
        if pick < 0.4 and self.p4info.counters:
            counter = rng.choice(list(self.p4info.counters))
            msg = update.entity.counter_entry
            msg.counter_id = counter.preamble.id
            if rng.random() < 0.9:
                msg.index.index = rng.randrange(min(counter.size, 64) + 1)
            msg.data.packet_count, msg.data.byte_count = rng.randrange(1000), rng.randrange(100000)
        elif pick < 0.6 and self.installed and self.p4info.direct_counters:
            direct = rng.choice(list(self.p4info.direct_counters))
            found = [i for i in self.installed.values() if i.table_id == direct.direct_table_id]
            msg = update.entity.direct_counter_entry
            msg.table_entry.table_id = direct.direct_table_id
            if found:
                one = rng.choice(found)
                msg.table_entry.match.extend(one.matches)
                msg.table_entry.priority = one.priority
            msg.data.packet_count, msg.data.byte_count = rng.randrange(1000), rng.randrange(100000)
        elif pick < 0.75 and self.p4info.meters:
            meter = rng.choice(list(self.p4info.meters))
            msg = update.entity.meter_entry
            msg.meter_id = meter.preamble.id
            msg.index.index = rng.randrange(meter.size + 1)
            if rng.random() < 0.7:
                cir = rng.choice((1, 10, 1000))
                msg.config.cir, msg.config.cburst = cir, rng.choice((1, 2, 10))
                msg.config.pir, msg.config.pburst = cir * rng.choice((1, 2)), rng.choice((2, 20))
        elif pick < 0.9:
            pre = update.entity.packet_replication_engine_entry
            update.type = rng.choice((INSERT, MODIFY, DELETE))
            replicas = [(rng.choice(PORTS), rng.randrange(3)) for _ in range(rng.randrange(1, 4))]
            if rng.random() < 0.5:
                group = pre.multicast_group_entry
                group.multicast_group_id = rng.randrange(1, 4)
            else:
                group = pre.clone_session_entry
                group.session_id = rng.randrange(1, 4)
            for port, rid in dict.fromkeys(replicas):
                group.replicas.add(egress_port=port, instance=rid)
        else:  # registers are not writable over P4Runtime (as on BMv2): the status is compared
            register = update.entity.register_entry
            register.register_id = self.p4info.registers[0].preamble.id if self.p4info.registers else 1
            register.index.index = 0
        return update

    def _invalid(self, update: Update) -> Update:
        """The update made wrong in one way a client gets it wrong."""
        rng = self.rng
        entry = update.entity.table_entry
        how = rng.randrange(7)
        if how == 0:
            entry.table_id = 0x02FFFFFF
        elif how == 1 and entry.match:
            fm = entry.match[rng.randrange(len(entry.match))]
            kind = fm.WhichOneof("field_match_type")
            part = getattr(fm, kind)
            if kind == "range":
                part.high = b"\xff" * 20  # wider than any field
            else:
                part.value = b"\xff" * 20
        elif how == 2 and entry.HasField("action"):
            entry.action.action.action_id = 0x01FFFFFF
        elif how == 3 and entry.HasField("action") and entry.action.action.params:
            del entry.action.action.params[-1]
        elif how == 4:
            entry.priority = 0 if entry.priority else 5
        elif how == 5 and entry.match:
            entry.match.add().CopyFrom(entry.match[0])  # a field given twice
        else:
            entry.is_const = True
        return update

    def update(self) -> Update:
        roll = self.rng.random()
        if roll < 0.14:
            return self._indexed_update()
        update = self._table_update()
        if roll > 0.92:
            return self._invalid(update)
        return update

    def accepted(self, update: Update) -> None:
        """Keep the model of installed entries (the reference side answered OK)."""
        if update.entity.WhichOneof("entity") != "table_entry":
            return
        entry = update.entity.table_entry
        if entry.is_default_action:
            return
        ident = self._ident(entry.table_id, entry.match, entry.priority)
        if update.type == INSERT:
            self.installed[ident] = Installed(entry.table_id, list(entry.match), entry.priority)
        elif update.type == DELETE:
            self.installed.pop(ident, None)

    # -- packets --------------------------------------------------------------------------

    def packet(self) -> tuple[bytes, int]:
        """An Ethernet/IPv4 frame (UDP with a DLCP header, UDP or TCP) whose key fields come
        from the pools, with a valid IPv4 checksum; sometimes ECT, sometimes TTL 1."""
        rng, pool = self.rng, self.pool
        pick = lambda name, default: rng.choice(pool.get(name, (default,)))  # noqa: E731
        dst = pick("hdr.ipv4.dstAddr", rng.choice(ADDRESSES))
        if rng.random() < 0.3:
            dst ^= rng.randrange(256)  # another host in the same /24
        dscp = pick("hdr.ipv4.dscp", rng.randrange(64)) & 63
        ecn = rng.randrange(4)
        ttl = rng.choice((64, 64, 64, 1))
        kind = rng.random()
        if kind < 0.6:
            # version 1; flags: drop_eligible in the low bit; job, worker, tensor, iteration,
            # offset, tensor_len, count, mag_class, prio_hint, seq
            dlcp = struct.pack("!BBHHHIIIHBBI", 0x10, rng.randrange(2), pick("hdr.dlcp.job_id", 1),
                               rng.randrange(4), pick("hdr.dlcp.tensor_id", 1), rng.randrange(8), 0, 1000, 4,
                               pick("hdr.dlcp.mag_class", 1), rng.randrange(8), rng.randrange(1 << 32))
            payload = dlcp + bytes(rng.randrange(0, 24))
            l4 = struct.pack("!HHHH", rng.choice((1000, 2000)), DLCP_UDP_PORT, 8 + len(payload), 0) + payload
            proto = 17
        elif kind < 0.8:
            payload = bytes(rng.randrange(4, 40))
            l4 = struct.pack("!HHHH", pick("meta.l4_src", 1000), pick("meta.l4_dst", 80), 8 + len(payload), 0)
            l4 += payload
            proto = 17
        else:
            l4 = struct.pack("!HHIIHHHH", pick("meta.l4_src", 1000), pick("meta.l4_dst", 80), 0, 0, 0x5000, 0, 0, 0)
            proto = 6
        ip = bytearray(struct.pack("!BBHHHBBHII", 0x45, dscp << 2 | ecn, 20 + len(l4), rng.randrange(65536), 0,
                                   ttl, proto, 0, 0x0A000101, dst))
        ip[10:12] = struct.pack("!H", _csum(bytes(ip)))
        eth = bytes.fromhex("000000000101") + bytes.fromhex("00000a000101") + b"\x08\x00"
        return eth + bytes(ip) + l4, rng.choice(PORTS)


def _csum(data: bytes) -> int:
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


@dataclass
class Report:
    """What a run compared and where the sides disagreed."""

    writes: int = 0
    packets: int = 0
    frames_out: int = 0
    statuses: Counter[int] = field(default_factory=Counter)
    mismatches: list[str] = field(default_factory=list)
    left_out: Counter[str] = field(default_factory=Counter)  # updates not written, by reason

    def note(self, text: str) -> None:
        if len(self.mismatches) < 1000:
            self.mismatches.append(text)


def pair(program: Any, seed: int = 1) -> tuple[Side, Side, p4info_pb2.P4Info]:
    """The Python and native pipelines of a program, each behind its own entity store."""
    from p4switch.native.pipeline import NativePipeline
    from p4switch.pipeline import Pipeline

    p4info = build_p4info(program)
    return Side(Pipeline(program, seed=seed), p4info), Side(NativePipeline(program, seed=seed), p4info), p4info


def run(python: Side, native: Side, p4info: p4info_pb2.P4Info, writes: int, seed: int,
        packets_per_write: float = 0.5, progress: Any = None,
        exclude_actions: frozenset[str] = frozenset()) -> Report:
    """`writes` seeded updates (and register writes through the API) with packets between
    them, applied to both sides; the report lists every disagreement. Actions whose outcome
    depends on `random()` (each datapath draws from its own generator) go in
    `exclude_actions`."""
    maker = WriteMaker(p4info, seed, exclude_actions)
    report = Report()
    rng = random.Random(seed ^ 0x5EED)
    registers = sorted(python.pipeline.registers)
    now = 0
    for n in range(writes):
        if registers and rng.random() < 0.03:
            name = rng.choice(registers)
            size = python.pipeline.registers[name].size
            index, value = rng.randrange(min(size, 64)), rng.choice((0, 1, 2, 5, 1 << 18))
            for side in (python, native):
                side.pipeline.registers[name].write(index, value)
        update = maker.update()
        data = update.SerializeToString()
        want, got = python.write(data), native.write(data)
        report.writes += 1
        report.statuses[want[0]] += 1
        if want != got:
            report.note(f"write {n} ({Update.Type.Name(update.type)} {update.entity.WhichOneof('entity')}): "
                        f"python {want}, native {got}")
        if want[0] == OK:
            maker.accepted(update)
        quota = packets_per_write
        while quota > 0 and (quota >= 1 or rng.random() < quota):
            quota -= 1
            now += 10
            frame, port = maker.packet()
            out_py, out_nat = python.send(frame, port, now), native.send(frame, port, now)
            report.packets += 1
            report.frames_out += len(out_py) if isinstance(out_py, list) else 0
            if out_py != out_nat:
                report.note(f"packet after write {n} in port {port} {frame.hex()}:\n  python {out_py}\n"
                            f"  native {out_nat}")
        if progress is not None and n % 1000 == 999:
            progress(n + 1, report)
    want_state, got_state = python.snapshot(), native.snapshot()
    for key in want_state:
        if want_state[key] != got_state[key]:
            report.note(f"final {key} differ")
    return report


def table_update(p4info: p4info_pb2.P4Info, kind: int, table: str, matches: dict[str, Any],
                 action: str = "", params: tuple[int, ...] = (), priority: int = 0,
                 default: bool = False) -> bytes:
    """A serialized table update by names: `matches` maps a match field's name to a value
    (exact), (value, prefix length) (LPM), ((value, mask)) (ternary) or (low, high) (range),
    by the field's kind; `params` in the action's parameter order."""
    tinfo = next(t for t in p4info.tables if t.preamble.name == table or t.preamble.alias == table)
    update = Update(type=kind)
    entry = update.entity.table_entry
    entry.table_id, entry.priority, entry.is_default_action = tinfo.preamble.id, priority, default
    for mf in tinfo.match_fields:
        if mf.name not in matches:
            continue
        value = matches[mf.name]
        fm = entry.match.add(field_id=mf.id)
        if mf.match_type == p4info_pb2.MatchField.EXACT:
            fm.exact.value = _canon(value)
        elif mf.match_type == p4info_pb2.MatchField.LPM:
            fm.lpm.value, fm.lpm.prefix_len = _canon(value[0]), value[1]
        elif mf.match_type == p4info_pb2.MatchField.TERNARY:
            fm.ternary.value, fm.ternary.mask = _canon(value[0]), _canon(value[1])
        else:
            fm.range.low, fm.range.high = _canon(value[0]), _canon(value[1])
    if action:
        ainfo = next(a for a in p4info.actions if a.preamble.name == action or a.preamble.alias == action)
        entry.action.action.action_id = ainfo.preamble.id
        for p, value in zip(ainfo.params, params, strict=True):
            entry.action.action.params.add(param_id=p.id, value=_canon(value))
    return update.SerializeToString()
