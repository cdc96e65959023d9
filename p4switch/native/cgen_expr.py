"""C expressions from the recorded compilation: every value is a uint64_t over the slot array.

Scalars live in the same slots as in the Python pipeline (``S[n]``); bools are 0/1, errors
and plain enum members their index. Constructs outside what the backend covers raise
:class:`NativeUnsupported` with the source location, and the program runs on Python.
"""

from __future__ import annotations

from typing import Any

from lark import Token, Tree

from p4switch.compiler.compiled import E, ExternInstance, PacketParam, TableImpl
from p4switch.errors import P4SwitchError
from p4switch.frontend.types import (BitT, BoolT, EnumT, ErrorT, HeaderT, IntLitT, ListT, P4Type, StackT, StructT,
                                     VarbitT, field_offset, slot_count)


class NativeUnsupported(P4SwitchError):
    """The program uses something the native backend does not compile (the reason says what)."""


def width_of(t: P4Type) -> int:
    if isinstance(t, BoolT):
        return 1
    if isinstance(t, BitT):
        return t.width
    if isinstance(t, EnumT) and t.repr is not None:
        return t.repr.width
    if isinstance(t, ErrorT | EnumT):
        return 32
    raise NativeUnsupported(f"no scalar width for {t}")


def is_signed(t: Any) -> bool:
    """An int<N> value (held sign-extended to 64 bits in its slot)."""
    return isinstance(t, BitT) and t.signed


def lit(value: int) -> str:
    return f"UINT64_C({value & 0xFFFFFFFFFFFFFFFF})"


