"""Loops and compound assignment (P4-16 1.2.5): `for (init; cond; update)`, `for (T x in a .. b)`,
`break`, `continue`, and `x op= e`.

A compound assignment compiles as `x = x op e` (the operator's own typing and wrapping), with
the left side's indices evaluated once, first, when calls are involved (see
`StmtCompiler.hoist_indices`). Loop bodies are compiled once and run as closures; `break` and
`continue` are exceptions caught by the innermost loop.
"""

from __future__ import annotations

from typing import Any

from lark import Tree

from p4switch.compiler.compiled import Fn, Scope
from p4switch.compiler.stmt import seq
from p4switch.frontend.types import BitT
from p4switch.runtime import BreakSignal, ContinueSignal

#: `op=` to the expression rule of `op` (p4.lark).
COMPOUND_OPS = {
    "+=": "plus", "-=": "minus", "*=": "times", "/=": "div", "%=": "mod", "&=": "band",
    "|=": "bor", "^=": "bxor", "<<=": "shl", "|+|=": "sat_plus", "|-|=": "sat_minus",
}


class LoopCompiler:
    """Mixin of the Compiler: loops, `break`/`continue`, compound assignment."""

    def _compound(self, node: Tree, lvalue: Any, op: str, value: Any, scope: Scope) -> Fn:
        pre, lvalue, scope = self.hoist_indices(lvalue, value, scope)  # indices evaluated once
        target = self.lvalue(lvalue, scope)
        assign = self._assign(node, target, Tree(op, [lvalue, value], meta=node.meta), scope)
        return seq(pre + [assign]) if pre else assign

    def _s_compound_assignment(self, node: Tree, scope: Scope) -> Fn:
        lvalue, op, value = node.children
        return self._compound(node, lvalue, COMPOUND_OPS[str(op)], value, scope)

    def _s_shr_assignment(self, node: Tree, scope: Scope) -> Fn:
        lvalue, value = node.children
        return self._compound(node, lvalue, "shr", value, scope)

    def _s_break_stmt(self, node: Tree, scope: Scope) -> Fn:
        if not scope.lookup("$loop"):
            raise self.type_error(node, "break outside a for loop")

        def do_break(s: list) -> None:
            raise BreakSignal()
        return do_break

    def _s_continue_stmt(self, node: Tree, scope: Scope) -> Fn:
        if not scope.lookup("$loop"):
            raise self.type_error(node, "continue outside a for loop")

        def do_continue(s: list) -> None:
            raise ContinueSignal()
        return do_continue

    def _for_simple(self, node: Tree, scope: Scope) -> Fn | None:
        kind = node.data
        if kind == "for_var_decl":
            type_ref, name, init = node.children
            return self._s_var_decl(Tree("var_decl", [None, type_ref, name, init], meta=node.meta), scope)
        if kind == "for_assign":
            return self._s_assignment(Tree("assignment", list(node.children), meta=node.meta), scope)
        if kind == "for_compound":
            return self._s_compound_assignment(Tree("compound_assignment", list(node.children), meta=node.meta), scope)
        return self._s_method_call_stmt(Tree("method_call_stmt", list(node.children), meta=node.meta), scope)

    def _for_list(self, node: Tree | None, scope: Scope) -> list[Fn]:
        if node is None:
            return []
        return [fn for fn in (self._for_simple(c, scope) for c in node.children if isinstance(c, Tree)) if fn]

    def _s_for_stmt(self, node: Tree, scope: Scope) -> Fn:
        init_node, cond_node, update_node, body_node = node.children
        inner = scope.child()
        inner.names["$loop"] = True
        init = self._for_list(init_node, inner)
        cond = self.value_fn(self._bool_operand(cond_node, inner)) if cond_node is not None else (lambda s: True)
        update = self._for_list(update_node, inner)
        body = self.stmt(body_node, inner.child()) or (lambda s: None)

        def for_loop(s: list) -> None:
            for fn in init:
                fn(s)
            while cond(s):
                try:
                    body(s)
                except BreakSignal:
                    break
                except ContinueSignal:
                    pass
                for fn in update:
                    fn(s)
        return for_loop

    def _s_for_in_stmt(self, node: Tree, scope: Scope) -> Fn:
        type_ref, name, low_node, high_node, body_node = node.children
        t = self.resolve_type(type_ref)
        if not isinstance(t, BitT):
            raise self.type_error(node, f"for ... in a .. b needs a bit<W> or int<W> variable, not {t}")
        inner = scope.child()
        inner.names["$loop"] = True
        low = self.value_fn(self.coerce(self.expr(low_node, inner, t), t, low_node))
        high = self.value_fn(self.coerce(self.expr(high_node, inner, t), t, high_node))
        decl = Tree("var_decl", [None, type_ref, name, None], meta=node.meta)
        self._s_var_decl(decl, inner)
        place = inner.names[str(name.children[0] if isinstance(name, Tree) else name)].place
        base = place.base
        if base is None:
            raise self.unsupported(node, "a loop variable without a slot of its own")
        body = self.stmt(body_node, inner.child()) or (lambda s: None)

        def for_in(s: list) -> None:
            first, last = low(s), high(s)  # the range is evaluated once, both ends included
            value = first
            while value <= last:
                s[base] = value
                try:
                    body(s)
                except BreakSignal:
                    break
                except ContinueSignal:
                    pass
                value += 1
        return for_in


