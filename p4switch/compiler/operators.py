"""Operators: P4-16 arithmetic, comparison, logic, shifts, concatenation and the conditional
operator, each typed and compiled into closures with exact wrap-around arithmetic."""

from __future__ import annotations

import operator
from typing import Any

from lark import Tree

from p4switch.compiler.compiled import E, Scope, _mask, _same_type, codes, const, field_is_scalar, from_code, wrapper
from p4switch.frontend.types import BitT, BoolT, HeaderT, IntLitT, ListT, P4Type, StackT, StructT

ARITH = {
    "plus": operator.add, "minus": operator.sub, "times": operator.mul,
    "band": operator.and_, "bor": operator.or_, "bxor": operator.xor,
}
COMPARE = {
    "eq": operator.eq, "ne": operator.ne, "lt": operator.lt, "gt": operator.gt,
    "le": operator.le, "ge": operator.ge,
}
SYMBOL = {
    "plus": "+", "minus": "-", "times": "*", "div": "/", "mod": "%", "band": "&", "bor": "|",
    "bxor": "^", "eq": "==", "ne": "!=", "lt": "<", "gt": ">", "le": "<=", "ge": ">=",
    "shl": "<<", "shr": ">>", "concat": "++", "sat_plus": "|+|", "sat_minus": "|-|",
    "land": "&&", "lor": "||",
}