class ExprGen:
    """Mixin of the generator: expressions."""

    rec: Any
    errors: list[str]
    enums: dict[tuple[str, str], int]

    def where(self, node: Any) -> str:
        if isinstance(node, Token) and node.line is not None:
            return f"line {node.line}"
        if isinstance(node, Tree) and not node.meta.empty:
            return f"line {node.meta.line}"
        if isinstance(node, Tree):
            for child in node.children:
                w = self.where(child)
                if w:
                    return w
        return ""

    def fail(self, node: Any, what: str) -> NativeUnsupported:
        loc = self.where(node)
        return NativeUnsupported(f"{what}{' (' + loc + ')' if loc else ''}")

    def e(self, node: Any) -> E:
        if id(node) in self.rec.conflicts:
            raise self.fail(node, "a construct compiled in several contexts")
        e = self.rec.exprs.get(id(node))
        if e is None:
            raise self.fail(node, f"expression {getattr(node, 'data', node)} was not compiled")
        return e

    def check_type(self, t: P4Type, node: Any) -> None:
        if isinstance(t, BitT) and t.width > 64:
            raise self.fail(node, f"type {t} (wider than 64 bits)")

    def const_code(self, value: Any, t: P4Type, node: Any) -> str:
        if isinstance(value, bool):
            return "1" if value else "0"
        if isinstance(value, int):
            if isinstance(t, BitT):
                self.check_type(t, node)
            return lit(value)
        if isinstance(value, str) and isinstance(t, ErrorT):
            return str(self.error_index(value))
        if isinstance(value, str) and isinstance(t, EnumT):
            return str(self.enum_index(t, value))
        raise self.fail(node, f"constant {value!r} of type {t}")

    def error_index(self, name: str) -> int:
        if name not in self.errors:
            self.errors.append(name)
        return self.errors.index(name)

    def enum_index(self, t: EnumT, member: str) -> int:
        key = (t.name, member)
        if key not in self.enums:
            members = list(getattr(t, "members", []) or [])
            self.enums[key] = members.index(member) if member in members else len(self.enums) + 1000
        return self.enums[key]

    def slot_value(self, value: Any, t: P4Type | None) -> int:
        """A template slot value as the C slot holds it."""
        if isinstance(value, bool):
            return int(value)
        if isinstance(value, int):
            return value & 0xFFFFFFFFFFFFFFFF
        if isinstance(value, str):
            if isinstance(t, EnumT):
                return self.enum_index(t, value)
            return self.error_index(value)
        if value is None:
            return 0
        if isinstance(value, tuple) and len(value) == 2 and value[1] == 0:
            return int(value[0])  # a varbit field: its length (its bits live beside the slots)
        raise NativeUnsupported(f"slot value {value!r} (a non-scalar)")

    def cx(self, node: Any) -> str:
        """The C expression of a scalar value."""
        e = self.e(node)
        if e.is_const and not isinstance(e.type, IntLitT) or (e.is_const and isinstance(e.const, int)):
            return self.const_code(e.const, e.type, node)
        self.check_type(e.type, node)
        if e.place is not None and e.place.base is not None and not isinstance(
                e.type, HeaderT | StructT):
            return f"S[{e.place.base}]"
        kind = node.data if isinstance(node, Tree) else "token"
        handler = getattr(self, f"_cx_{kind}", None)
        if handler is None:
            raise self.fail(node, f"expression {kind}")
        return handler(node, e)

    def wide_words(self, node: Any, width: int) -> list[str]:
        """The C words, least significant first, of a bit<N> value, N > 64: a constant or a
        value at a static place (other wide values stay with the Python pipeline)."""
        e = self.e(node)
        n = (width + 63) // 64
        if e.is_const and isinstance(e.const, int):
            v = e.const & ((1 << width) - 1)
            return [lit(v >> (64 * i)) for i in range(n)]
        if e.place is not None and e.place.base is not None and isinstance(e.type, BitT) \
                and e.type.width == width and not isinstance(e.extra, tuple):
            return [f"S[GF_WSLOT({e.place.base}) + {i}]" for i in range(n)]
        raise self.fail(node, f"a bit<{width}> value that is not a constant or a static place")

    def masked(self, code: str, t: P4Type) -> str:
        """`code` brought into the range of `t`: masked, or sign-extended for int<N>."""
        w = width_of(t) if not isinstance(t, IntLitT) else 64
        if is_signed(t):
            return code if w >= 64 else f"gf_sext({code}, {w})"
        return code if w >= 64 else f"(({code}) & {lit((1 << w) - 1)})"

    def unsigned(self, node: Any) -> str:
        """The C value of `node` as its bits (an int<N> masked to N bits)."""
        t = self.e(node).type
        code = self.cx(node)
        if is_signed(t) and width_of(t) < 64:
            return f"({code} & {lit((1 << width_of(t)) - 1)})"
        return code

    def _binop(self, node: Tree, e: E, op: str) -> str:
        a, b = self.cx(node.children[0]), self.cx(node.children[1])
        return self.masked(f"{a} {op} {b}", e.type)

    def _cx_plus(self, node: Tree, e: E) -> str:
        return self._binop(node, e, "+")

    def _cx_minus(self, node: Tree, e: E) -> str:
        return self._binop(node, e, "-")

    def _cx_times(self, node: Tree, e: E) -> str:
        return self._binop(node, e, "*")

    def _cx_band(self, node: Tree, e: E) -> str:
        return f"({self.cx(node.children[0])} & {self.cx(node.children[1])})"

    def _cx_bor(self, node: Tree, e: E) -> str:
        return f"({self.cx(node.children[0])} | {self.cx(node.children[1])})"

    def _cx_bxor(self, node: Tree, e: E) -> str:
        return f"({self.cx(node.children[0])} ^ {self.cx(node.children[1])})"

    def _cx_div(self, node: Tree, e: E) -> str:
        return f"gf_div({self.cx(node.children[0])}, {self.cx(node.children[1])})"

    def _cx_mod(self, node: Tree, e: E) -> str:
        return f"gf_mod({self.cx(node.children[0])}, {self.cx(node.children[1])})"

    def _cx_sat_plus(self, node: Tree, e: E) -> str:
        if is_signed(e.type):
            return f"gf_ssat({self.cx(node.children[0])}, {self.cx(node.children[1])}, {width_of(e.type)}, 0)"
        return f"gf_satadd({self.cx(node.children[0])}, {self.cx(node.children[1])}, {width_of(e.type)})"

    def _cx_sat_minus(self, node: Tree, e: E) -> str:
        if is_signed(e.type):
            return f"gf_ssat({self.cx(node.children[0])}, {self.cx(node.children[1])}, {width_of(e.type)}, 1)"
        return f"gf_satsub({self.cx(node.children[0])}, {self.cx(node.children[1])})"

    def _cx_shl(self, node: Tree, e: E) -> str:
        return self.masked(f"gf_shl({self.cx(node.children[0])}, {self.cx(node.children[1])})", e.type)

    def _cx_shr(self, node: Tree, e: E) -> str:
        if is_signed(e.type):
            return f"gf_sar({self.cx(node.children[0])}, {self.cx(node.children[1])})"
        return f"gf_shr({self.cx(node.children[0])}, {self.cx(node.children[1])})"

    def _cmp(self, node: Tree, op: str) -> str:
        types = [self.e(child).type for child in node.children]
        if any(wide_offsets(t) and not isinstance(t, BitT) for t in types):
            raise self.fail(node, "comparison of values with fields wider than 64 bits")
        if any(_has_varbit(t) or isinstance(t, StackT) for t in types):
            # a varbit's slot holds its length (the bits live beside it); a stack's first slot
            # its next index, which is not part of its value
            return self._cmp_varbit(node, types[0], op)
        compound = [t for t in types if isinstance(t, HeaderT | StructT)]
        if compound and op in ("==", "!=") and hasattr(self, "value_slots"):
            # every slot, validity included, as the Python pipeline compares the two blocks
            t = compound[0]
            a, b = (self.value_slots(node, t, child) for child in node.children)  # type: ignore[attr-defined]
            if any("({" in code for code in a + b):  # a call: C would not sequence the list's items
                raise self.fail(node, "comparison with a list value that calls a function")
            same = f"(memcmp((const uint64_t[]){{{', '.join(a)}}}, (const uint64_t[]){{{', '.join(b)}}}, " \
                   f"{len(a)} * sizeof(uint64_t)) == 0)"
            return same if op == "==" else f"(!{same})"
        if compound or any(isinstance(t, ListT) for t in types):
            raise self.fail(node, "comparison of headers or structs")
        wide = [t.width for t in types if isinstance(t, BitT) and t.width > 64]
        if wide and op in ("==", "!="):
            a, b = (self.wide_words(child, wide[0]) for child in node.children)
            same = "(" + " && ".join(f"{x} == {y}" for x, y in zip(a, b)) + ")"
            return same if op == "==" else f"(!{same})"
        if op not in ("==", "!=") and any(is_signed(t) for t in types):
            return f"(gf_s({self.cx(node.children[0])}) {op} gf_s({self.cx(node.children[1])}))"
        return f"({self.cx(node.children[0])} {op} {self.cx(node.children[1])})"

    def _cmp_varbit(self, node: Tree, t: P4Type, op: str) -> str:
        """== or != of two varbit values, headers or structs holding them, or stacks, at
        static places: every slot (a varbit's holds its length; a stack's elements only), then
        each varbit's bits."""
        places = [self.e(child).place for child in node.children]
        if op not in ("==", "!=") or any(p is None or p.base is None for p in places):
            raise self.fail(node, "comparison of varbit values")
        a, b = places[0].base, places[1].base  # type: ignore[union-attr]
        skip = 1 if isinstance(t, StackT) else 0
        terms = [f"memcmp(&S[{a + skip}], &S[{b + skip}], {slot_count(t) - skip} * sizeof(uint64_t)) == 0"]
        for o in varbit_offsets(t):
            terms.append(f"memcmp(c->vb[gf_vb_of_slot[{a + o}]], c->vb[gf_vb_of_slot[{b + o}]], "
                         f"(S[{a + o}] + 7) / 8) == 0")
        same = "(" + " && ".join(terms) + ")"
        return same if op == "==" else f"(!{same})"

    def _cx_eq(self, node: Tree, e: E) -> str:
        return self._cmp(node, "==")

    def _cx_ne(self, node: Tree, e: E) -> str:
        return self._cmp(node, "!=")

    def _cx_lt(self, node: Tree, e: E) -> str:
        return self._cmp(node, "<")

    def _cx_gt(self, node: Tree, e: E) -> str:
        return self._cmp(node, ">")

    def _cx_le(self, node: Tree, e: E) -> str:
        return self._cmp(node, "<=")

    def _cx_ge(self, node: Tree, e: E) -> str:
        return self._cmp(node, ">=")

    def _cx_land(self, node: Tree, e: E) -> str:
        return f"({self.cx(node.children[0])} && {self.cx(node.children[1])})"

    def _cx_lor(self, node: Tree, e: E) -> str:
        return f"({self.cx(node.children[0])} || {self.cx(node.children[1])})"

    def _cx_lnot(self, node: Tree, e: E) -> str:
        return f"(!{self.cx(node.children[0])})"

    def _cx_bnot(self, node: Tree, e: E) -> str:
        return self.masked(f"~{self.cx(node.children[0])}", e.type)

    def _cx_neg(self, node: Tree, e: E) -> str:
        return self.masked(f"-{self.cx(node.children[0])}", e.type)

    def _cx_mux(self, node: Tree, e: E) -> str:
        c, a, b = (self.cx(n) for n in node.children)
        return f"({c} ? {a} : {b})"

    def _cx_concat(self, node: Tree, e: E) -> str:
        wb = width_of(self.e(node.children[1]).type)
        a, b = self.unsigned(node.children[0]), self.unsigned(node.children[1])
        return self.masked(f"(gf_shl({a}, {wb}) | {b})", e.type)

    def _cx_slice(self, node: Tree, e: E) -> str:
        if not (isinstance(e.extra, tuple) and e.extra and e.extra[0] == "slice"):
            raise self.fail(node, "slice")
        _, base, hi, lo = e.extra
        if isinstance(base.type, BitT) and base.type.width > 64:
            words = self.wide_words(node.children[0], base.type.width)
            if words[0].startswith("S["):
                return f"gf_wslice(&{words[0]}, {len(words)}, {lo}, {hi - lo + 1})"
            return lit((int(base.const) >> lo) & ((1 << (hi - lo + 1)) - 1))
        return self.masked(f"({self.cx(node.children[0])} >> {lo})", e.type)

    def _cx_cast(self, node: Tree, e: E) -> str:
        inner = node.children[1]
        src = self.e(inner).type
        if isinstance(e.type, BitT) and isinstance(src, BitT) and src.width > 64 and e.type.width <= 64:
            return self.masked(self.wide_words(inner, src.width)[0], e.type)  # its low bits
        code = self.cx(inner)
        if isinstance(e.type, BoolT):
            return f"({code} != 0)"
        if isinstance(e.type, BitT):
            if isinstance(src, BoolT):
                return code
            return self.masked(code, e.type)
        if isinstance(e.type, EnumT) and e.type.repr is not None:
            return self.masked(code, e.type.repr)
        raise self.fail(node, f"cast to {e.type}")

    def _cx_member(self, node: Tree, e: E) -> str:
        base_node, name_node = node.children
        member = str(name_node.children[0])
        if isinstance(base_node, Tree) and base_node.data == "call":
            tid = self.table_of_call(base_node)
            if member == "hit":
                return f"(t{tid}_apply(c), c->hit)"
            if member == "miss":
                return f"(t{tid}_apply(c), !c->hit)"
            if member == "action_run":
                return f"t{tid}_apply(c)"
        dyn = self.dyn_element(base_node)
        if dyn is not None:
            return f"S[{dyn} + {self.dyn_field(node, base_node, member)}]"
        base = self.e(base_node)
        if isinstance(base.type, StackT) and member == "lastIndex" and base.place is not None \
                and base.place.base is not None:
            return f"((S[{base.place.base}] - 1) & UINT64_C(0xFFFFFFFF))"
        if isinstance(base_node, Tree) and base_node.data == "member" and \
                str(base_node.children[1].children[0]) in ("next", "last"):
            return self.stack_element_field(node, base_node, member)
        raise self.fail(node, f"member {member}")

    def dyn_element(self, node: Any) -> str | None:
        """The C expression of the first slot of `s[i]` with `i` known at run time only (an
        index out of range gives the element's scratch copy, as on the Python pipeline), or
        None when `node` is something else."""
        if not (isinstance(node, Tree) and node.data == "index"):
            return None
        e = self.e(node)
        info = getattr(e.place.dyn, "stack_index", None) if e.place is not None and e.place.base is None else None
        if info is None:
            return None
        first, stride, size, scratch = info
        return f"({{ uint64_t i_ = {self.cx(node.children[1])}; i_ < {size} ? {first} + i_ * {stride} : {scratch}; }})"

    def dyn_field(self, node: Any, element_node: Any, member: str) -> int:
        """The slot offset of scalar field `member` in a header element."""
        t = self.e(element_node).type
        found = field_offset(t, member) if isinstance(t, HeaderT) else None
        if found is None or isinstance(found[1], HeaderT | StructT):
            raise self.fail(node, f"member {member} of a dynamically indexed element")
        return found[0]

    def stack_element_field(self, node: Tree, element_node: Tree, member: str) -> str:
        """A field of `s.next` or `s.last` in a parser: StackOutOfBounds when there is none."""
        if not getattr(self, "in_parser", False):
            raise self.fail(node, "a field of s.next or s.last outside a parser")
        stack = self.e(element_node.children[0])
        t = stack.type
        if not isinstance(t, StackT) or not isinstance(t.elem, HeaderT) or stack.place is None \
                or stack.place.base is None:
            raise self.fail(node, f"member {member} of a stack element")
        found = field_offset(t.elem, member)
        if found is None or isinstance(found[1], HeaderT | StructT):
            raise self.fail(node, f"member {member} of a stack element")
        b, stride = stack.place.base, slot_count(t.elem)
        last = str(element_node.children[1].children[0]) == "last"
        index = f"S[{b}] - 1" if last else f"S[{b}]"
        bad = f"S[{b}] == 0 || S[{b}] > {t.size}" if last else f"S[{b}] >= {t.size}"
        err = self.error_index("StackOutOfBounds")
        return f"({{ if ({bad}) {{ err_ = {err}; goto p_error; }} S[{b + 1 + found[0]} + ({index}) * {stride}]; }})"

    def table_of_call(self, call: Tree) -> int:
        callee = call.children[0]
        if isinstance(callee, Tree) and callee.data == "member" and str(callee.children[1].children[0]) == "apply":
            base = self.e(callee.children[0])
            if isinstance(base.extra, TableImpl):
                return self.table_ids[base.extra.table.name]  # type: ignore[attr-defined]
        raise self.fail(call, "call in an expression")

    def _cx_call(self, node: Tree, e: E) -> str:
        callee = node.children[0]
        if isinstance(callee, Tree) and callee.data == "member":
            method = str(callee.children[1].children[0])
            base = self.e(callee.children[0])
            if method == "isValid" and isinstance(base.type, HeaderT) and base.place is not None \
                    and base.place.base is not None:
                return f"S[{base.place.base}]"
            dyn = self.dyn_element(callee.children[0]) if method == "isValid" else None
            if dyn is not None:
                return f"S[{dyn}]"
            if method == "isValid" and isinstance(base.type, StructT) and base.type.is_union \
                    and base.place is not None and base.place.base is not None:
                valid = [f"S[{base.place.base + field_offset(base.type, f)[0]}]"  # type: ignore[index]
                         for f, _ in base.type.fields]
                return f"({' || '.join(valid) or '0'})"
            if method == "apply" and isinstance(base.extra, TableImpl):
                return f"t{self.table_of_call(node)}_apply(c)"
            if isinstance(base.extra, ExternInstance) and base.extra.kind == "register" and method == "read":
                rid = self.register_ids[base.extra.name]  # type: ignore[attr-defined]
                args = node.children[1].children if node.children[1] is not None else []
                if len(args) == 1:
                    idx = self.cx(args[0])
                    return (f"({idx} < P->registers[{rid}].size ? "
                            f"__atomic_load_n(&P->registers[{rid}].values[{idx}], __ATOMIC_RELAXED) : 0)")
            if isinstance(base.extra, PacketParam):
                raise self.fail(node, f"packet method {method} in an expression")
        raise self.fail(node, "call in an expression")

    def _cx_token(self, node: Any, e: E) -> str:
        raise self.fail(node, "token expression")

    # -- data lists for hashes and checksums ---------------------------------------------------

    def leaves(self, node: Any) -> list[tuple[str, int]]:
        """(C value, width) of every scalar in a hash/checksum data expression, in order."""
        if isinstance(node, Tree) and node.data == "list_expr":
            out: list[tuple[str, int]] = []
            for child in node.children:
                if child is not None:
                    out.extend(self.leaves(child))
            return out
        e = self.e(node)
        if isinstance(e.type, HeaderT | StructT):
            if e.place is None or e.place.base is None:
                raise self.fail(node, "data of a non-lvalue header or struct")
            return self.place_leaves(e.type, e.place.base, node)
        if isinstance(e.type, IntLitT):
            raise self.fail(node, "an untyped integer in data")
        return [(self.cx(node), width_of(e.type))]

    def place_leaves(self, t: P4Type, base: int, node: Any) -> list[tuple[str, int]]:
        out: list[tuple[str, int]] = []
        for fname, ft in t.fields:  # type: ignore[union-attr]
            off, _ = field_offset(t, fname)  # type: ignore[arg-type,misc]
            if isinstance(ft, HeaderT | StructT):
                out.extend(self.place_leaves(ft, base + off, node))
            else:
                self.check_type(ft, node)
                out.append((f"S[{base + off}]", width_of(ft)))
        return out

    def pack(self, leaves: list[tuple[str, int]], buf: str) -> tuple[list[str], int]:
        """Statements packing leaves MSB first into `buf` (zeroed first); the byte count."""
        total = sum(w for _, w in leaves)
        nbytes = (total + 7) // 8
        lines = [f"uint8_t {buf}[{max(nbytes, 1)}]; memset({buf}, 0, sizeof {buf});"]
        off = 0
        for code, w in leaves:
            lines.append(f"gf_put({buf}, {off}, {w}, {code});")
            off += w
        return lines, nbytes


