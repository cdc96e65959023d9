"""Python views of the native datapath's state, with the Python pipeline's API and checks.

Each class keeps the control-plane checks (and therefore the errors) of its Python parent
and stores into the C state: table entries with their actions, data and direct counters,
indexed counters, registers, meter configurations and multicast groups. The packet threads
read and update only the C side.
"""

from __future__ import annotations

import ctypes
from typing import Any

from p4switch.action_profiles import ActionProfile
from p4switch.errors import P4SwitchError
from p4switch.externs import CounterArray, MeterArray, RegisterArray, ReplicationEngine, ValueSet
from p4switch.tables import MATCH_KINDS, Table, TableEntry, TableError

_ALL = (1 << 64) - 1
REF_MEMBER, REF_GROUP = -2, -3  # GF_REF_MEMBER, GF_REF_GROUP of gf_state.h


def _u64(values: list[int] | tuple[int, ...], n: int | None = None) -> Any:
    n = max(n if n is not None else len(values), 1)
    return (ctypes.c_uint64 * n)(*values)


class NativeTable(Table):
    """A Table whose entries, default action and direct counters live in the C datapath."""

    lib: Any = None
    prog: Any = None
    tid: int = -1

    @classmethod
    def adopt(cls, table: Table, lib: Any, prog: Any, tid: int,
              profile: "NativeActionProfile | None" = None) -> "NativeTable":
        new = cls(table.name, table.keys, table.actions, table.size, table.is_const,
                  table.const_default, table.initial_default, table.meter_factory, profile or table.profile)
        new.lib, new.prog, new.tid = lib, prog, tid
        new._action_ids = {name: i for i, name in enumerate(table.actions)}
        new._push_default()
        for installed in sorted(table._entries.values(), key=lambda i: i.order):
            new._insert(installed.entry)
        new._default = table._default
        new._push_default()
        return new

    def _push_default(self) -> None:
        name, args = self._default
        self.lib.gf_table_set_default(self.prog, self.tid, self._action_ids[name], _u64(args), len(args))

    def _c_insert(self, installed: Any) -> None:
        entry: TableEntry = installed.entry
        v, m, hi = [], [], []
        plen_total = 0
        plen = 0
        for key, norm in zip(self.keys, installed.norm):
            width_mask = (1 << key.bitwidth) - 1
            if norm is None:
                kv, km, khi = 0, 0, _ALL
            elif isinstance(norm, int):
                kv, km, khi = norm, width_mask, 0
            elif norm[0] == "lpm":
                kv, km, khi, plen = norm[1], norm[3], 0, norm[2]
                plen_total += norm[2]
            elif norm[0] == "t":
                kv, km, khi = norm[1], norm[2], 0
            else:  # range
                kv, km, khi = norm[1], 0, norm[2]
            if key.bitwidth > 64:  # exact, ternary or LPM: its words, most significant first (cgen.key_words)
                for shift in range(64 * ((key.bitwidth - 1) // 64), -1, -64):
                    v.append((kv >> shift) & _ALL)
                    m.append((km >> shift) & _ALL)
                    hi.append(khi)
                continue
            v.append(kv)
            m.append(km)
            hi.append(khi)
        n = len(v)
        rank = entry.priority if self.needs_priority else plen_total
        action, args = self._c_action(entry)
        handle = self.lib.gf_table_insert(self.prog, self.tid, _u64(v, n), _u64(m, n), _u64(hi, n), rank,
                                          plen, action, _u64(args), len(args))
        if handle < 0:
            raise TableError(f"table {self.name}: the native datapath refused the entry")
        installed.handle = handle

    def _c_action(self, entry: TableEntry) -> tuple[int, tuple[int, ...]]:
        """The action code and data of an entry: an action of the table, or a reference to a
        member or group of its action profile."""
        if entry.member_id is not None or entry.group_id is not None:
            profile = self.profile
            assert isinstance(profile, NativeActionProfile)
            if entry.member_id is not None:
                return REF_MEMBER, (profile.member_slot(entry.member_id),)
            return REF_GROUP, (profile.group_slot(entry.group_id),)
        return self._action_ids[entry.action], entry.args

    def _insert(self, entry: TableEntry) -> None:
        super()._insert(entry)
        ident = self._canonical(entry)
        self._c_insert(self._entries[ident])

    def modify(self, entry: TableEntry) -> None:
        super().modify(entry)
        installed = self._installed(entry)
        action, args = self._c_action(entry)
        self.lib.gf_table_modify(self.prog, self.tid, installed.handle, action, _u64(args), len(args))

    def delete(self, entry: TableEntry) -> None:
        installed = self._entries.get(self._identity(entry.match, entry.priority))
        super().delete(entry)
        if installed is not None:
            self.lib.gf_table_delete(self.prog, self.tid, installed.handle)

    def clear(self) -> None:
        handles = [i.handle for i in self._entries.values()]
        super().clear()
        for handle in handles:
            self.lib.gf_table_delete(self.prog, self.tid, handle)

    def set_default(self, action: str, args: tuple[int, ...] = ()) -> None:
        super().set_default(action, args)
        self._push_default()

    def reset_default(self) -> None:
        super().reset_default()
        self._push_default()

    def direct_counter(self, entry: TableEntry) -> tuple[int, int]:
        installed = self._installed(entry)
        out = _u64([0, 0])
        self.lib.gf_table_counter(self.prog, self.tid, installed.handle, out, None)
        return int(out[0]), int(out[1])

    def set_direct_counter(self, entry: TableEntry, packets: int, bytes_: int) -> None:
        installed = self._installed(entry)
        self.lib.gf_table_counter(self.prog, self.tid, installed.handle, None, _u64([packets, bytes_]))


class NativeActionProfile(ActionProfile):
    """An action profile (or selector) whose members and groups live in the C datapath, by
    slot: each member or group id keeps the slot it was first given."""

    @classmethod
    def adopt(cls, profile: ActionProfile, lib: Any, prog: Any, pid: int,
              action_ids: dict[str, int]) -> "NativeActionProfile":
        new = cls(profile.name, profile.size, profile.actions, profile.selector, profile.output_width)
        new.lib, new.prog, new.pid, new.action_ids = lib, prog, pid, action_ids
        new._member_slots: dict[int, int] = {}
        new._group_slots: dict[int, int] = {}
        for member_id, (action, args) in profile.members.items():
            new.insert_member(member_id, action, args)
        for group_id, members in profile.groups.items():
            new.insert_group(group_id, members)
        return new

    def member_slot(self, member_id: int) -> int:
        return self._member_slots.setdefault(member_id, len(self._member_slots))

    def group_slot(self, group_id: int) -> int:
        return self._group_slots.setdefault(group_id, len(self._group_slots))

    def _push_member(self, member_id: int) -> None:
        found = self.members.get(member_id)
        action, args = found if found is not None else ("", ())
        code = self.action_ids[action] if found is not None else 0
        if self.lib.gf_profile_member(self.prog, self.pid, self.member_slot(member_id), code, _u64(args),
                                      len(args), 1 if found is not None else 0) != 0:
            raise TableError(f"action profile {self.name}: the native datapath refused member {member_id}")

    def _push_group(self, group_id: int) -> None:
        members = self.groups.get(group_id)
        slots = [self.member_slot(m) for m in members or []]
        n = len(slots)
        if self.lib.gf_profile_group(self.prog, self.pid, self.group_slot(group_id),
                                     (ctypes.c_uint32 * max(n, 1))(*slots), n,
                                     1 if members is not None else 0) != 0:
            raise TableError(f"action profile {self.name}: the native datapath refused group {group_id}")

    def insert_member(self, member_id: int, action: str, args: tuple[int, ...] = ()) -> None:
        super().insert_member(member_id, action, args)
        self._push_member(member_id)

    def modify_member(self, member_id: int, action: str, args: tuple[int, ...] = ()) -> None:
        super().modify_member(member_id, action, args)
        self._push_member(member_id)

    def delete_member(self, member_id: int) -> None:
        super().delete_member(member_id)
        self._push_member(member_id)

    def insert_group(self, group_id: int, member_ids: list[int]) -> None:
        super().insert_group(group_id, member_ids)
        self._push_group(group_id)

    def modify_group(self, group_id: int, member_ids: list[int]) -> None:
        super().modify_group(group_id, member_ids)
        self._push_group(group_id)

    def delete_group(self, group_id: int) -> None:
        super().delete_group(group_id)
        self._push_group(group_id)


class NativeValueSet(ValueSet):
    """A parser value set whose members live in the C datapath (two words per field)."""

    @classmethod
    def adopt(cls, value_set: ValueSet, lib: Any, prog: Any, vid: int) -> "NativeValueSet":
        new = cls(value_set.name, value_set.fields, value_set.size, list(value_set.members))
        new.lib, new.prog, new.vid = lib, prog, vid
        new._push()
        return new

    def _push(self) -> None:
        words = [w for member in self.members for item in member for w in item]
        stride = 2 * len(self.fields)
        if self.lib.gf_vset_set(self.prog, self.vid, _u64(words), stride, len(self.members)) != 0:
            raise TableError(f"value set {self.name}: the native datapath refused its members")

    def add(self, member: tuple) -> None:
        super().add(member)
        self._push()

    def clear(self) -> None:
        super().clear()
        self._push()

    def replace(self, members: list[tuple[tuple[int, int], ...]]) -> None:
        super().replace(members)
        self._push()


class NativeCounter(CounterArray):
    """An indexed counter whose cells live in the C datapath."""

    def bind(self, lib: Any, prog: Any, cid: int) -> "NativeCounter":
        self.lib, self.prog, self.cid = lib, prog, cid
        return self

    def count(self, index: int, length: int) -> None:
        if 0 <= index < self.size:
            p, b = self.read(index)
            self.write(index, p + 1, b + length)

    def read(self, index: int) -> tuple[int, int]:
        if not 0 <= index < self.size:
            super().read(index)  # raises the range error
        out = _u64([0, 0])
        self.lib.gf_counter_access(self.prog, self.cid, index, out, None)
        return int(out[0]), int(out[1])

    def write(self, index: int, packets: int, bytes_: int) -> None:
        super().write(index, packets, bytes_)  # range check
        self.lib.gf_counter_access(self.prog, self.cid, index, None, _u64([packets, bytes_]))

    def reset(self) -> None:
        for i in range(self.size):
            self.lib.gf_counter_access(self.prog, self.cid, i, None, _u64([0, 0]))


class NativeRegister(RegisterArray):
    """A register array whose cells live in the C datapath."""

    def bind(self, lib: Any, prog: Any, rid: int) -> "NativeRegister":
        self.lib, self.prog, self.rid = lib, prog, rid
        return self

    def read(self, index: int) -> int:
        super().read(index)  # range check
        out = _u64([0])
        self.lib.gf_register_access(self.prog, self.rid, index, out, None)
        return int(out[0])

    def write(self, index: int, value: int) -> None:
        super().write(index, value)
        self.lib.gf_register_access(self.prog, self.rid, index, None, _u64([value & ((1 << self.width) - 1)]))

    def reset(self) -> None:
        for i in range(self.size):
            self.lib.gf_register_access(self.prog, self.rid, i, None, _u64([0]))


class NativeMeters(MeterArray):
    """A meter array whose token buckets live in the C datapath (configs readable here)."""

    def bind(self, lib: Any, prog: Any, mid: int) -> "NativeMeters":
        self.lib, self.prog, self.mid = lib, prog, mid
        return self

    def set_config(self, index: int, cir: float, cburst: int, pir: float, pburst: int) -> None:
        super().set_config(index, cir, cburst, pir, pburst)
        cfg = (ctypes.c_double * 4)(cir, cburst, pir, pburst)
        self.lib.gf_meter_config(self.prog, self.mid, index, cfg)

    def reset_config(self, index: int) -> None:
        super().reset_config(index)
        self.lib.gf_meter_config(self.prog, self.mid, index, None)


MAX_REPLICATION_ID = 65536  # multicast group and clone session ids the C tables hold (gf_state.h)


class NativeReplication(ReplicationEngine):
    """Multicast groups and clone sessions pushed to the C datapath (ids below 65536)."""

    def bind(self, lib: Any, prog: Any) -> "NativeReplication":
        self.lib, self.prog = lib, prog
        return self

    def _push(self, fn: Any, what: str, id_: int, replicas: list[tuple[int, int]], *extra: int) -> None:
        n = len(replicas)
        ports = (ctypes.c_uint32 * max(n, 1))(*[p for p, _ in replicas])
        rids = (ctypes.c_uint32 * max(n, 1))(*[r for _, r in replicas])
        if fn(self.prog, id_, ports, rids, n, *extra) != 0:
            raise P4SwitchError(f"{what} {id_}: the native datapath holds ids below {MAX_REPLICATION_ID}")

    def set_multicast_group(self, gid: int, replicas: list[tuple[int, int]]) -> None:
        self._push(self.lib.gf_mcast_set, "multicast group", gid, replicas)
        super().set_multicast_group(gid, replicas)

    def delete_multicast_group(self, gid: int) -> None:
        super().delete_multicast_group(gid)
        if gid < MAX_REPLICATION_ID:
            self._push(self.lib.gf_mcast_set, "multicast group", gid, [])

    def set_clone_session(self, sid: int, replicas: list[tuple[int, int]], truncate_len: int = 0) -> None:
        self._push(self.lib.gf_clone_set, "clone session", sid, replicas, truncate_len)
        super().set_clone_session(sid, replicas, truncate_len)

    def delete_clone_session(self, sid: int) -> None:
        super().delete_clone_session(sid)
        if sid < MAX_REPLICATION_ID:
            self._push(self.lib.gf_clone_set, "clone session", sid, [], 0)


assert MATCH_KINDS[0] == "exact"  # the C side numbers match kinds in this order
