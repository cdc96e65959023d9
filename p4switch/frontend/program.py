"""The loaded program: its source, syntax tree and the control-plane model P4Info is built from."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from p4switch.tables import KeyField


@dataclass(frozen=True)
class ParamInfo:
    name: str
    bitwidth: int


@dataclass
class ActionInfo:
    """An action as P4Info lists it (`name` fully qualified, e.g. ``MyIngress.drop``)."""

    name: str
    params: list[ParamInfo]
    annotations: list[str] = field(default_factory=list)


@dataclass
class TableInfo:
    name: str
    keys: tuple[KeyField, ...]
    actions: list[tuple[str, str]]  # (action name, scope: TABLE_AND_DEFAULT|TABLE_ONLY|DEFAULT_ONLY)
    size: int
    default_action: tuple[str, tuple[int, ...]]
    const_default: bool = False
    is_const: bool = False
    direct_counter: str | None = None
    direct_meter: str | None = None
    implementation: str | None = None
    annotations: list[str] = field(default_factory=list)
    idle_timeout: bool = False  # `support_timeout = true` (P4Info only; entries never age here)
    initial_entries: bool = False  # non-const `entries`


@dataclass
class CounterInfo:
    name: str
    size: int
    unit: str  # packets, bytes, packets_and_bytes
    direct_table: str | None = None


@dataclass
class MeterInfo:
    name: str
    size: int
    unit: str  # packets, bytes
    direct_table: str | None = None


@dataclass
class ValueSetInfo:
    name: str
    size: int
    fields: list[tuple[str, int, str]]  # (name, bitwidth, match kind)


@dataclass
class RegisterInfo:
    name: str
    size: int
    bitwidth: int


@dataclass
class DigestInfo:
    name: str
    fields: list[ParamInfo]
    is_tuple: bool = False  # `digest(id, {a, b})`: a tuple, named digest_N as p4c names it


@dataclass
class ControllerHeaderInfo:
    name: str  # the annotation's value, e.g. "packet_in"
    type_name: str
    fields: list[ParamInfo]


@dataclass
class ActionProfileInfo:
    name: str
    size: int
    tables: list[str]
    with_selector: bool = False


@dataclass
class ProgramInfo:
    """Everything the control plane sees of a program, in declaration order."""

    actions: dict[str, ActionInfo] = field(default_factory=dict)
    tables: dict[str, TableInfo] = field(default_factory=dict)
    counters: dict[str, CounterInfo] = field(default_factory=dict)
    meters: dict[str, MeterInfo] = field(default_factory=dict)
    registers: dict[str, RegisterInfo] = field(default_factory=dict)
    digests: dict[str, DigestInfo] = field(default_factory=dict)
    controller_headers: dict[str, ControllerHeaderInfo] = field(default_factory=dict)
    action_profiles: dict[str, ActionProfileInfo] = field(default_factory=dict)
    value_sets: dict[str, ValueSetInfo] = field(default_factory=dict)
    fixed_ids: dict[str, int] = field(default_factory=dict)  # from @id annotations
    direct_actions: set[str] = field(default_factory=set)  # called from an apply block
    error_members: list[str] = field(default_factory=list)  # `error` in declaration order


@dataclass
class Program:
    """A P4 program after preprocessing, parsing and type checking."""

    name: str
    source: Any  # PreprocessedSource
    tree: Any  # lark.Tree
    info: ProgramInfo = field(default_factory=ProgramInfo)