def _has_varbit(t: P4Type) -> bool:
    """A varbit value, or a header, struct or stack holding one."""
    return bool(varbit_offsets(t))


def varbit_offsets(t: P4Type) -> list[int]:
    """Slot offsets, within a value of type `t`, of its varbit fields (their bits live in a
    buffer beside the slots, which a copy of the value must copy too)."""
    if isinstance(t, VarbitT):
        return [0]
    out: list[int] = []
    if isinstance(t, HeaderT | StructT):
        at = 1 if isinstance(t, HeaderT) else 0
        for _, ft in t.fields:
            out += [at + o for o in varbit_offsets(ft)]
            at += slot_count(ft)
    elif isinstance(t, StackT):
        n = slot_count(t.elem)
        for i in range(t.size):
            out += [1 + i * n + o for o in varbit_offsets(t.elem)]
    return out


def wide_offsets(t: P4Type) -> list[int]:
    """Slot offsets, within a value of type `t`, of its bit<N> fields with N > 64 (their words
    live after the packet's slots, which a copy of the value must copy too)."""
    if isinstance(t, BitT):
        return [0] if t.width > 64 else []
    out: list[int] = []
    if isinstance(t, HeaderT | StructT):
        at = 1 if isinstance(t, HeaderT) else 0
        for _, ft in t.fields:
            out += [at + o for o in wide_offsets(ft)]
            at += slot_count(ft)
    elif isinstance(t, StackT):
        n = slot_count(t.elem)
        for i in range(t.size):
            out += [1 + i * n + o for o in wide_offsets(t.elem)]
    return out


