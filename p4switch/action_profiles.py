"""Action profiles and action selectors: members (an action with its arguments) and groups
of members shared by the tables that use the profile as their implementation.

A table entry of such a table names a member (``member_id``) or a group (``group_id``)
instead of an action. For a group, an action selector hashes the table's ``selector`` key
fields with its algorithm, keeps ``output_width`` bits and picks member ``hash % size`` of
the group (BMv2's rule). Ids are chosen by the control plane.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from p4switch.tables import ActionSpec, EntryExists, EntryNotFound, InvalidEntry, TableError, TableFull


@dataclass
class ActionProfile:
    name: str
    size: int
    actions: dict[str, ActionSpec] = field(default_factory=dict)
    selector: Callable[[bytes], int] | None = None
    output_width: int = 0
    members: dict[int, tuple[str, tuple[int, ...]]] = field(default_factory=dict)
    groups: dict[int, list[int]] = field(default_factory=dict)

    @property
    def with_selector(self) -> bool:
        return self.selector is not None

    def _check_action(self, action: str, args: tuple[int, ...]) -> None:
        spec = self.actions.get(action)
        if spec is None:
            raise InvalidEntry(f"action profile {self.name}: unknown action {action!r} "
                               f"(allowed: {', '.join(self.actions)})")
        if spec.default_only:
            raise InvalidEntry(f"action profile {self.name}: action {action} is @defaultonly")
        if len(args) != len(spec.param_widths):
            raise InvalidEntry(f"action profile {self.name}: action {action} takes "
                               f"{len(spec.param_widths)} argument(s), got {len(args)}")
        for i, (arg, width) in enumerate(zip(args, spec.param_widths)):
            if not 0 <= arg < (1 << width):
                raise InvalidEntry(f"action profile {self.name}: action {action} argument {i + 1} "
                                   f"= {arg} does not fit in {width} bits")

    def insert_member(self, member_id: int, action: str, args: tuple[int, ...] = ()) -> None:
        if member_id in self.members:
            raise EntryExists(f"action profile {self.name}: member {member_id} exists")
        if len(self.members) >= self.size:
            raise TableFull(f"action profile {self.name} is full ({self.size} members)")
        self._check_action(action, tuple(args))
        self.members[member_id] = (action, tuple(args))

    def modify_member(self, member_id: int, action: str, args: tuple[int, ...] = ()) -> None:
        if member_id not in self.members:
            raise EntryNotFound(f"action profile {self.name}: no member {member_id}")
        self._check_action(action, tuple(args))
        self.members[member_id] = (action, tuple(args))

    def delete_member(self, member_id: int) -> None:
        if member_id not in self.members:
            raise EntryNotFound(f"action profile {self.name}: no member {member_id}")
        users = [g for g, ms in self.groups.items() if member_id in ms]
        if users:
            raise TableError(f"action profile {self.name}: member {member_id} is in group(s) "
                             f"{', '.join(map(str, users))}")
        del self.members[member_id]

    def _check_group(self, member_ids: list[int]) -> list[int]:
        if not self.with_selector:
            raise InvalidEntry(f"action profile {self.name} has no selector: no groups")
        missing = [m for m in member_ids if m not in self.members]
        if missing:
            raise EntryNotFound(f"action profile {self.name}: no member(s) {missing}")
        return list(member_ids)

    def insert_group(self, group_id: int, member_ids: list[int]) -> None:
        if group_id in self.groups:
            raise EntryExists(f"action profile {self.name}: group {group_id} exists")
        self.groups[group_id] = self._check_group(member_ids)

    def modify_group(self, group_id: int, member_ids: list[int]) -> None:
        if group_id not in self.groups:
            raise EntryNotFound(f"action profile {self.name}: no group {group_id}")
        self.groups[group_id] = self._check_group(member_ids)

    def delete_group(self, group_id: int) -> None:
        if group_id not in self.groups:
            raise EntryNotFound(f"action profile {self.name}: no group {group_id}")
        del self.groups[group_id]

    def member_action(self, member_id: int) -> tuple[str, tuple[int, ...]] | None:
        return self.members.get(member_id)

    def group_action(self, group_id: int, data: bytes) -> tuple[str, tuple[int, ...]] | None:
        """The member a packet's selector data picks from a group (None if empty)."""
        members = self.groups.get(group_id)
        if not members or self.selector is None:
            return None
        h = self.selector(data) & ((1 << self.output_width) - 1 if self.output_width else -1)
        return self.members.get(members[h % len(members)])
