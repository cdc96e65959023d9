"""Write and Read of P4Runtime entities against a pipeline.

Supported: table entries (with default entries, direct counters and direct meters; entries
naming an action profile member or group), counters, direct counters, meters, direct meters,
multicast groups and clone sessions, digest configuration, action profile members and groups
(:mod:`profiles`), value sets (:mod:`value_sets`). Registers are UNIMPLEMENTED, as on BMv2,
and so are externs and one-shot action sets. The caller holds the pipeline lock.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
from google.protobuf.message import DecodeError
from p4.v1 import p4runtime_pb2

from p4switch import tables
from p4switch.errors import P4SwitchError
from p4switch.server import codec, wire
from p4switch.server.errors import RpcError, from_table_error, invalid, not_found, out_of_range, unimplemented
from p4switch.server.profiles import ProfileEntities
from p4switch.server.schema import IndexedInfo, Schema, TableInfo
from p4switch.server.validate import check_table_entry_write
from p4switch.server.value_sets import ValueSetEntities

Update = p4runtime_pb2.Update
INSERT, MODIFY, DELETE = Update.INSERT, Update.MODIFY, Update.DELETE


class EntityStore:
    """One pipeline seen through one P4Info: applies updates and answers reads."""

    def __init__(self, schema: Schema, pipeline: Any) -> None:
        self.schema = schema
        self.pipeline = pipeline
        #: Digest ids the controller enabled, with their configuration.
        self.digest_configs: dict[int, p4runtime_pb2.DigestEntry.Config] = {}
        self._codecs: dict[int, codec.TableCodec] = {}
        self.profiles = ProfileEntities(schema, pipeline)
        self.value_sets = ValueSetEntities(schema, pipeline)

    # -- look-ups -------------------------------------------------------------------------

    def _codec(self, table_id: int) -> codec.TableCodec:
        """The translation of one table (built once per table)."""
        found = self._codecs.get(table_id)
        if found is None:
            info = self.schema.table(table_id)
            table = self.pipeline.tables.get(info.name)
            if table is None:
                raise RpcError(grpc.StatusCode.INTERNAL, f"table {info.name} is in the P4Info but not in the pipeline")
            found = self._codecs[table_id] = codec.TableCodec(self.schema, info, table)
        return found

    def _table(self, table_id: int) -> tuple[TableInfo, tables.Table]:
        found = self._codec(table_id)
        return found.info, found.table

    def _array(self, kind: str, ids: dict[int, IndexedInfo], store: dict[str, Any], resource_id: int) -> tuple[IndexedInfo, Any]:
        info = self.schema.lookup(kind, ids, resource_id)
        array = store.get(info.name)
        if array is None:
            raise RpcError(grpc.StatusCode.INTERNAL, f"{kind} {info.name} is in the P4Info but not in the pipeline")
        return info, array

    # -- Write ----------------------------------------------------------------------------

    def write_serialized(self, data: bytes) -> None:
        """Apply one serialized update: table entries of the usual shape straight from the
        wire, anything else through the protobuf runtime (same checks, same statuses)."""
        update = wire.table_update(data)
        if update is None or update.type not in (INSERT, MODIFY, DELETE):
            try:
                message = p4runtime_pb2.Update.FromString(data)
            except DecodeError as exc:
                raise invalid(f"the update is not a p4.v1.Update: {exc}") from exc
            self.write(message)
            return
        try:
            self._write_table_update(update)
        except tables.TableError as exc:
            raise from_table_error(exc) from exc
        except P4SwitchError as exc:
            raise invalid(str(exc)) from exc

    def _write_table_update(self, update: wire.TableUpdate) -> None:
        found = self._codec(update.table_id)
        table = found.table
        if update.type == DELETE:
            table.delete(tables.TableEntry(found.match(update.matches), update.priority, "", ()))
            return
        if update.type == MODIFY and update.action_id is None:
            entry = self._existing(found, found.match(update.matches), update.priority)
        else:
            entry = found.entry(update.matches, update.priority, update.action_id, update.params)
        if update.type == INSERT:
            table.insert(entry)
        else:
            table.modify(entry)
            if found.info.direct_meter_id:
                table.set_direct_meter(entry, None)  # MODIFY without meter_config: default config

    def write(self, update: p4runtime_pb2.Update) -> None:
        """Apply one update; raises :class:`RpcError` with the per-update status."""
        if update.type not in (INSERT, MODIFY, DELETE):
            raise invalid("update type must be INSERT, MODIFY or DELETE")
        kind = update.entity.WhichOneof("entity")
        handler = {
            "table_entry": self._write_table_entry,
            "counter_entry": self._write_counter,
            "direct_counter_entry": self._write_direct_counter,
            "meter_entry": self._write_meter,
            "direct_meter_entry": self._write_direct_meter,
            "packet_replication_engine_entry": self._write_pre,
            "digest_entry": self._write_digest,
            "action_profile_member": self.profiles.write_member,
            "action_profile_group": self.profiles.write_group,
            "value_set_entry": self.value_sets.write,
        }.get(kind or "")
        if handler is None:
            raise unimplemented(f"writing {kind or 'an empty entity'} is not supported by this target")
        try:
            handler(update.type, getattr(update.entity, kind))  # type: ignore[arg-type]
        except tables.TableError as exc:
            raise from_table_error(exc) from exc
        except P4SwitchError as exc:
            raise invalid(str(exc)) from exc

    def _write_table_entry(self, kind: int, msg: p4runtime_pb2.TableEntry) -> None:
        found = self._codec(msg.table_id)
        info, table = found.info, found.table
        if msg.idle_timeout_ns:
            raise unimplemented(f"table {info.name}: idle timeout is not implemented by this target "
                                "(set idle_timeout_ns to 0)")
        if msg.is_default_action:
            if kind != MODIFY:
                raise invalid(f"table {info.name}: the default entry can only be modified")
            if msg.match or msg.priority:
                raise invalid(f"table {info.name}: a default entry has no match and no priority")
            if info.const_default_action_id:
                raise RpcError(grpc.StatusCode.PERMISSION_DENIED, f"table {info.name}: the default action is const")
            if msg.action.WhichOneof("type") is None:
                table.reset_default()
                return
            if msg.action.WhichOneof("type") != "action":
                raise unimplemented(f"table {info.name}: a default entry naming an action profile member "
                                    "or group is not supported (give an action)")
            name, args = codec.action_from_proto(self.schema, info, msg.action.action)
            table.set_default(name, args)
            return
        check_table_entry_write(info, kind, msg)
        if kind == DELETE:
            table.delete(tables.TableEntry(found.match_from_proto(msg.match), msg.priority, "", ()))
            return
        if kind == MODIFY and msg.action.WhichOneof("type") is None:
            entry = self._existing(found, found.match_from_proto(msg.match), msg.priority)
        else:
            entry = found.entry_from_proto(msg)
        # Everything is checked; the direct resources of an entry just written cannot fail.
        if kind == INSERT:
            table.insert(entry)
        else:
            table.modify(entry)
        if msg.HasField("counter_data"):
            table.set_direct_counter(entry, *self._direct_counted(info, msg.counter_data))
        if info.direct_meter_id and (kind == MODIFY or msg.HasField("meter_config")):
            cfg = msg.meter_config
            table.set_direct_meter(entry, (cfg.cir, cfg.cburst, cfg.pir, cfg.pburst)
                                   if msg.HasField("meter_config") else None)

    @staticmethod
    def _existing(found: codec.TableCodec, match: tuple[tables.FieldMatch | None, ...],
                  priority: int) -> tables.TableEntry:
        """The installed entry a MODIFY without an action keeps the action of."""
        entry = found.table.get(match, priority)
        if entry is None:
            raise not_found(f"table {found.info.name}: no such entry to modify")
        return entry

    def _indices(self, info: IndexedInfo, index: p4runtime_pb2.Index | None) -> range:
        if index is None:
            return range(info.size)
        if not 0 <= index.index < info.size:
            raise out_of_range(f"{info.name}: index {index.index} out of range 0..{info.size - 1}")
        return range(index.index, index.index + 1)

    def _write_counter(self, kind: int, msg: p4runtime_pb2.CounterEntry) -> None:
        info, array = self._array("counter", self.schema.counters, self.pipeline.counters, msg.counter_id)
        if kind != MODIFY:
            raise invalid(f"counter {info.name}: counters can only be modified")
        packets, nbytes = info.counted(msg.data.packet_count, msg.data.byte_count)
        for i in self._indices(info, msg.index if msg.HasField("index") else None):
            array.write(i, packets, nbytes)

    def _direct_entry(self, msg: p4runtime_pb2.TableEntry) -> tuple[TableInfo, tables.Table, tables.TableEntry]:
        found = self._codec(msg.table_id)
        info, table = found.info, found.table
        entry = table.get(found.match_from_proto(msg.match), msg.priority)
        if entry is None:
            raise not_found(f"table {info.name}: no such entry")
        return info, table, entry

    def _write_direct_counter(self, kind: int, msg: p4runtime_pb2.DirectCounterEntry) -> None:
        if kind != MODIFY:
            raise invalid("direct counters can only be modified")
        info, table, entry = self._direct_entry(msg.table_entry)
        if not info.direct_counter_id:
            raise invalid(f"table {info.name} has no direct counter")
        table.set_direct_counter(entry, *self._direct_counted(info, msg.data))

    def _direct_read(self, info: TableInfo, table: tables.Table, entry: tables.TableEntry) -> tuple[int, int]:
        """An entry's direct counter as read: only what its unit counts (as BMv2's PI server)."""
        packets, nbytes = table.direct_counter(entry)
        counter = self.schema.direct_counters.get(info.direct_counter_id)
        return counter.counted(packets, nbytes) if counter is not None else (packets, nbytes)

    def _direct_counted(self, info: TableInfo, data: p4runtime_pb2.CounterData) -> tuple[int, int]:
        """What the table's direct counter stores of written counter data (by its unit)."""
        counter = self.schema.direct_counters.get(info.direct_counter_id)
        if counter is None:
            return data.packet_count, data.byte_count
        return counter.counted(data.packet_count, data.byte_count)

    def _write_meter(self, kind: int, msg: p4runtime_pb2.MeterEntry) -> None:
        info, array = self._array("meter", self.schema.meters, self.pipeline.meters, msg.meter_id)
        if kind != MODIFY:
            raise invalid(f"meter {info.name}: meters can only be modified")
        for i in self._indices(info, msg.index if msg.HasField("index") else None):
            if msg.HasField("config"):
                cfg = msg.config
                array.set_config(i, cfg.cir, cfg.cburst, cfg.pir, cfg.pburst)
            else:
                array.reset_config(i)

    def _write_direct_meter(self, kind: int, msg: p4runtime_pb2.DirectMeterEntry) -> None:
        if kind != MODIFY:
            raise invalid("direct meters can only be modified")
        info, table, entry = self._direct_entry(msg.table_entry)
        if not info.direct_meter_id:
            raise invalid(f"table {info.name} has no direct meter")
        cfg = msg.config
        table.set_direct_meter(entry, (cfg.cir, cfg.cburst, cfg.pir, cfg.pburst))

    @staticmethod
    def _replicas(replicas: Any) -> list[tuple[int, int]]:
        out = []
        for r in replicas:
            port = r.egress_port
            if r.WhichOneof("port_kind") == "port":
                port = codec.to_int(r.port, 32, "replica port")
            out.append((port, r.instance))
        if len(set(out)) != len(out):
            raise invalid("replicas must be unique (port, instance) pairs")
        return out

    def _write_pre(self, kind: int, msg: p4runtime_pb2.PacketReplicationEngineEntry) -> None:
        pre = self.pipeline.pre
        which = msg.WhichOneof("type")
        if which == "multicast_group_entry":
            group = msg.multicast_group_entry
            gid = group.multicast_group_id
            if gid == 0:
                raise invalid("multicast group id 0 is reserved")
            self._check_presence("multicast group", gid, gid in pre.groups, kind)
            if kind == DELETE:
                pre.delete_multicast_group(gid)
            else:
                pre.set_multicast_group(gid, self._replicas(group.replicas))
        elif which == "clone_session_entry":
            session = msg.clone_session_entry
            sid = session.session_id
            if sid == 0:
                raise invalid("clone session id 0 is reserved")
            self._check_presence("clone session", sid, sid in pre.clone_sessions, kind)
            if kind == DELETE:
                pre.delete_clone_session(sid)
            else:
                pre.set_clone_session(sid, self._replicas(session.replicas), session.packet_length_bytes)
        else:
            raise invalid("empty packet replication engine entry")

    @staticmethod
    def _check_presence(what: str, ident: int, present: bool, kind: int) -> None:
        if kind == INSERT and present:
            raise RpcError(grpc.StatusCode.ALREADY_EXISTS, f"{what} {ident} already exists")
        if kind != INSERT and not present:
            raise not_found(f"{what} {ident} does not exist")

    def _write_digest(self, kind: int, msg: p4runtime_pb2.DigestEntry) -> None:
        digest = self.schema.digests.get(msg.digest_id)
        if digest is None:
            raise not_found(f"unknown digest id {msg.digest_id}")
        self._check_presence("digest configuration for", msg.digest_id, msg.digest_id in self.digest_configs, kind)
        if kind == DELETE:
            del self.digest_configs[msg.digest_id]
        else:
            self.digest_configs[msg.digest_id] = msg.config

    # -- Read -----------------------------------------------------------------------------

    def read(self, entity: p4runtime_pb2.Entity) -> Iterator[p4runtime_pb2.Entity | bytes]:
        """Every entity matching a (possibly wildcard) read request entity; table entries come
        already serialized (bytes of an ``Entity``)."""
        kind = entity.WhichOneof("entity")
        try:
            if kind == "table_entry":
                yield from self._read_table_entries(entity.table_entry)
            elif kind == "counter_entry":
                yield from self._read_counters(entity.counter_entry)
            elif kind == "direct_counter_entry":
                yield from self._read_direct_counters(entity.direct_counter_entry)
            elif kind == "meter_entry":
                yield from self._read_meters(entity.meter_entry)
            elif kind == "packet_replication_engine_entry":
                yield from self._read_pre(entity.packet_replication_engine_entry)
            elif kind == "digest_entry":
                for digest_id, config in sorted(self.digest_configs.items()):
                    if entity.digest_entry.digest_id in (0, digest_id):
                        yield p4runtime_pb2.Entity(digest_entry=p4runtime_pb2.DigestEntry(
                            digest_id=digest_id, config=config))
            elif kind == "action_profile_member":
                yield from self.profiles.read_members(entity.action_profile_member)
            elif kind == "action_profile_group":
                yield from self.profiles.read_groups(entity.action_profile_group)
            elif kind == "value_set_entry":
                yield from self.value_sets.read(entity.value_set_entry)
            else:
                raise unimplemented(f"reading {kind or 'an empty entity'} is not supported by this target")
        except tables.TableError as exc:
            raise from_table_error(exc) from exc
        except P4SwitchError as exc:
            raise invalid(str(exc)) from exc

    def _read_table_entries(self, query: p4runtime_pb2.TableEntry) -> Iterator[p4runtime_pb2.Entity | bytes]:
        table_ids = [query.table_id] if query.table_id else sorted(self.schema.tables)
        with_counters = query.HasField("counter_data")
        for table_id in table_ids:
            found = self._codec(table_id)
            info, table = found.info, found.table
            if query.is_default_action:
                name, args = table.default
                msg = p4runtime_pb2.TableEntry(table_id=info.id, is_default_action=True)
                try:
                    msg.action.action.CopyFrom(codec.action_to_proto(self.schema, name, args))
                except RpcError:
                    pass  # an action the P4Info does not list (NoAction may be left out)
                yield p4runtime_pb2.Entity(table_entry=msg)
                continue
            if query.match:
                match = found.match_from_proto(query.match)
                hit = table.get(match, query.priority)
                entries = [hit] if hit is not None else []
            else:
                entries = table.entries()
            counters = with_counters and bool(info.direct_counter_id)
            for entry in entries:
                try:
                    data = found.encode(entry, self._direct_read(info, table, entry) if counters else None)
                except tables.EntryNotFound:
                    continue  # deleted since this read began (reads take the lock batch by batch)
                yield wire.delimited(wire.ENTITY_TABLE_ENTRY, data)

    def _read_counters(self, query: p4runtime_pb2.CounterEntry) -> Iterator[bytes]:
        ids = [query.counter_id] if query.counter_id else sorted(self.schema.counters)
        for counter_id in ids:
            info, array = self._array("counter", self.schema.counters, self.pipeline.counters, counter_id)
            for i in self._indices(info, query.index if query.HasField("index") else None):
                packets, nbytes = info.counted(*array.read(i))
                yield wire.counter_entity(info.id, i, packets, nbytes)

    def _read_direct_counters(self, query: p4runtime_pb2.DirectCounterEntry) -> Iterator[p4runtime_pb2.Entity]:
        table_ids = [query.table_entry.table_id] if query.table_entry.table_id else [
            t.id for t in self.schema.tables.values() if t.direct_counter_id]
        for table_id in table_ids:
            info, table = self._table(table_id)
            if not info.direct_counter_id:
                raise invalid(f"table {info.name} has no direct counter")
            if query.table_entry.match:
                _, _, entry = self._direct_entry(query.table_entry)
                entries = [entry]
            else:
                entries = table.entries()
            for entry in entries:
                try:
                    packets, nbytes = self._direct_read(info, table, entry)
                except tables.EntryNotFound:
                    continue  # deleted since this read began
                msg = p4runtime_pb2.DirectCounterEntry()
                msg.table_entry.MergeFromString(self._codec(table_id).encode(entry, mark_const=False))
                msg.data.packet_count, msg.data.byte_count = packets, nbytes
                yield p4runtime_pb2.Entity(direct_counter_entry=msg)

    def _read_meters(self, query: p4runtime_pb2.MeterEntry) -> Iterator[p4runtime_pb2.Entity]:
        ids = [query.meter_id] if query.meter_id else sorted(self.schema.meters)
        for meter_id in ids:
            info, array = self._array("meter", self.schema.meters, self.pipeline.meters, meter_id)
            for i in self._indices(info, query.index if query.HasField("index") else None):
                msg = p4runtime_pb2.MeterEntry(meter_id=info.id)
                msg.index.index = i
                config = array.get_config(i)
                if config is not None:
                    cir, cburst, pir, pburst = config
                    msg.config.cir, msg.config.cburst = int(cir), int(cburst)
                    msg.config.pir, msg.config.pburst = int(pir), int(pburst)
                yield p4runtime_pb2.Entity(meter_entry=msg)

    def _read_pre(self, query: p4runtime_pb2.PacketReplicationEngineEntry) -> Iterator[p4runtime_pb2.Entity]:
        pre = self.pipeline.pre
        which = query.WhichOneof("type")
        if which == "multicast_group_entry":
            wanted = query.multicast_group_entry.multicast_group_id
            for gid in sorted(pre.groups):
                if wanted in (0, gid) and gid in pre.groups:
                    msg = p4runtime_pb2.PacketReplicationEngineEntry()
                    msg.multicast_group_entry.multicast_group_id = gid
                    for port, rid in pre.groups[gid]:
                        msg.multicast_group_entry.replicas.add(egress_port=port, instance=rid)
                    yield p4runtime_pb2.Entity(packet_replication_engine_entry=msg)
        elif which == "clone_session_entry":
            wanted = query.clone_session_entry.session_id
            for sid in sorted(pre.clone_sessions):
                if wanted in (0, sid) and sid in pre.clone_sessions:
                    replicas, truncate = pre.clone_sessions[sid]
                    msg = p4runtime_pb2.PacketReplicationEngineEntry()
                    msg.clone_session_entry.session_id = sid
                    msg.clone_session_entry.packet_length_bytes = truncate
                    for port, rid in replicas:
                        msg.clone_session_entry.replicas.add(egress_port=port, instance=rid)
                    yield p4runtime_pb2.Entity(packet_replication_engine_entry=msg)
        else:
            raise invalid("read of an empty packet replication engine entry")