def wide_parts(bit_offset: int, width: int) -> list[tuple[int, int]]:
    """(bit offset, width) in the packet of each word of a bit<width> field at `bit_offset`,
    least significant word first."""
    n = (width + 63) // 64
    return [(bit_offset + width - 64 * i - min(64, width - 64 * i), min(64, width - 64 * i)) for i in range(n)]


def wide_zero(base: int, t: P4Type) -> str:
    """C zeroing the words of the wide fields of a value of type `t` at static slot `base`."""
    return " ".join(f"memset(&S[GF_WSLOT({base + o})], 0, GF_WW * sizeof(uint64_t));" for o in wide_offsets(t))


def copy_code(dst: int, src: int, t: P4Type) -> str:
    """C copying a value of type `t` from slot `src` to slot `dst`, varbit bits and the words
    of wide fields included."""
    code = f"memmove(&S[{dst}], &S[{src}], {slot_count(t)} * sizeof(uint64_t));"
    for o in wide_offsets(t):
        code += f" memmove(&S[GF_WSLOT({dst + o})], &S[GF_WSLOT({src + o})], GF_WW * sizeof(uint64_t));"
    for o in varbit_offsets(t):
        code += f" memmove(c->vb[gf_vb_of_slot[{dst + o}]], c->vb[gf_vb_of_slot[{src + o}]], sizeof c->vb[0]);"
    return code
