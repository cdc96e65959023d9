"""P4 types as the front end resolves them, and their slot layout for execution.

At run time a packet's state is one flat Python list; every scalar (a field, a validity
bit, a local variable) owns one slot. `slot_count` gives how many slots a type needs.
"""

from __future__ import annotations

from dataclasses import dataclass, field


class P4Type:
    """Base of every resolved type."""

    def __str__(self) -> str:
        return type(self).__name__


@dataclass(frozen=True)
class BitT(P4Type):
    width: int
    signed: bool = False

    def __str__(self) -> str:
        return f"{'int' if self.signed else 'bit'}<{self.width}>"


@dataclass(frozen=True)
class IntLitT(P4Type):
    """An integer literal or `int` compile-time value without a width."""

    def __str__(self) -> str:
        return "int"


@dataclass(frozen=True)
class BoolT(P4Type):
    def __str__(self) -> str:
        return "bool"


@dataclass(frozen=True)
class StringT(P4Type):
    def __str__(self) -> str:
        return "string"


@dataclass(frozen=True)
class VoidT(P4Type):
    def __str__(self) -> str:
        return "void"


@dataclass(frozen=True)
class ErrorT(P4Type):
    def __str__(self) -> str:
        return "error"


@dataclass(frozen=True)
class MatchKindT(P4Type):
    def __str__(self) -> str:
        return "match_kind"


@dataclass(frozen=True)
class VarbitT(P4Type):
    max_width: int

    def __str__(self) -> str:
        return f"varbit<{self.max_width}>"


@dataclass(eq=False)
class EnumT(P4Type):
    name: str
    members: list[str]
    repr: BitT | None = None
    values: dict[str, int] = field(default_factory=dict)

    def __str__(self) -> str:
        return self.name


@dataclass(eq=False)
class HeaderT(P4Type):
    """A header. A struct-typed field (P4-16 1.2.2) is stored flattened: `fields` lists its
    leaves as `s.x` in order (what extract and emit see), and `groups` maps `s` to its struct
    type, whose slots are those leaves in the same order."""

    name: str
    fields: list[tuple[str, P4Type]]
    annotations: dict = field(default_factory=dict)
    groups: dict[str, "StructT"] = field(default_factory=dict)

    def __str__(self) -> str:
        return self.name

    @property
    def bit_width(self) -> int:
        """Width of the fixed-size fields (a trailing varbit field is not counted)."""
        return sum(scalar_width(t) for _, t in self.fields if not isinstance(t, VarbitT))

    @property
    def varbit(self) -> "VarbitT | None":
        last = self.fields[-1][1] if self.fields else None
        return last if isinstance(last, VarbitT) else None


@dataclass(eq=False)
class StructT(P4Type):
    name: str
    fields: list[tuple[str, P4Type]]
    is_union: bool = False
    field_annotations: dict[str, dict] = field(default_factory=dict)

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class StackT(P4Type):
    elem: P4Type
    size: int

    def __str__(self) -> str:
        return f"{self.elem}[{self.size}]"


@dataclass(frozen=True)
class ListT(P4Type):
    """The type of a list expression ``{a, b}`` or a tuple."""

    elems: tuple[P4Type, ...]

    def __str__(self) -> str:
        return "tuple<" + ", ".join(map(str, self.elems)) + ">"


@dataclass(eq=False)
class ExternT(P4Type):
    name: str
    type_args: tuple = ()

    def __str__(self) -> str:
        return self.name


@dataclass(eq=False)
class TypeVarT(P4Type):
    name: str

    def __str__(self) -> str:
        return self.name


@dataclass(eq=False)
class DeclT(P4Type):
    """A parser, control or package type (its tree is kept for instantiation)."""

    name: str
    kind: str
    tree: object = None

    def __str__(self) -> str:
        return self.name


def scalar_width(t: P4Type) -> int:
    """Bit width of a header field type."""
    if isinstance(t, BitT):
        return t.width
    if isinstance(t, BoolT):
        return 1
    if isinstance(t, EnumT) and t.repr is not None:
        return t.repr.width
    if isinstance(t, VarbitT):
        return t.max_width
    raise TypeError(f"{t} has no fixed bit width")


def is_scalar(t: P4Type) -> bool:
    return isinstance(t, (BitT, BoolT, IntLitT, ErrorT, EnumT, StringT, VarbitT))


def slot_count(t: P4Type) -> int:
    """Slots a value of this type occupies (header: 1 validity slot + fields)."""
    if isinstance(t, HeaderT):
        return 1 + len(t.fields)
    if isinstance(t, StructT):
        return sum(slot_count(ft) for _, ft in t.fields)
    if isinstance(t, StackT):
        return 1 + t.size * slot_count(t.elem)
    if isinstance(t, ListT):
        return sum(slot_count(e) for e in t.elems)
    return 1


def field_offset(t: StructT | HeaderT, name: str) -> tuple[int, P4Type] | None:
    """Slot offset of a member inside a header (after the validity slot) or struct."""
    offset = 1 if isinstance(t, HeaderT) else 0
    if isinstance(t, HeaderT) and name in t.groups:
        prefix = name + "."
        for fname, _ in t.fields:
            if fname.startswith(prefix):
                return offset, t.groups[name]
            offset += 1
        return None
    for fname, ftype in t.fields:
        if fname == name:
            return offset, ftype
        offset += slot_count(ftype)
    return None


def default_value(t: P4Type) -> object:
    if isinstance(t, VarbitT):
        return (0, 0)  # (current length in bits, value)
    if isinstance(t, BoolT):
        return False
    if isinstance(t, ErrorT):
        return "NoError"
    if isinstance(t, EnumT) and t.repr is None:
        return t.members[0] if t.members else 0
    return 0
