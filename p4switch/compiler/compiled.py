"""Building blocks of compiled P4 code: places, compiled expressions, and block handles."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from lark import Tree

from p4switch.expr_text import expr_text
from p4switch.frontend.program import DigestInfo, ProgramInfo, TableInfo
from p4switch.frontend.types import (
    BitT, BoolT, EnumT, ErrorT, ExternT, HeaderT, IntLitT, ListT, MatchKindT, P4Type, StackT,
    StringT, StructT, VarbitT, VoidT, slot_count,
)
from p4switch.externs import CounterArray, MeterArray, RegisterArray
from p4switch.runtime import ReturnSignal
from p4switch.tables import Table

Fn = Callable[[list], Any]
_NOCONST = object()


def generate(source: str, name: str, env: dict[str, Any] | None = None) -> Callable:
    """Compile generated Python source defining function `name` (straight-line packet code)."""
    namespace: dict[str, Any] = dict(env or {})
    exec(compile(source, f"<p4switch:{name}>", "exec"), namespace)  # noqa: S102
    return namespace[name]


def _mask(width: int) -> int:
    return (1 << width) - 1


def wrapper(t: P4Type) -> Callable[[int], int] | None:
    """The function that brings an int into the value range of `t` (None: no wrapping)."""
    if isinstance(t, BitT):
        m = _mask(t.width)
        if t.signed:
            half = 1 << (t.width - 1)
            return lambda v: ((v + half) & m) - half
        return lambda v: v & m
    return None


def to_unsigned(value: int, width: int) -> int:
    return value & _mask(width)


@dataclass
class Place:
    """A storage location: a static base slot, or a base computed per packet."""

    type: P4Type
    base: int | None = None
    dyn: Fn | None = None
    readonly: bool = False  # an `in` parameter or action data: P4 code may not write it

    def at(self, offset: int, t: P4Type) -> "Place":
        if self.base is not None:
            return Place(t, self.base + offset, readonly=self.readonly)
        dyn = self.dyn
        assert dyn is not None
        return Place(t, None, lambda s: dyn(s) + offset, self.readonly)

    def read_only(self) -> "Place":
        return Place(self.type, self.base, self.dyn, True)

    def reader(self) -> Fn:
        if self.base is not None:
            b = self.base
            read = lambda s: s[b]  # noqa: E731
            read.slot = b  # type: ignore[attr-defined]  # lets code generation read s[b] directly
            return read
        dyn = self.dyn
        return lambda s: s[dyn(s)]

    def writer(self) -> Callable[[list, Any], None]:
        if self.base is not None:
            b = self.base

            def write(s: list, v: Any) -> None:
                s[b] = v
            return write
        dyn = self.dyn

        def write_dyn(s: list, v: Any) -> None:
            s[dyn(s)] = v
        return write_dyn

    def block_reader(self) -> Fn:
        n = slot_count(self.type)
        if self.base is not None:
            b, e = self.base, self.base + n
            return lambda s: s[b:e]
        dyn = self.dyn
        return lambda s: s[dyn(s):dyn(s) + n]

    def block_writer(self) -> Callable[[list, list], None]:
        n = slot_count(self.type)
        if self.base is not None:
            b, e = self.base, self.base + n

            def write(s: list, vals: list) -> None:
                s[b:e] = vals
            return write
        dyn = self.dyn

        def write_dyn(s: list, vals: list) -> None:
            d = dyn(s)
            s[d:d + n] = vals
        return write_dyn


@dataclass
class E:
    """A compiled expression: its type, its closure and, when known, its constant value."""

    type: P4Type
    fn: Fn | None = None
    const: Any = _NOCONST
    place: Place | None = None
    extra: Any = None  # e.g. the table of `t.apply()`, the list items of `{a, b}`
    code: str | None = None  # the value as a Python expression over `s`, when it has one

    def __post_init__(self) -> None:
        if self.code is None:
            if self.is_const and type(self.const) in (int, bool, str):
                self.code = repr(self.const)
            elif self.fn is not None and getattr(self.fn, "slot", None) is not None:
                self.code = f"s[{self.fn.slot}]"  # type: ignore[attr-defined]

    @property
    def is_const(self) -> bool:
        return self.const is not _NOCONST


def const(t: P4Type, value: Any) -> E:
    return E(t, lambda s: value, value)


def from_code(t: P4Type, code: str, extra: Any = None) -> E:
    """An expression built from Python source over the slot list `s`."""
    return E(t, generate(f"def value(s):\n    return {code}\n", "value"), extra=extra, code=code)


def codes(*exprs: E) -> list[str] | None:
    """The code of every expression, or None if one has none."""
    result = [e.code for e in exprs]
    return None if any(c is None for c in result) else result  # type: ignore[return-value]


@dataclass
class ActionImpl:
    name: str
    params: list[tuple[str, P4Type, str | None, int]]  # (name, type, direction, slot)
    body: Fn
    data_slots: list[int] = field(default_factory=list)

    def run_with_args(self, s: list, args: tuple[int, ...]) -> None:
        for slot, value in zip(self.data_slots, args):
            s[slot] = value
        try:
            self.body(s)
        except ReturnSignal:
            pass


@dataclass
class TableImpl:
    table: Table
    info: TableInfo
    apply: Fn  # s -> (hit, action name)


@dataclass
class ExternInstance:
    kind: str
    name: str
    obj: Any = None
    type: P4Type | None = None
    direct_table: str | None = None


@dataclass
class ControlImpl:
    """A parser or control instance (for `x.apply(...)` on sub-blocks)."""

    kind: str
    params: list[tuple[str, P4Type, str | None, Place | None]]
    run: Fn


@dataclass
class FunctionImpl:
    name: str
    ret: P4Type
    params: list[tuple[str, P4Type, str | None, Place]]
    body: Fn
    missing: str | None = None  # a declared extern without a body: the error a call fails with


class Scope:
    def __init__(self, parent: "Scope | None" = None) -> None:
        self.parent = parent
        self.names: dict[str, Any] = {}

    def lookup(self, name: str) -> Any:
        scope: Scope | None = self
        while scope is not None:
            if name in scope.names:
                return scope.names[name]
            scope = scope.parent
        return None

    def child(self) -> "Scope":
        return Scope(self)


@dataclass
class Var:
    place: Place


@dataclass
class Const:
    e: E


@dataclass
class PacketParam:
    kind: str  # packet_in | packet_out


@dataclass
class CompiledProgram:
    """The executable result: block closures, slot template and runtime objects."""

    info: ProgramInfo
    slot_count: int
    template: list
    hdr: Place
    meta: Place
    std: dict[str, int]
    parser: Fn
    verify: Fn
    ingress: Fn
    egress: Fn
    compute: Fn
    deparser: Fn
    tables: dict[str, Table]
    counters: dict[str, CounterArray]
    meters: dict[str, MeterArray]
    registers: dict[str, RegisterArray]
    action_profiles: dict[str, Any]
    field_lists: dict[int, list[int]]
    digests: dict[str, DigestInfo]
    errors: list[str]
    value_sets: dict[str, Any] = field(default_factory=dict)


def _anno_map(tree: Tree | None) -> dict[str, list]:
    """Annotations as {name: [argument trees]}."""
    result: dict[str, list] = {}
    if tree is None:
        return result
    for anno in tree.children:
        name = str(anno.children[0].children[0])
        args = anno.children[1].children if len(anno.children) > 1 and anno.children[1] is not None else []
        result[name] = list(args)
    return result


def anno_texts(tree: Tree | None, skip: tuple[str, ...] = ("name", "id")) -> list[str]:
    """Annotations as P4Info writes them: ``@name`` or ``@name(args)``."""
    out = []
    if tree is None:
        return out
    for anno in tree.children:
        name = str(anno.children[0].children[0])
        if name in skip:
            continue
        args = anno.children[1].children if len(anno.children) > 1 and anno.children[1] is not None else []
        if args:
            out.append(f"@{name}(" + ", ".join(_anno_arg_text(a) for a in args) + ")")
        else:
            out.append(f"@{name}")
    return out


def _anno_arg_text(node: Any) -> str:
    if isinstance(node, Tree) and node.data in ("string_lit", "int_lit"):
        return str(node.children[0])
    if isinstance(node, Tree) and node.data in ("true_lit", "false_lit"):
        return node.data[:-4]
    return expr_text(node)


def _anno_string(annos: dict[str, list], key: str) -> str | None:
    args = annos.get(key)
    if args and isinstance(args[0], Tree) and args[0].data == "string_lit":
        return str(args[0].children[0])[1:-1]
    return None


def parse_int_literal(text: str) -> tuple[int, int | None, bool]:
    """(value, width or None, signed) of a P4 integer literal like ``8w0xFF``."""
    t = text.replace("_", "")
    width, signed = None, False
    for marker in ("w", "s"):
        if marker in t and not t.lower().startswith("0x"):
            w, t = t.split(marker, 1)
            width, signed = int(w), marker == "s"
            break
    low = t.lower()
    if low.startswith("0x"):
        value = int(low[2:], 16)
    elif low.startswith("0b"):
        value = int(low[2:], 2)
    elif low.startswith("0o"):
        value = int(low[2:], 8)
    elif low.startswith("0d"):
        value = int(low[2:], 10)
    else:
        value = int(low, 10)
    return value, width, signed


def field_is_scalar(t: P4Type) -> bool:
    """Stored in one slot (not a header, struct, stack or list)."""
    return not isinstance(t, HeaderT | StructT | StackT | ListT)


def _same_type(a: P4Type, b: P4Type) -> bool:
    if a is b:
        return True
    if isinstance(a, BitT | BoolT | ErrorT | StringT | VoidT | IntLitT | MatchKindT | StackT | ListT | VarbitT):
        return a == b
    if isinstance(a, HeaderT | StructT | EnumT | ExternT) and type(a) is type(b):
        return a.name == b.name  # type: ignore[union-attr]
    return False
