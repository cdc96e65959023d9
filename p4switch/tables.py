"""Match-action tables: entries, the match engine and per-entry direct resources.

Priorities follow P4Runtime: among matching entries the one with the *highest* priority
wins. Tables whose keys are only exact and lpm need no priority; the longest prefix wins.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Union

from p4switch.errors import P4SwitchError

MATCH_KINDS = ("exact", "lpm", "ternary", "range", "optional")


class TableError(P4SwitchError):
    """A table operation was refused."""


class EntryExists(TableError):
    """An entry with the same match (and priority) is already installed."""


class EntryNotFound(TableError):
    """No entry with this match (and priority) is installed."""


class InvalidEntry(TableError):
    """The entry does not fit the table: names the field or parameter and why."""


class TableFull(TableError):
    """The table already holds `size` entries."""


class ConstTable(TableError):
    """The table's entries are const in the P4 program."""


@dataclass(frozen=True)
class Exact:
    value: int


@dataclass(frozen=True)
class Lpm:
    value: int
    prefix_len: int


@dataclass(frozen=True)
class Ternary:
    value: int
    mask: int


@dataclass(frozen=True)
class Range:
    low: int
    high: int


@dataclass(frozen=True)
class Optional:
    value: int


FieldMatch = Union[Exact, Lpm, Ternary, Range, Optional]


@dataclass(frozen=True)
class KeyField:
    """One key field: `name` as in P4Info (e.g. ``hdr.ipv4.dstAddr``)."""

    name: str
    match_kind: str
    bitwidth: int
    #: A key of type ``error``: matched on the error's code (its place in the program's error
    #: declarations, as BMv2 numbers them); P4Info gives it no bitwidth, as p4c does.
    is_error: bool = False


@dataclass(frozen=True)
class TableEntry:
    """An entry: one FieldMatch (or None = wildcard) per key field, in key order."""

    match: tuple[FieldMatch | None, ...]
    priority: int
    action: str
    args: tuple[int, ...]
    member_id: int | None = None  # tables implemented by an action profile: a member ...
    group_id: int | None = None  # ... or a group of an action selector, instead of an action


@dataclass
class ActionSpec:
    """An action the table may run: parameter bit widths in P4Info order."""

    name: str
    param_widths: tuple[int, ...]
    default_only: bool = False
    table_only: bool = False


@dataclass
class _Installed:
    entry: TableEntry
    packets: int = 0
    bytes: int = 0
    meter: Any = None
    order: int = 0
    norm: tuple = ()


def _mask(width: int) -> int:
    return (1 << width) - 1


def _prefix_mask(width: int, prefix_len: int) -> int:
    return _mask(width) ^ _mask(width - prefix_len)