class OperatorCompiler:
    """Mixin of the Compiler: operators."""

    def _operands(self, node: Tree, scope: Scope, expected: P4Type | None = None) -> tuple[E, E, P4Type]:
        a = self.expr(node.children[0], scope, expected)
        b = self.expr(node.children[1], scope, a.type if not isinstance(a.type, IntLitT) else expected)
        if isinstance(a.type, IntLitT) and not isinstance(b.type, IntLitT):
            a = self.coerce(a, b.type, node)
        elif isinstance(b.type, IntLitT) and not isinstance(a.type, IntLitT):
            b = self.coerce(b, a.type, node)
        return a, b, a.type

    def _arith(self, node: Tree, scope: Scope, kind: str, expected: P4Type | None) -> E:
        a, b, t = self._operands(node, scope, expected)
        sym = SYMBOL[kind]
        if not _same_type(a.type, b.type) or not isinstance(t, BitT | IntLitT):
            raise self.type_error(node, f"cannot apply {sym} to {a.type} and {b.type}")
        if kind in ("div", "mod") and isinstance(t, BitT) and t.signed:
            raise self.type_error(node, f"{sym} is not defined on signed {t}")
        if kind in ("sat_plus", "sat_minus"):
            if not isinstance(t, BitT):
                raise self.type_error(node, f"{sym} needs a fixed-width type")
            lo, hi = (-(1 << (t.width - 1)), (1 << (t.width - 1)) - 1) if t.signed else (0, _mask(t.width))
            op = operator.add if kind == "sat_plus" else operator.sub

            def sat(x: int, y: int) -> int:
                return min(hi, max(lo, op(x, y)))
            return self._binary(a, b, t, sat, wrap=False)
        if kind == "div":
            def op2(x: int, y: int) -> int:
                return x // y if y else 0
        elif kind == "mod":
            def op2(x: int, y: int) -> int:
                return x % y if y else 0
        else:
            op2 = ARITH[kind]
        python_sym = SYMBOL[kind] if kind in ARITH else None
        return self._binary(a, b, t, op2, wrap=kind not in ("band", "bor", "bxor") or t.signed is True
                            if isinstance(t, BitT) else False, sym=python_sym)

    def _binary(self, a: E, b: E, t: P4Type, op: Any, wrap: bool = True, sym: str | None = None) -> E:
        w = wrapper(t) if wrap else None
        if a.is_const and b.is_const:
            value = op(a.const, b.const)
            return const(t, w(value) if w else value)
        operands = codes(a, b) if sym is not None else None
        if operands is not None:
            ca, cb = operands
            raw = f"({ca} {sym} {cb})"
            if w is None:
                return from_code(t, raw)
            assert isinstance(t, BitT)
            m = _mask(t.width)
            if not t.signed:
                return from_code(t, f"({raw} & {m})")
            half = 1 << (t.width - 1)
            return from_code(t, f"((({raw} + {half}) & {m}) - {half})")
        fa, fb = a.fn, b.fn
        if w is None:
            if b.is_const:
                bv = b.const
                return E(t, lambda s: op(fa(s), bv))
            return E(t, lambda s: op(fa(s), fb(s)))
        if isinstance(t, BitT) and not t.signed:
            m = _mask(t.width)
            return E(t, lambda s: op(fa(s), fb(s)) & m)
        return E(t, lambda s: w(op(fa(s), fb(s))))

    def _compare(self, node: Tree, scope: Scope, kind: str) -> E:
        a, b, t = self._operands(node, scope)
        if isinstance(a.type, ListT) or isinstance(b.type, ListT):
            target = b.type if isinstance(a.type, ListT) else a.type
            a, b = self.coerce(a, target, node), self.coerce(b, target, node)
        if not _same_type(a.type, b.type):
            raise self.type_error(node, f"cannot compare {a.type} with {b.type}")
        if kind not in ("eq", "ne") and not isinstance(t, BitT | IntLitT):
            raise self.type_error(node, f"{SYMBOL[kind]} is not defined on {t}")
        op = COMPARE[kind]
        if isinstance(t, StackT):  # the elements only: the next index is not part of the value (BMv2)
            fa, fb = self._block_fn(a), self._block_fn(b)
            return E(BoolT(), lambda s: op(fa(s)[1:], fb(s)[1:]))
        if isinstance(t, HeaderT | StructT):
            fa, fb = self._block_fn(a), self._block_fn(b)
            return E(BoolT(), lambda s: op(fa(s), fb(s)))
        if a.is_const and b.is_const:
            return const(BoolT(), op(a.const, b.const))
        operands = codes(a, b)
        if operands is not None:
            return from_code(BoolT(), f"({operands[0]} {SYMBOL[kind]} {operands[1]})")
        fa, fb = a.fn, b.fn
        if b.is_const:
            bv = b.const
            if kind == "eq":
                return E(BoolT(), lambda s: fa(s) == bv)
            if kind == "ne":
                return E(BoolT(), lambda s: fa(s) != bv)
            return E(BoolT(), lambda s: op(fa(s), bv))
        return E(BoolT(), lambda s: op(fa(s), fb(s)))

    def _bool_operand(self, node: Any, scope: Scope) -> E:
        e = self.expr(node, scope, BoolT())
        if not isinstance(e.type, BoolT):
            raise self.type_error(node, f"expected bool, got {e.type}")
        return e

    def _x_land(self, node: Tree, scope: Scope, expected: P4Type | None) -> E:
        a, b = self._bool_operand(node.children[0], scope), self._bool_operand(node.children[1], scope)
        if a.is_const and b.is_const:
            return const(BoolT(), a.const and b.const)
        operands = codes(a, b)
        if operands is not None:
            return from_code(BoolT(), f"({operands[0]} and {operands[1]})")
        fa, fb = a.fn, b.fn
        return E(BoolT(), lambda s: fa(s) and fb(s))

    def _x_lor(self, node: Tree, scope: Scope, expected: P4Type | None) -> E:
        a, b = self._bool_operand(node.children[0], scope), self._bool_operand(node.children[1], scope)
        if a.is_const and b.is_const:
            return const(BoolT(), a.const or b.const)
        operands = codes(a, b)
        if operands is not None:
            return from_code(BoolT(), f"({operands[0]} or {operands[1]})")
        fa, fb = a.fn, b.fn
        return E(BoolT(), lambda s: fa(s) or fb(s))

    def _x_lnot(self, node: Tree, scope: Scope, expected: P4Type | None) -> E:
        a = self._bool_operand(node.children[0], scope)
        if a.is_const:
            return const(BoolT(), not a.const)
        if a.code is not None:
            return from_code(BoolT(), f"(not {a.code})")
        fa = a.fn
        return E(BoolT(), lambda s: not fa(s))

    def _x_bnot(self, node: Tree, scope: Scope, expected: P4Type | None) -> E:
        a = self.expr(node.children[0], scope, expected)
        if isinstance(a.type, IntLitT) and isinstance(expected, BitT):
            a = self.coerce(a, expected, node)
        t = a.type
        if not isinstance(t, BitT):
            raise self.type_error(node, f"~ needs a fixed-width operand, got {t}")
        w = wrapper(t)
        if a.is_const:
            return const(t, w(~a.const))
        fa = a.fn
        if not t.signed:
            m = _mask(t.width)
            if a.code is not None:
                return from_code(t, f"({a.code} ^ {m})")
            return E(t, lambda s: fa(s) ^ m)
        return E(t, lambda s: w(~fa(s)))

    def _x_neg(self, node: Tree, scope: Scope, expected: P4Type | None) -> E:
        a = self.expr(node.children[0], scope, expected)
        t = a.type
        if isinstance(t, IntLitT):
            if a.is_const:
                return const(t, -a.const)
        if not isinstance(t, BitT | IntLitT):
            raise self.type_error(node, f"unary - needs a numeric operand, got {t}")
        w = wrapper(t) or (lambda v: v)
        if a.is_const:
            return const(t, w(-a.const))
        fa = a.fn
        return E(t, lambda s: w(-fa(s)))

    def _shift(self, node: Tree, scope: Scope, left: bool, expected: P4Type | None) -> E:
        a = self.expr(node.children[0], scope, expected)
        b = self.expr(node.children[1], scope)
        if isinstance(a.type, IntLitT) and isinstance(expected, BitT) and not b.is_const:
            a = self.coerce(a, expected, node)
        t = a.type
        if not isinstance(t, BitT | IntLitT):
            raise self.type_error(node, f"cannot shift a value of type {t}")
        if isinstance(b.type, BitT) and b.type.signed:
            raise self.type_error(node, "shift amount must be unsigned")
        w = wrapper(t)
        if left:
            def op(x: int, y: int) -> int:
                return x << y if y < 4096 else 0
        else:
            def op(x: int, y: int) -> int:
                return x >> y
        sym = None
        if b.is_const and 0 <= int(b.const) < 4096:
            sym = "<<" if left else ">>"
        return self._binary(a, b, t, op, wrap=w is not None, sym=sym)

    def _x_shl(self, node: Tree, scope: Scope, expected: P4Type | None) -> E:
        return self._shift(node, scope, True, expected)

    def _x_shr(self, node: Tree, scope: Scope, expected: P4Type | None) -> E:
        return self._shift(node, scope, False, expected)

    def _x_concat(self, node: Tree, scope: Scope, expected: P4Type | None) -> E:
        a = self.expr(node.children[0], scope)
        b = self.expr(node.children[1], scope)
        for e in (a, b):
            if not isinstance(e.type, BitT):
                raise self.type_error(node, f"++ needs fixed-width operands, got {e.type}")
        assert isinstance(a.type, BitT) and isinstance(b.type, BitT)
        wb = b.type.width
        mb = _mask(wb)
        ma = _mask(a.type.width)
        t = BitT(a.type.width + wb, a.type.signed)
        w = wrapper(t)
        if a.is_const and b.is_const:
            return const(t, w(((a.const & ma) << wb) | (b.const & mb)))
        operands = codes(a, b)
        if operands is not None and not t.signed:
            return from_code(t, f"((({operands[0]} & {ma}) << {wb}) | ({operands[1]} & {mb}))")
        fa, fb = a.fn, b.fn
        return E(t, lambda s: w(((fa(s) & ma) << wb) | (fb(s) & mb)))

    def _x_mux(self, node: Tree, scope: Scope, expected: P4Type | None) -> E:
        c = self._bool_operand(node.children[0], scope)
        a = self.expr(node.children[1], scope, expected)
        b = self.expr(node.children[2], scope, a.type if not isinstance(a.type, IntLitT) else expected)
        if isinstance(a.type, IntLitT) and not isinstance(b.type, IntLitT):
            a = self.coerce(a, b.type, node)
        elif isinstance(b.type, IntLitT) and not isinstance(a.type, IntLitT):
            b = self.coerce(b, a.type, node)
        if not _same_type(a.type, b.type):
            raise self.type_error(node, f"?: branches have types {a.type} and {b.type}")
        operands = codes(c, a, b)
        if operands is not None and field_is_scalar(a.type):
            return from_code(a.type, f"({operands[1]} if {operands[0]} else {operands[2]})")
        fc, fa, fb = c.fn, a.fn, b.fn
        return E(a.type, lambda s: fa(s) if fc(s) else fb(s))
