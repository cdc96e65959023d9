"""C for loops and compound assignment (P4-16 1.2.5), as `compile_loops.py` runs them in Python.

`for (init; cond; update) body` becomes a `while` whose `continue` jumps to the update and
whose `break` jumps past the loop (gotos, so a `break` inside a `switch` leaves the loop as P4
says, not the C switch); `for (T x in a .. b)` evaluates both ends once and counts in 64 bits,
so `b` at the top of T's range ends the loop. `x op= e` is `x = x op e` on a static scalar.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lark import Tree

from p4switch.compiler.loops import COMPOUND_OPS
from p4switch.frontend.types import BitT, P4Type
from p4switch.native.cgen_stmt import StmtGen


@dataclass(frozen=True)
class _Typed:
    """The type of a value the compiler formed without a node of the program (`x op e`)."""

    type: P4Type


class LoopGen(StmtGen):
    """Mixin of the generator: loops, `break`/`continue`, compound assignment."""

    loops: list[int]
    label_count: int

    def _loop_begin(self) -> int:
        self.label_count += 1
        self.loops.append(self.label_count)
        return self.label_count

    def _loop_end(self, n: int, out: list[str], body_ind: str) -> None:
        self.loops.pop()
        out.append(f"{body_ind}L{n}_continue: __attribute__((unused));")

    def _st_break_stmt(self, node: Tree, out: list[str], ind: str) -> None:
        if not self.loops:
            raise self.fail(node, "break outside a loop")
        out.append(f"{ind}goto L{self.loops[-1]}_break;")

    def _st_continue_stmt(self, node: Tree, out: list[str], ind: str) -> None:
        if not self.loops:
            raise self.fail(node, "continue outside a loop")
        out.append(f"{ind}goto L{self.loops[-1]}_continue;")

    def _for_simple(self, node: Tree, out: list[str], ind: str) -> None:
        kind = node.data
        if kind == "for_var_decl":
            type_ref, name, init = node.children
            key = id(name)
            base = self.rec.var_slots.get(key)
            if base is None or key in self.rec.conflicts:
                raise self.fail(node, "a loop variable compiled in several contexts")
            self.assign_place(node, base, self.rec.var_types[key], init, out, ind)
            return
        data = {"for_assign": "assignment", "for_compound": "compound_assignment",
                "for_call": "method_call_stmt"}[kind]
        self.stmt(Tree(data, list(node.children), meta=node.meta), out, ind)

    def _for_list(self, node: Tree | None, out: list[str], ind: str) -> None:
        if node is not None:
            for child in node.children:
                if isinstance(child, Tree):
                    self._for_simple(child, out, ind)

    def _st_for_stmt(self, node: Tree, out: list[str], ind: str) -> None:
        init_node, cond_node, update_node, body_node = node.children
        inner, body_ind = ind + "    ", ind + "        "
        out.append(f"{ind}{{")
        self._for_list(init_node, out, inner)
        cond = self.cx(cond_node) if cond_node is not None else "1"
        out.append(f"{inner}while ({cond}) {{")
        n = self._loop_begin()
        self.stmt(body_node, out, body_ind)
        self._loop_end(n, out, body_ind)
        self._for_list(update_node, out, body_ind)
        out.append(f"{inner}}}")
        out.append(f"{inner}L{n}_break: __attribute__((unused));")
        out.append(f"{ind}}}")

    def _st_for_in_stmt(self, node: Tree, out: list[str], ind: str) -> None:
        _, name, low_node, high_node, body_node = node.children
        key = id(name)
        base = self.rec.var_slots.get(key)
        t = self.rec.var_types.get(key)
        if base is None or key in self.rec.conflicts or not isinstance(t, BitT):
            raise self.fail(node, "a loop variable compiled in several contexts")
        if t.signed:
            raise self.fail(node, "a loop over an int<N> range")
        inner, body_ind = ind + "    ", ind + "        "
        n = self._loop_begin()
        out.append(f"{ind}{{")
        out.append(f"{inner}uint64_t lo{n}_ = {self.masked(self.cx(low_node), t)}, "
                   f"hi{n}_ = {self.masked(self.cx(high_node), t)};")
        out.append(f"{inner}for (uint64_t v{n}_ = lo{n}_; v{n}_ <= hi{n}_; v{n}_++) {{")
        out.append(f"{body_ind}S[{base}] = v{n}_;")
        self.stmt(body_node, out, body_ind)
        self._loop_end(n, out, body_ind)
        out.append(f"{inner}}}")
        out.append(f"{inner}L{n}_break: __attribute__((unused));")
        out.append(f"{ind}}}")

    def _compound(self, node: Tree, lvalue: Any, op: str, value: Any, out: list[str], ind: str) -> None:
        lvalue = self.hoisted_target(lvalue, out, ind)
        target = self.e(lvalue)
        if target.place is None or target.place.base is None or not isinstance(target.type, BitT) \
                or isinstance(target.extra, tuple):
            raise self.fail(node, "compound assignment to a place that is not a static scalar")
        handler = getattr(self, f"_cx_{op}")
        code = handler(Tree(op, [lvalue, value]), _Typed(target.type))
        out.append(f"{ind}S[{target.place.base}] = {self.masked(code, target.type)};")

    def _st_compound_assignment(self, node: Tree, out: list[str], ind: str) -> None:
        lvalue, op, value = node.children
        self._compound(node, lvalue, COMPOUND_OPS[str(op)], value, out, ind)

    def _st_shr_assignment(self, node: Tree, out: list[str], ind: str) -> None:
        lvalue, value = node.children
        self._compound(node, lvalue, "shr", value, out, ind)

