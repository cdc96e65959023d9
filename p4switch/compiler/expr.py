"""Expressions: typing rules of P4-16 and their closures (exact wrap-around arithmetic)."""

from __future__ import annotations

from typing import Any

from lark import Tree

from p4switch.compiler.operators import ARITH, COMPARE
from p4switch.compiler.compiled import (
    E, Const, Place, Scope, Var, _mask, _same_type, const, from_code,
    parse_int_literal, wrapper,
)
from p4switch.expr_text import expr_text
from p4switch.frontend.types import (
    BitT, BoolT, EnumT, ErrorT, HeaderT, IntLitT, ListT, P4Type, StackT, StringT, StructT,
    field_offset, slot_count,
)

class ExprCompiler:
    """Mixin of the Compiler: expressions (operators are in compile_operators.py)."""

    def expr(self, node: Any, scope: Scope, expected: P4Type | None = None) -> E:
        kind = node.data if isinstance(node, Tree) else "token"
        handler = getattr(self, f"_x_{kind}", None)
        if handler is None:
            if kind in ARITH or kind in ("div", "mod", "sat_plus", "sat_minus"):
                return self._arith(node, scope, kind, expected)
            if kind in COMPARE:
                return self._compare(node, scope, kind)
            raise self.unsupported(node, f"expression {kind} is not supported")
        return handler(node, scope, expected)

    # -- literals and names ------------------------------------------------------------------

    def _x_int_lit(self, node: Tree, scope: Scope, expected: P4Type | None) -> E:
        value, width, signed = parse_int_literal(str(node.children[0]))
        if width is None:
            return const(IntLitT(), value)
        t = BitT(width, signed)
        w = wrapper(t)
        assert w is not None
        if value > _mask(width):
            raise self.type_error(node, f"literal {node.children[0]} does not fit in {t}")
        return const(t, w(value))

    def _x_true_lit(self, node: Tree, scope: Scope, expected: P4Type | None) -> E:
        return const(BoolT(), True)

    def _x_false_lit(self, node: Tree, scope: Scope, expected: P4Type | None) -> E:
        return const(BoolT(), False)

    def _x_string_lit(self, node: Tree, scope: Scope, expected: P4Type | None) -> E:
        return const(StringT(), str(node.children[0])[1:-1])

    def _x_var(self, node: Tree, scope: Scope, expected: P4Type | None) -> E:
        name = str(node.children[0])
        binding = scope.lookup(name)
        if binding is None:
            binding = self.globals.lookup(name)
        if isinstance(binding, Var):
            place = binding.place
            fn = place.reader() if slot_count(place.type) == 1 and not isinstance(
                place.type, HeaderT | StructT | StackT) else place.block_reader()
            return E(place.type, fn, place=place)
        if isinstance(binding, Const):
            return binding.e
        if binding is not None:
            return E(BoolT(), None, extra=binding)
        if name in self.global_actions:
            return E(BoolT(), None, extra=self.global_action(name))
        if name in self.functions:
            return E(BoolT(), None, extra=("function", name))
        if name in self.extern_functions:
            return E(BoolT(), None, extra=("extern_function", name))
        raise self.type_error(node, f"unknown name {name}")

    def _x_this(self, node: Tree, scope: Scope, expected: P4Type | None) -> E:
        raise self.unsupported(node, "`this` is not supported")

    def _x_type_member(self, node: Tree, scope: Scope, expected: P4Type | None) -> E:
        tname = str(node.children[0])
        member = str(node.children[1].children[0])
        t = self._named_type(node.children[0])
        if isinstance(t, EnumT):
            if member not in t.members:
                raise self.type_error(node, f"{tname} has no member {member}")
            if t.repr is not None:
                return const(t, t.values[member])
            return const(t, member)
        raise self.unsupported(node, f"{tname}.{member} is not supported")

    def _x_error_member(self, node: Tree, scope: Scope, expected: P4Type | None) -> E:
        member = str(node.children[0].children[0])
        if member not in self.errors:
            raise self.type_error(node, f"error.{member} is not declared")
        return const(ErrorT(), member)

    def _x_construct(self, node: Tree, scope: Scope, expected: P4Type | None) -> E:
        raise self.unsupported(node, "constructor calls are only supported in instantiations")

    def _x_list_expr(self, node: Tree, scope: Scope, expected: P4Type | None) -> E:
        items = [c for c in node.children if c is not None]
        targets: list[P4Type | None] = [None] * len(items)
        if isinstance(expected, HeaderT | StructT) and len(expected.fields) == len(items):
            targets = [ft for _, ft in expected.fields]
        elif isinstance(expected, ListT) and len(expected.elems) == len(items):
            targets = list(expected.elems)
        compiled = [self.expr(c, scope, t) for c, t in zip(items, targets)]
        e = E(ListT(tuple(c.type for c in compiled)), None, extra=compiled)
        if expected is not None and isinstance(expected, HeaderT | StructT):
            return self.coerce(e, expected, node)
        return e

    def _x_struct_expr(self, node: Tree, scope: Scope, expected: P4Type | None) -> E:
        if not isinstance(expected, HeaderT | StructT):
            raise self.type_error(node, "a structure-valued expression needs a known struct type here")
        given = {str(kv.children[0].children[0]): kv.children[1] for kv in node.children}
        names = [f for f, _ in expected.fields]
        if set(given) != set(names):
            raise self.type_error(node, f"fields given ({', '.join(sorted(given))}) do not match "
                                        f"{expected} ({', '.join(names)})")
        compiled = [self.expr(given[f], scope, ft) for f, ft in expected.fields]
        e = E(ListT(tuple(c.type for c in compiled)), None, extra=compiled)
        return self.coerce(e, expected, node)

    # -- member, index, slice ----------------------------------------------------------------

    def _x_member(self, node: Tree, scope: Scope, expected: P4Type | None) -> E:
        base_node, name_node = node.children
        member = str(name_node.children[0])
        if isinstance(base_node, Tree) and base_node.data == "call":
            result = self.expr(base_node, scope)
            if isinstance(result.extra, tuple) and result.extra and result.extra[0] == "apply_result":
                apply = result.fn
                assert apply is not None
                if member == "hit":
                    return E(BoolT(), lambda s: apply(s)[0])
                if member == "miss":
                    return E(BoolT(), lambda s: not apply(s)[0])
                if member == "action_run":
                    return E(BoolT(), lambda s: apply(s)[1], extra=("action_run", result.extra[1]))
            raise self.type_error(node, f"no member {member} on a call result")
        base = self.expr(base_node, scope)
        t = base.type
        if isinstance(t, HeaderT | StructT):
            found = field_offset(t, member)
            if found is None:
                raise self.type_error(name_node, f"{t} has no field {member}")
            offset, ftype = found
            if base.place is None:  # a value: lookahead<H>().f, a function's result
                block = self._block_fn(base)
                if isinstance(ftype, HeaderT | StructT | StackT):
                    end = offset + slot_count(ftype)
                    return E(ftype, lambda s: block(s)[offset:end])
                return E(ftype, lambda s: block(s)[offset])
            place = base.place.at(offset, ftype)
            if isinstance(t, StructT) and t.is_union:
                siblings = []
                for other, other_t in t.fields:
                    if other != member:
                        o_off, _ = field_offset(t, other)  # type: ignore[misc]
                        siblings.append(self._clearer(base.place.at(o_off, other_t)))
                # a member of `u.next` (a stack of unions): extracting it advances the stack
                next_index = base.extra[1] if isinstance(base.extra, tuple) and base.extra and \
                    base.extra[0] == "stack_next" else None
                return E(ftype, place.block_reader(), place=place, extra=("union_member", siblings, next_index))
            if isinstance(ftype, HeaderT | StructT | StackT):
                return E(ftype, place.block_reader(), place=place)
            return E(ftype, place.reader(), place=place)
        if isinstance(t, StackT):
            return self._stack_member(node, base, member)
        if base.extra is not None and base.fn is None:
            return E(BoolT(), None, extra=("method", base, member, node))
        raise self.type_error(node, f"{t} has no member {member}")

    def _clearer(self, place: Place) -> Any:
        """`clear(s)`: make the header at `place` invalid with all fields 0 (as BMv2 reads it)."""
        write, empty = place.block_writer(), self._initial(place.type)
        return lambda s: write(s, list(empty))

    def _stack_member(self, node: Tree, base: E, member: str) -> E:
        t = base.type
        assert isinstance(t, StackT) and base.place is not None
        place = base.place
        stride = slot_count(t.elem)
        if member == "size":
            return const(BitT(32), t.size)
        if member in ("next", "last", "lastIndex"):
            index_place = place.at(0, BitT(32))
            read_index = index_place.reader()
            size = t.size
            if place.base is None:
                raise self.unsupported(node, "nested dynamic stacks are not supported")
            first = place.base + 1
            if member == "lastIndex":
                return E(BitT(32), lambda s: (read_index(s) - 1) & 0xFFFFFFFF)
            delta = 0 if member == "next" else -1
            bad = "StackOutOfBounds"

            def elem_base(s: list) -> int:
                i = read_index(s) + delta
                if not 0 <= i < size:
                    from p4switch.runtime import ParserError
                    raise ParserError(bad)
                return first + i * stride
            eplace = Place(t.elem, None, elem_base)
            return E(t.elem, eplace.block_reader(), place=eplace, extra=("stack_next", index_place)
                     if member == "next" else None)
        if base.fn is None:
            raise self.type_error(node, f"stack has no member {member}")
        return E(BoolT(), None, extra=("method", base, member, node))

    def _x_index(self, node: Tree, scope: Scope, expected: P4Type | None) -> E:
        base = self.expr(node.children[0], scope)
        if not isinstance(base.type, StackT) or base.place is None:
            raise self.type_error(node, f"cannot index a value of type {base.type}")
        t = base.type
        stride = slot_count(t.elem)
        index = self.expr(node.children[1], scope)
        if base.place.base is None:
            raise self.unsupported(node, "nested dynamic stacks are not supported")
        first = base.place.base + 1
        if index.is_const:
            i = int(index.const)
            if not 0 <= i < t.size:
                raise self.type_error(node, f"index {i} out of bounds for {t}")
            place = Place(t.elem, first + i * stride, readonly=base.place.readonly)
        else:
            read = index.fn
            size = t.size
            scratch = self.alloc(t.elem).base  # out-of-range accesses land here

            def elem_base(s: list) -> int:
                i = read(s)
                return first + i * stride if 0 <= i < size else scratch
            elem_base.stack_index = (first, stride, size, scratch)  # type: ignore[attr-defined]  # for code generation
            place = Place(t.elem, None, elem_base, base.place.readonly)
        return E(t.elem, place.block_reader(), place=place)

    def _x_slice(self, node: Tree, scope: Scope, expected: P4Type | None) -> E:
        base = self.expr(node.children[0], scope)
        hi, lo = self.const_int(node.children[1]), self.const_int(node.children[2])
        if not isinstance(base.type, BitT | IntLitT):
            raise self.type_error(node, f"cannot slice a value of type {base.type}")
        if isinstance(base.type, BitT) and not (0 <= lo <= hi < base.type.width):
            raise self.type_error(node, f"slice [{hi}:{lo}] out of range for {base.type}")
        if hi < lo:
            raise self.type_error(node, f"slice [{hi}:{lo}]: high bit below low bit")
        t = BitT(hi - lo + 1)
        m = _mask(hi - lo + 1)
        if base.is_const:
            return const(t, (base.const >> lo) & m)
        # A slice of a slice (`n[7:4][3:0]`) is one slice of the innermost value, so it stays
        # assignable: bits lo..hi of base[h0:l0] are bits l0+lo..l0+hi of its base.
        whole = ("slice", base, hi, lo)
        if isinstance(base.extra, tuple) and base.extra and base.extra[0] == "slice":
            _, root, _h0, l0 = base.extra
            whole = ("slice", root, l0 + hi, l0 + lo)
        if base.code is not None:
            return from_code(t, f"(({base.code} >> {lo}) & {m})", extra=whole)
        fn = base.fn
        return E(t, lambda s: (fn(s) >> lo) & m, extra=whole)

    # -- operators ---------------------------------------------------------------------------

    def _x_cast(self, node: Tree, scope: Scope, expected: P4Type | None) -> E:
        target = self.resolve_type(node.children[0])
        e = self.expr(node.children[1], scope, target)
        return self.cast(e, target, node)

    def cast(self, e: E, target: P4Type, node: Any) -> E:
        src = e.type
        if _same_type(src, target):
            return e
        fn = e.fn
        if isinstance(target, BitT):
            w = wrapper(target)
            assert w is not None
            if isinstance(src, BoolT):
                conv = lambda v: 1 if v else 0  # noqa: E731
            elif isinstance(src, BitT | IntLitT) or (isinstance(src, EnumT) and src.repr is not None):
                if isinstance(src, BitT) and src.signed and not target.signed:
                    conv = w
                elif isinstance(src, BitT) and not src.signed and target.signed and src.width < target.width:
                    conv = lambda v: v  # noqa: E731
                else:
                    conv = w
            else:
                raise self.type_error(node, f"cannot cast {src} to {target}")
        elif isinstance(target, BoolT):
            if not (isinstance(src, BitT) and src.width == 1) and not isinstance(src, IntLitT):
                raise self.type_error(node, f"cannot cast {src} to bool")
            conv = lambda v: v != 0  # noqa: E731
        elif isinstance(target, EnumT) and target.repr is not None and isinstance(src, BitT | IntLitT):
            w2 = wrapper(target.repr)
            conv = w2  # type: ignore[assignment]
        elif isinstance(target, HeaderT | StructT) and isinstance(src, ListT):
            return self.coerce(e, target, node)
        elif isinstance(target, IntLitT) and isinstance(src, BitT | IntLitT):
            conv = lambda v: v  # noqa: E731
        else:
            raise self.type_error(node, f"cannot cast {src} to {target}")
        if e.is_const:
            return const(target, conv(e.const))
        if e.code is not None:
            code = self._cast_code(src, target, e.code)
            if code is not None:
                return from_code(target, code)
        return E(target, lambda s: conv(fn(s)))

    @staticmethod
    def _cast_code(src: P4Type, target: P4Type, code: str) -> str | None:
        """Python source for the common casts (None: use the generic conversion)."""
        if isinstance(target, BitT) and not target.signed:
            if isinstance(src, BoolT):
                return f"(1 if {code} else 0)"
            if isinstance(src, BitT) and not src.signed and src.width <= target.width:
                return code
            if isinstance(src, BitT | IntLitT) or (isinstance(src, EnumT) and src.repr is not None):
                return f"({code} & {_mask(target.width)})"
        if isinstance(target, BoolT):
            return f"({code} != 0)"
        return None

    # -- calls in expressions ----------------------------------------------------------------

    def _x_call(self, node: Tree, scope: Scope, expected: P4Type | None) -> E:
        return self.call(node, scope, statement=False)

    def _x_call_generic(self, node: Tree, scope: Scope, expected: P4Type | None) -> E:
        return self.call(node, scope, statement=False)

    def lvalue(self, node: Any, scope: Scope) -> E:
        e = self.expr(node, scope)
        is_slice = isinstance(e.extra, tuple) and e.extra and e.extra[0] == "slice"
        if e.place is None and not is_slice:
            raise self.type_error(node, "expression is not assignable")
        place = e.extra[1].place if is_slice else e.place
        if place is not None and place.readonly:
            raise self.type_error(node, f"{expr_text(node)} is read-only (an `in` or action data "
                                        "parameter) and cannot be written")
        return e

    def writer_for(self, node: Any, target: E) -> Any:
        """`write(s, value)` for an lvalue (scalars, slices, headers and structs)."""
        if isinstance(target.extra, tuple) and target.extra and target.extra[0] == "slice":
            _, base, hi, lo = target.extra
            if base.place is None:
                raise self.type_error(node, "slice of a non-lvalue")
            read, write = base.place.reader(), base.place.writer()
            m = _mask(hi - lo + 1) << lo
            bw = wrapper(base.type)

            def write_slice(s: list, v: int) -> None:
                write(s, bw((read(s) & ~m) | ((v << lo) & m)))
            return write_slice
        assert target.place is not None
        if isinstance(target.type, HeaderT | StructT | StackT):
            return target.place.block_writer()
        return target.place.writer()

    def value_fn(self, e: E) -> Any:
        """Closure giving a value to store into a place of e's type."""
        if isinstance(e.type, HeaderT | StructT | StackT | ListT):
            return self._block_fn(e)
        if e.fn is None:
            raise ValueError("expression has no value")
        return e.fn

    def scalar(self, node: Any, scope: Scope, expected: P4Type | None = None) -> E:
        e = self.expr(node, scope, expected)
        if e.fn is None:
            raise self.type_error(node, "expression has no value")
        return e


