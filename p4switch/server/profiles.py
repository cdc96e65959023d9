"""Action profile members and groups over P4Runtime (``ActionProfileMember``,
``ActionProfileGroup``), against the pipeline's :class:`~p4switch.action_profiles.ActionProfile`.

A member in use by a group or a table entry, and a group in use by a table entry, cannot be
deleted (FAILED_PRECONDITION). A group's members carry weights: a member of weight W takes W
of the group's hash buckets, and the weights together count against the group's size limit
(the P4Info's ``max_group_size``, or the profile's size when that is 0, and the group's own
``max_size`` when given): RESOURCE_EXHAUSTED beyond it. Watch ports are UNIMPLEMENTED.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import grpc
from p4.v1 import p4runtime_pb2

from p4switch.action_profiles import ActionProfile
from p4switch.server import codec
from p4switch.server.errors import RpcError, invalid, not_found, unimplemented
from p4switch.server.schema import ActionProfileInfo, Schema

INSERT, MODIFY, DELETE = p4runtime_pb2.Update.INSERT, p4runtime_pb2.Update.MODIFY, p4runtime_pb2.Update.DELETE


def _failed_precondition(message: str) -> RpcError:
    return RpcError(grpc.StatusCode.FAILED_PRECONDITION, message)


def _exhausted(message: str) -> RpcError:
    return RpcError(grpc.StatusCode.RESOURCE_EXHAUSTED, message)


class ProfileEntities:
    """The action profiles of one pipeline seen through one P4Info."""

    def __init__(self, schema: Schema, pipeline: Any) -> None:
        self.schema = schema
        self.pipeline = pipeline
        #: (profile id, group id) -> the group's ``max_size`` as the client set it.
        self.group_max_sizes: dict[tuple[int, int], int] = {}

    def _profile(self, profile_id: int) -> tuple[ActionProfileInfo, ActionProfile]:
        info = self.schema.action_profiles.get(profile_id)
        if info is None:
            raise not_found(f"unknown action profile id {profile_id}")
        profile = getattr(self.pipeline, "action_profiles", {}).get(info.name)
        if profile is None:
            raise RpcError(grpc.StatusCode.INTERNAL,
                           f"action profile {info.name} is in the P4Info but not in the pipeline")
        return info, profile

    def _entries_using(self, profile: ActionProfile, member_id: int | None = None,
                       group_id: int | None = None) -> list[str]:
        """Names of the tables with an entry naming this member (or group)."""
        users = []
        for table in self.pipeline.tables.values():
            if table.profile is not profile:
                continue
            if any((member_id is not None and e.member_id == member_id)
                   or (group_id is not None and e.group_id == group_id) for e in table.entries()):
                users.append(table.name)
        return users

    # -- Write ----------------------------------------------------------------------------

    def write_member(self, kind: int, msg: p4runtime_pb2.ActionProfileMember) -> None:
        info, profile = self._profile(msg.action_profile_id)
        member_id = msg.member_id
        if kind == DELETE:
            if member_id not in profile.members:
                raise not_found(f"action profile {info.name}: no member {member_id}")
            groups = sorted(g for g, ms in profile.groups.items() if member_id in ms)
            tables = self._entries_using(profile, member_id=member_id)
            if groups or tables:
                users = [f"group {g}" for g in groups] + [f"entries of {t}" for t in tables]
                raise _failed_precondition(f"action profile {info.name}: member {member_id} is in use "
                                           f"by {', '.join(users)}")
            profile.delete_member(member_id)
            return
        if not msg.HasField("action"):
            raise invalid(f"action profile {info.name}: member {member_id} has no action")
        name, args = codec.action_from_proto(self.schema, None, msg.action)
        allowed = set().union(*(self.schema.table(t).action_ids for t in info.table_ids)) if info.table_ids else set()
        if msg.action.action_id not in allowed:
            raise invalid(f"action {name} is not an action of action profile {info.name}")
        if kind == INSERT:
            profile.insert_member(member_id, name, args)
        else:
            profile.modify_member(member_id, name, args)

    def write_group(self, kind: int, msg: p4runtime_pb2.ActionProfileGroup) -> None:
        info, profile = self._profile(msg.action_profile_id)
        group_id = msg.group_id
        key = (info.id, group_id)
        if not info.with_selector:
            raise invalid(f"action profile {info.name} is not an action selector: it has no groups")
        present = group_id in profile.groups
        if kind == INSERT and present:
            raise RpcError(grpc.StatusCode.ALREADY_EXISTS, f"action profile {info.name}: group {group_id} exists")
        if kind != INSERT and not present:
            raise not_found(f"action profile {info.name}: no group {group_id}")
        if kind == DELETE:
            tables = self._entries_using(profile, group_id=group_id)
            if tables:
                raise _failed_precondition(f"action profile {info.name}: group {group_id} is in use by "
                                           f"entries of {', '.join(tables)}")
            profile.delete_group(group_id)
            self.group_max_sizes.pop(key, None)
            return
        limit = info.max_group_size or info.size
        if msg.max_size > limit:
            raise _exhausted(f"action profile {info.name}: group max_size {msg.max_size} is over the "
                             f"largest group size {limit}")
        buckets = self._buckets(info, profile, msg)
        bound = msg.max_size or limit
        if len(buckets) > bound:
            raise _exhausted(f"action profile {info.name}: group {group_id} has {len(buckets)} member "
                             f"weight(s), more than its limit {bound}")
        if kind == INSERT:
            profile.insert_group(group_id, buckets)
        else:
            profile.modify_group(group_id, buckets)
        self.group_max_sizes[key] = msg.max_size

    @staticmethod
    def _buckets(info: ActionProfileInfo, profile: ActionProfile,
                 msg: p4runtime_pb2.ActionProfileGroup) -> list[int]:
        """The group's member ids, each repeated by its weight."""
        buckets: list[int] = []
        seen: set[int] = set()
        for member in msg.members:
            mid = member.member_id
            if mid in seen:
                raise invalid(f"action profile {info.name}: member {mid} given twice in group {msg.group_id}")
            seen.add(mid)
            if member.weight < 1:
                raise invalid(f"action profile {info.name}: member {mid} has weight {member.weight} "
                              "(weights are at least 1)")
            if member.WhichOneof("watch_kind") is not None and (member.watch or member.watch_port):
                raise unimplemented(f"action profile {info.name}: watch ports are not supported")
            if mid not in profile.members:
                raise not_found(f"action profile {info.name}: no member {mid}")
            buckets.extend([mid] * member.weight)
        return buckets

    # -- Read -----------------------------------------------------------------------------

    def _profiles(self, profile_id: int) -> list[tuple[ActionProfileInfo, ActionProfile]]:
        ids = [profile_id] if profile_id else sorted(self.schema.action_profiles)
        return [self._profile(i) for i in ids]

    def read_members(self, query: p4runtime_pb2.ActionProfileMember) -> Iterator[p4runtime_pb2.Entity]:
        for info, profile in self._profiles(query.action_profile_id):
            for member_id in sorted(profile.members):
                if query.member_id not in (0, member_id):
                    continue
                name, args = profile.members[member_id]
                msg = p4runtime_pb2.ActionProfileMember(action_profile_id=info.id, member_id=member_id)
                msg.action.CopyFrom(codec.action_to_proto(self.schema, name, args))
                yield p4runtime_pb2.Entity(action_profile_member=msg)

    def read_groups(self, query: p4runtime_pb2.ActionProfileGroup) -> Iterator[p4runtime_pb2.Entity]:
        for info, profile in self._profiles(query.action_profile_id):
            for group_id in sorted(profile.groups):
                if query.group_id not in (0, group_id):
                    continue
                msg = p4runtime_pb2.ActionProfileGroup(
                    action_profile_id=info.id, group_id=group_id,
                    max_size=self.group_max_sizes.get((info.id, group_id), 0))
                for member_id, weight in Counter(profile.groups[group_id]).items():
                    msg.members.add(member_id=member_id, weight=weight)
                yield p4runtime_pb2.Entity(action_profile_group=msg)