@dataclass
class Table:
    """A match-action table with its entries, default action and direct resources."""

    name: str
    keys: tuple[KeyField, ...]
    actions: dict[str, ActionSpec]
    size: int = 1024
    is_const: bool = False
    const_default: bool = False
    initial_default: tuple[str, tuple[int, ...]] = ("NoAction", ())
    meter_factory: Any = None
    profile: Any = None  # the ActionProfile implementing this table, if any
    _default: tuple[str, tuple[int, ...]] = field(init=False)
    _entries: dict[tuple, _Installed] = field(init=False, default_factory=dict)
    _order: int = field(init=False, default=0)
    _sorted: list[_Installed] | None = field(init=False, default=None)
    _exact_only: bool = field(init=False, default=False)
    _needs_priority: bool = field(init=False, default=False)
    _lpm_index: int = field(init=False, default=-1)
    _levels: list | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self._default = self.initial_default
        kinds = [k.match_kind for k in self.keys]
        for key in self.keys:
            if key.match_kind not in MATCH_KINDS:
                raise InvalidEntry(f"table {self.name}: unsupported match kind {key.match_kind!r}")
        self._exact_only = all(k == "exact" for k in kinds)
        self._needs_priority = any(k in ("ternary", "range", "optional") for k in kinds)
        if not self._needs_priority and kinds.count("lpm") == 1:
            self._lpm_index = kinds.index("lpm")

    # -- control plane ------------------------------------------------------------------------

    @property
    def action_names(self) -> tuple[str, ...]:
        return tuple(self.actions)

    @property
    def needs_priority(self) -> bool:
        return self._needs_priority

    @property
    def default(self) -> tuple[str, tuple[int, ...]]:
        return self._default

    def _check_action(self, action: str, args: tuple[int, ...], for_default: bool) -> None:
        spec = self.actions.get(action)
        if spec is None:
            raise InvalidEntry(
                f"table {self.name}: unknown action {action!r} (allowed: {', '.join(self.actions)})"
            )
        if for_default and spec.table_only:
            raise InvalidEntry(f"table {self.name}: action {action} is @tableonly, not a default")
        if not for_default and spec.default_only:
            raise InvalidEntry(f"table {self.name}: action {action} is @defaultonly")
        if len(args) != len(spec.param_widths):
            raise InvalidEntry(
                f"table {self.name}: action {action} takes {len(spec.param_widths)} "
                f"argument(s), got {len(args)}"
            )
        for i, (arg, width) in enumerate(zip(args, spec.param_widths)):
            if not 0 <= arg <= _mask(width):
                raise InvalidEntry(
                    f"table {self.name}: action {action} argument {i + 1} = {arg} "
                    f"does not fit in {width} bits"
                )

    def _canonical(self, entry: TableEntry) -> tuple:
        """Validate the entry and return its identity key (normalized match + priority)."""
        if len(entry.match) != len(self.keys):
            raise InvalidEntry(
                f"table {self.name}: {len(entry.match)} match field(s) given, "
                f"table has {len(self.keys)}"
            )
        norm: list[Any] = []
        for key, m in zip(self.keys, entry.match):
            norm.append(self._check_field(key, m))
        if self._needs_priority:
            if entry.priority <= 0:
                raise InvalidEntry(f"table {self.name}: entries need a priority > 0")
        elif entry.priority != 0:
            raise InvalidEntry(
                f"table {self.name}: priority {entry.priority} given for a table "
                "without ternary, range or optional keys"
            )
        if self.profile is not None:
            self._check_indirect(entry)
        elif entry.member_id is not None or entry.group_id is not None:
            raise InvalidEntry(f"table {self.name} has no action profile: give an action")
        else:
            self._check_action(entry.action, entry.args, for_default=False)
        return (tuple(norm), entry.priority)

    def _check_indirect(self, entry: TableEntry) -> None:
        profile = self.profile
        if (entry.member_id is None) == (entry.group_id is None):
            raise InvalidEntry(f"table {self.name} is implemented by {profile.name}: "
                               "an entry names exactly one member or group")
        if entry.member_id is not None and entry.member_id not in profile.members:
            raise InvalidEntry(f"table {self.name}: {profile.name} has no member {entry.member_id}")
        if entry.group_id is not None and entry.group_id not in profile.groups:
            raise InvalidEntry(f"table {self.name}: {profile.name} has no group {entry.group_id}")

    def _check_field(self, key: KeyField, m: FieldMatch | None) -> Any:
        width, kind, top = key.bitwidth, key.match_kind, _mask(key.bitwidth)
        where = f"table {self.name}: field {key.name} ({kind}, {width} bits)"
        if m is None:
            if kind in ("ternary", "range", "optional"):
                return None
            if kind == "lpm":
                return ("lpm", 0, 0, 0)
            raise InvalidEntry(f"{where}: an exact field cannot be omitted")
        expected = {"exact": Exact, "lpm": Lpm, "ternary": Ternary, "range": Range,
                    "optional": Optional}[kind]
        if not isinstance(m, expected):
            raise InvalidEntry(f"{where}: got a {type(m).__name__} match")
        if isinstance(m, Exact | Optional):
            if not 0 <= m.value <= top:
                raise InvalidEntry(f"{where}: value {m.value:#x} does not fit")
            return m.value
        if isinstance(m, Lpm):
            if not 0 <= m.prefix_len <= width:
                raise InvalidEntry(f"{where}: prefix length {m.prefix_len} out of range")
            if not 0 <= m.value <= top:
                raise InvalidEntry(f"{where}: value {m.value:#x} does not fit")
            pmask = _prefix_mask(width, m.prefix_len)
            if m.value & ~pmask:
                raise InvalidEntry(f"{where}: value {m.value:#x} has bits set beyond /{m.prefix_len}")
            return ("lpm", m.value, m.prefix_len, pmask)
        if isinstance(m, Ternary):
            if not (0 <= m.value <= top and 0 <= m.mask <= top):
                raise InvalidEntry(f"{where}: value or mask does not fit")
            if m.value & ~m.mask:
                raise InvalidEntry(f"{where}: value {m.value:#x} has bits outside mask {m.mask:#x}")
            if m.mask == 0:
                return None
            return ("t", m.value, m.mask)
        assert isinstance(m, Range)
        if not (0 <= m.low <= m.high <= top):
            raise InvalidEntry(f"{where}: range {m.low}..{m.high} is empty or does not fit")
        if m.low == 0 and m.high == top:
            return None
        return ("r", m.low, m.high)

    def insert(self, entry: TableEntry) -> None:
        if self.is_const:
            raise ConstTable(f"table {self.name} has const entries")
        self._insert(entry)

    def _insert(self, entry: TableEntry) -> None:
        ident = self._canonical(entry)
        if ident in self._entries:
            raise EntryExists(f"table {self.name}: entry already exists")
        if len(self._entries) >= self.size:
            raise TableFull(f"table {self.name} is full ({self.size} entries)")
        self._order += 1
        meter = self.meter_factory() if self.meter_factory else None
        self._entries[ident] = _Installed(entry, meter=meter, order=self._order, norm=ident[0])
        self._sorted = None

    def insert_const(self, entry: TableEntry) -> None:
        """Install one of the program's const entries (bypasses the const check)."""
        self._insert(entry)

    def modify(self, entry: TableEntry) -> None:
        if self.is_const:
            raise ConstTable(f"table {self.name} has const entries")
        ident = self._canonical(entry)
        installed = self._entries.get(ident)
        if installed is None:
            raise EntryNotFound(f"table {self.name}: no such entry to modify")
        installed.entry = entry
        self._sorted = None

    def delete(self, entry: TableEntry) -> None:
        if self.is_const:
            raise ConstTable(f"table {self.name} has const entries")
        ident = self._identity(entry.match, entry.priority)
        if ident not in self._entries:
            raise EntryNotFound(f"table {self.name}: no such entry to delete")
        del self._entries[ident]
        self._sorted = None

    def _identity(self, match: tuple[FieldMatch | None, ...], priority: int) -> tuple:
        if len(match) != len(self.keys):
            raise InvalidEntry(f"table {self.name}: wrong number of match fields")
        return (tuple(self._check_field(k, m) for k, m in zip(self.keys, match)), priority)

    def get(self, match: tuple[FieldMatch | None, ...], priority: int = 0) -> TableEntry | None:
        installed = self._entries.get(self._identity(match, priority))
        return installed.entry if installed else None

    def entries(self) -> list[TableEntry]:
        return [i.entry for i in self._entries.values()]

    def set_default(self, action: str, args: tuple[int, ...] = ()) -> None:
        if self.const_default and (action, tuple(args)) != self._default:
            raise ConstTable(f"table {self.name} has a const default action")
        self._check_action(action, tuple(args), for_default=True)
        self._default = (action, tuple(args))

    def reset_default(self) -> None:
        self._default = self.initial_default

    def clear(self) -> None:
        if self.is_const:
            raise ConstTable(f"table {self.name} has const entries")
        self._entries.clear()
        self._sorted = None

    def _installed(self, entry: TableEntry) -> _Installed:
        installed = self._entries.get(self._identity(entry.match, entry.priority))
        if installed is None:
            raise EntryNotFound(f"table {self.name}: no such entry")
        return installed

    def direct_counter(self, entry: TableEntry) -> tuple[int, int]:
        installed = self._installed(entry)
        return installed.packets, installed.bytes

    def set_direct_counter(self, entry: TableEntry, packets: int, bytes_: int) -> None:
        installed = self._installed(entry)
        installed.packets, installed.bytes = packets, bytes_

    def set_direct_meter(self, entry: TableEntry, config: Any) -> None:
        """Configure an entry's direct meter; ``config`` None: the default (every packet green)."""
        installed = self._installed(entry)
        if installed.meter is None:
            raise TableError(f"table {self.name} has no direct meter")
        if config is None:
            installed.meter = self.meter_factory()
        else:
            installed.meter.set_config(*config)

    def direct_meter(self, entry: TableEntry) -> Any:
        return self._installed(entry).meter

    # -- data plane ---------------------------------------------------------------------------

    def lookup(self, key: tuple[int, ...]) -> _Installed | None:
        """The winning installed entry for a key tuple, or None on a miss."""
        entries = self._entries
        if not entries:
            return None
        if self._exact_only:
            return entries.get((key, 0))
        i = self._lpm_index
        if i >= 0:
            if self._sorted is None:
                self._sorted = self._sort()
                self._levels = self._lpm_levels()
            single = len(key) == 1
            for mask, level in self._levels:  # type: ignore[union-attr]
                probe = (key[0] & mask,) if single else key[:i] + (key[i] & mask,) + key[i + 1:]
                hit = level.get(probe)
                if hit is not None:
                    return hit
            return None
        if self._sorted is None:
            self._sorted = self._sort()
        for installed in self._sorted:
            if _matches(installed.norm, key):
                return installed
        return None

    def _lpm_levels(self) -> list[tuple[int, dict]]:
        """Entries by prefix length, longest first: one dict lookup per length."""
        i = self._lpm_index
        by_len: dict[int, tuple[int, dict]] = {}
        for installed in reversed(self._sorted or []):
            lpm = installed.norm[i]
            key = tuple(n if isinstance(n, int) else n[1] for n in installed.norm)
            by_len.setdefault(lpm[2], (lpm[3], {}))[1][key] = installed
        return [by_len[plen] for plen in sorted(by_len, reverse=True)]

    def _sort(self) -> list[_Installed]:
        items = []
        for (norm, priority), installed in self._entries.items():
            if self._needs_priority:
                rank = (-priority, installed.order)
            else:
                plen = sum(n[2] for n in norm if isinstance(n, tuple) and n[0] == "lpm")
                rank = (-plen, installed.order)
            items.append((rank, installed))
        items.sort(key=lambda pair: pair[0])
        return [i for _, i in items]


def _matches(norm: tuple, key: tuple[int, ...]) -> bool:
    for n, k in zip(norm, key):
        if n is None:
            continue
        if isinstance(n, int):
            if n != k:
                return False
            continue
        tag = n[0]
        if tag == "t":
            if k & n[2] != n[1]:
                return False
        elif tag == "r":
            if not n[1] <= k <= n[2]:
                return False
        elif k & n[3] != n[1]:  # lpm
            return False
    return True
