"""Statements and calls: assignments, control flow, action/function/table calls, methods."""

from __future__ import annotations

import itertools
from typing import Any

from lark import Token, Tree

from p4switch.compiler.compiled import (
    E, ActionImpl, Const, ControlImpl, ExternInstance, Fn, FunctionImpl, PacketParam, Place,
    Scope, TableImpl, Var, _same_type, field_is_scalar, generate,
)
from p4switch.expr_text import expr_text
from p4switch.frontend.types import BitT, BoolT, DeclT, HeaderT, P4Type, StackT, StructT, VoidT, slot_count
from p4switch.runtime import ExitSignal, ReturnSignal


_fresh_names = itertools.count()


def _inline(fn: Fn) -> tuple[list[str], dict[str, Any]]:
    """Source lines running `fn` (its own lines when it was generated, else a call)."""
    lines = getattr(fn, "lines", None)
    if lines is not None:
        return lines, fn.env  # type: ignore[attr-defined]
    name = f"_f{next(_fresh_names)}"
    return [f"{name}(s)"], {name: fn}


def statement(lines: list[str], env: dict[str, Any]) -> Fn:
    """Generate a statement function from source lines; it keeps them for inlining."""
    body = "".join(f"    {line}\n" for line in lines or ["pass"])
    fn = generate(f"def stmt(s):\n{body}", "stmt", env)
    fn.lines, fn.env = list(lines), env  # type: ignore[attr-defined]
    return fn


def seq(fns: list[Fn]) -> Fn:
    """One function running the statements in order (generated straight-line code)."""
    lines: list[str] = []
    env: dict[str, Any] = {}
    for fn in fns:
        if fn is None:
            continue
        more, more_env = _inline(fn)
        lines += more
        env.update(more_env)
    return statement(lines, env)


def _indent(lines: list[str]) -> list[str]:
    return ["    " + line for line in lines] or ["    pass"]


def _has_call(node: Any) -> bool:
    return isinstance(node, Tree) and any(
        sub.data in ("call", "call_generic") for sub in node.iter_subtrees())


def _is_literal(node: Any) -> bool:
    return isinstance(node, Tree) and node.data == "int_lit"


def _args(node: Tree | None) -> list:
    if node is None:
        return []
    return list(node.children)


class StmtCompiler:
    """Mixin of the Compiler: statements and calls."""

    # -- statements --------------------------------------------------------------------------

    def stmt(self, node: Any, scope: Scope) -> Fn | None:
        handler = getattr(self, f"_s_{node.data}", None)
        if handler is None:
            raise self.unsupported(node, f"statement {node.data} is not supported")
        return handler(node, scope)

    def block(self, stmts: list, scope: Scope) -> Fn:
        inner = scope.child()
        return seq([self.stmt(st, inner) for st in stmts])

    def _s_block(self, node: Tree, scope: Scope) -> Fn:
        return self.block(node.children[1:], scope)

    def _s_switch_body(self, node: Tree, scope: Scope) -> Fn:
        return self.block(node.children, scope)

    def _s_empty_stmt(self, node: Tree, scope: Scope) -> None:
        return None

    def _s_exit_stmt(self, node: Tree, scope: Scope) -> Fn:
        def do_exit(s: list) -> None:
            raise ExitSignal()
        return do_exit

    def _s_return_stmt(self, node: Tree, scope: Scope) -> Fn:
        if node.children and node.children[0] is not None:
            ret_t = scope.lookup("$return")
            e = self.expr(node.children[0], scope, ret_t)
            if ret_t is not None:
                e = self.coerce(e, ret_t, node)
            fn = self.value_fn(e)

            def do_return_value(s: list) -> None:
                raise ReturnSignal(fn(s))
            return do_return_value

        def do_return(s: list) -> None:
            raise ReturnSignal()
        return do_return

    def _s_var_decl(self, node: Tree, scope: Scope) -> Fn | None:
        t = self.resolve_type(node.children[1])
        name = str(node.children[2].children[0])
        place = self.alloc(t)
        scope.names[name] = Var(place)
        init = node.children[3]
        if init is None:
            initial = self._initial(t)
            if len(initial) == 1:
                b, v = place.base, initial[0]

                def reset(s: list) -> None:
                    s[b] = v
                return reset
            writer = place.block_writer()
            return lambda s: writer(s, list(initial))
        target = E(t, place=place, fn=place.reader())
        return self._assign(node, target, init, scope)

    def _s_const_decl(self, node: Tree, scope: Scope) -> None:
        scope.names[str(node.children[2].children[0])] = Const(self._const_value(node, scope))
        return None

    def _s_instantiation(self, node: Tree, scope: Scope) -> None:
        raise self.unsupported(node, "instantiations inside blocks are not supported")

    def _s_assignment(self, node: Tree, scope: Scope) -> Fn:
        lvalue, value = node.children
        pre, lvalue, scope = self.hoist_indices(lvalue, value, scope)
        target = self.lvalue(lvalue, scope)
        assign = self._assign(node, target, value, scope)
        return seq(pre + [assign]) if pre else assign

    def hoist_indices(self, lvalue: Any, value: Any, scope: Scope) -> tuple[list[Fn], Any, Scope]:
        """Left-to-right evaluation (P4-16 8.1) as p4c orders it: when an index of `lvalue`
        makes calls, each non-constant index of `lvalue` is evaluated first, into a temporary,
        and the returned lvalue reads the temporaries. An index without calls is read when
        the value is written, after the right side, as in p4c's output for BMv2
        (tests/p4programs/lang_eval_order.p4 shows both)."""
        if not _has_call(lvalue):
            return [], lvalue, scope
        inner = scope.child()
        pre: list[Fn] = []

        def walk(node: Any) -> Any:
            if not isinstance(node, Tree) or node.data not in ("index", "member", "slice"):
                return node
            children = [walk(node.children[0])] + list(node.children[1:])
            if node.data == "index" and not _is_literal(children[1]):
                index = self.expr(children[1], inner)
                t = index.type if isinstance(index.type, BitT) else BitT(32)
                place = self.alloc(t)
                name = f"$index{len(pre)}"
                inner.names[name] = Var(place)
                write, read = place.writer(), self.value_fn(self.coerce(index, t, children[1]))
                pre.append(lambda s, write=write, read=read: write(s, read(s)))
                children[1] = Tree("var", [Token("IDENTIFIER", name)], meta=children[1].meta)
            return Tree(node.data, children, meta=node.meta)

        return pre, walk(lvalue), inner

    def _assign(self, node: Tree, target: E, value_node: Any, scope: Scope) -> Fn:
        value = self.expr(value_node, scope, target.type)
        value = self.coerce(value, target.type, node)
        write = self.writer_for(node, target)
        if isinstance(target.type, HeaderT) and isinstance(value.type, HeaderT) and isinstance(
                target.extra, tuple) and target.extra and target.extra[0] == "stack_next":
            raise self.unsupported(node, "assigning to .next is not supported")
        static_scalar = (target.place is not None and target.place.base is not None
                         and not isinstance(target.type, HeaderT | StructT | StackT)
                         and not (isinstance(target.extra, tuple) and target.extra
                                  and target.extra[0] == "slice"))
        if static_scalar and value.code is not None:
            return statement([f"s[{target.place.base}] = {value.code}"], {})  # type: ignore[union-attr]
        if value.is_const and not isinstance(target.type, HeaderT | StructT | StackT):
            v = value.const
            return lambda s: write(s, v)
        fn = self.value_fn(value)
        if static_scalar:
            b = target.place.base  # type: ignore[union-attr]

            def assign_static(s: list) -> None:
                s[b] = fn(s)
            return assign_static
        return lambda s: write(s, fn(s))

    def _s_if_stmt(self, node: Tree, scope: Scope) -> Fn:
        cond = self._bool_operand(node.children[0], scope)
        then = self.stmt(node.children[1], scope.child()) or (lambda s: None)
        other = node.children[2]
        fc = cond.fn
        if cond.code is not None:
            then_lines, env = _inline(then)
            lines = [f"if {cond.code}:"] + _indent(then_lines)
            env = dict(env)
            if other is not None:
                else_lines, else_env = _inline(self.stmt(other, scope.child()) or (lambda s: None))
                lines += ["else:"] + _indent(else_lines)
                env.update(else_env)
            return statement(lines, env)
        if other is None:
            def if_then(s: list) -> None:
                if fc(s):
                    then(s)
            return if_then
        orelse = self.stmt(other, scope.child()) or (lambda s: None)

        def if_else(s: list) -> None:
            if fc(s):
                then(s)
            else:
                orelse(s)
        return if_else

    def _s_method_call_stmt(self, node: Tree, scope: Scope) -> Fn:
        e = self.call(node, scope, statement=True)
        fn = e.fn
        assert fn is not None
        return fn

    def _s_switch_stmt(self, node: Tree, scope: Scope) -> Fn:
        subject = self.expr(node.children[0], scope)
        cases = node.children[1:]
        is_action_run = isinstance(subject.extra, tuple) and subject.extra[0] == "action_run"
        table_impl: TableImpl | None = subject.extra[1] if is_action_run else None
        mapping: dict[Any, Fn] = {}
        default: Fn | None = None
        pending: list[Any] = []
        for case in cases:
            label, body = case.children
            if isinstance(label, Tree) and label.data == "default_label":
                key: Any = "$default"
            elif is_action_run:
                assert table_impl is not None
                aname = str(label.children[0]) if isinstance(label, Tree) and label.data == "var" else None
                qualified = self._action_in_table(table_impl, aname, label)
                key = qualified
            else:
                le = self.coerce(self.expr(label, scope, subject.type), subject.type, label)
                if not le.is_const:
                    raise self.type_error(label, "switch labels must be constants")
                key = le.const
            pending.append(key)
            if body is None:
                continue
            fn = self.stmt(body, scope.child()) or (lambda s: None)
            for k in pending:
                if k == "$default":
                    default = fn
                else:
                    if k in mapping:
                        raise self.type_error(label, "duplicate switch label")
                    mapping[k] = fn
            pending = []
        for k in pending:  # trailing labels without a body do nothing
            if k == "$default":
                default = lambda s: None  # noqa: E731
            else:
                mapping[k] = lambda s: None
        get = subject.fn
        assert get is not None

        def switch(s: list) -> None:
            fn = mapping.get(get(s), default)
            if fn is not None:
                fn(s)
        return switch

    def _action_in_table(self, impl: TableImpl, name: str | None, node: Any) -> str:
        for qualified in impl.table.actions:
            if name is not None and (qualified == name or qualified.endswith("." + name)):
                return qualified
        raise self.type_error(node, f"{name} is not an action of table {impl.info.name}")

    # -- calls -------------------------------------------------------------------------------

    def call(self, node: Tree, scope: Scope, statement: bool) -> E:
        if node.data == "method_call_stmt":
            callee = node.children[0]
            if len(node.children) == 3:
                type_args, args = node.children[1], _args(node.children[2])
            else:
                type_args, args = None, _args(node.children[1])
        elif node.data == "call_generic":
            callee, type_args, args = node.children[0], node.children[1], _args(node.children[2])
        else:
            callee, type_args, args = node.children[0], None, _args(node.children[1])
        if isinstance(callee, Tree) and callee.data == "member":
            method = str(callee.children[1].children[0])
            base = self.expr(callee.children[0], scope)
            return self._method_call(node, base, method, args, type_args, scope)
        if isinstance(callee, Tree) and callee.data == "direct_apply":
            return self._direct_invocation(node, callee, args, scope)
        if isinstance(callee, Tree) and callee.data == "var":
            target = self.expr(callee, scope)
            extra = target.extra
            if isinstance(extra, ActionImpl):
                return self._call_action(node, extra, args, scope)
            if isinstance(extra, tuple) and extra[0] == "extern_function":
                return self._extern_function(node, extra[1], args, type_args, scope)
            if isinstance(extra, tuple) and extra[0] == "function":
                return self._call_function(node, self.function(extra[1], type_args, args, scope), args, scope)
            if isinstance(extra, FunctionImpl):
                return self._call_function(node, extra, args, scope)
        raise self.type_error(node, f"{_callee_text(callee)} cannot be called")

    def _call_action(self, node: Tree, action: ActionImpl, args: list, scope: Scope) -> E:
        if not getattr(self, "action_depth", 0):  # called from an apply block: p4c lists it in P4Info
            self.info.direct_actions.add(action.name)
        if len(args) != len(action.params):
            raise self.type_error(node, f"action {action.name} takes {len(action.params)} "
                                        f"argument(s), got {len(args)}")
        copy_in: list[Fn] = []
        copy_out: list[Fn] = []
        for arg, (pname, ptype, direction, slot) in zip(args, action.params):
            self._bind_param(node, arg, pname, ptype, direction, Place(ptype, slot), scope,
                             copy_in, copy_out)
        body = action.body
        pre, post = seq(copy_in), seq(copy_out)

        def run_action(s: list) -> None:
            pre(s)
            try:
                body(s)
            except ReturnSignal:
                pass
            except ExitSignal:  # `exit` still copies the arguments back (P4-16, exit statement)
                post(s)
                raise
            post(s)
        return E(VoidT(), run_action)

    def _bind_param(self, node: Tree, arg: Any, pname: str, ptype: P4Type, direction: str | None,
                    place: Place, scope: Scope, copy_in: list, copy_out: list) -> None:
        if isinstance(arg, Tree) and arg.data == "named_arg":
            arg = arg.children[1]
        if isinstance(arg, Tree) and arg.data == "dontcare_arg":
            # `_`: the callee's out value is not wanted; the parameter keeps its own storage.
            if direction != "out":
                raise self.type_error(arg, f"_ (don't care) is only allowed for an out parameter, "
                                           f"not for {direction or 'in'} parameter {pname}")
            return
        if direction in ("out", "inout"):
            target = self.lvalue(arg, scope)
            if not _same_type(target.type, ptype):
                raise self.type_error(arg, f"argument for {direction} parameter {pname} has type "
                                           f"{target.type}, expected {ptype}")
            write_param = place.block_writer() if not field_is_scalar(ptype) else place.writer()
            read_param = place.block_reader() if not field_is_scalar(ptype) else place.reader()
            write_arg = self.writer_for(arg, target)
            if direction == "inout":
                read_arg = self.value_fn(target)
                copy_in.append(lambda s: write_param(s, read_arg(s)))
            copy_out.append(lambda s: write_arg(s, read_param(s)))
        else:
            value = self.coerce(self.expr(arg, scope, ptype), ptype, arg)
            fn = self.value_fn(value)
            write_param = place.block_writer() if not field_is_scalar(ptype) else place.writer()
            copy_in.append(lambda s: write_param(s, fn(s)))

    def _call_function(self, node: Tree, fn_impl: FunctionImpl, args: list, scope: Scope) -> E:
        if len(args) != len(fn_impl.params):
            raise self.type_error(node, f"function {fn_impl.name} takes {len(fn_impl.params)} "
                                        f"argument(s), got {len(args)}")
        copy_in: list[Fn] = []
        copy_out: list[Fn] = []
        for arg, (pname, ptype, direction, place) in zip(args, fn_impl.params):
            self._bind_param(node, arg, pname, ptype, direction, place, scope, copy_in, copy_out)
        pre, post, body = seq(copy_in), seq(copy_out), fn_impl.body

        def run_function(s: list) -> Any:
            pre(s)
            try:
                body(s)
                result = None
            except ReturnSignal as ret:
                result = ret.value
            except ExitSignal:
                post(s)
                raise
            post(s)
            return result
        return E(fn_impl.ret, run_function)

    # -- methods -----------------------------------------------------------------------------

    def _method_call(self, node: Tree, base: E, method: str, args: list, type_args: Any,
                     scope: Scope) -> E:
        extra = base.extra
        if isinstance(extra, TableImpl):
            if method != "apply":
                raise self.type_error(node, f"tables have no method {method}")
            return E(VoidT(), extra.apply, extra=("apply_result", extra))
        if isinstance(extra, ExternInstance):
            return self._extern_method(node, extra, method, args, scope)
        if isinstance(extra, PacketParam):
            return self._packet_method(node, extra, method, args, type_args, scope)
        if isinstance(extra, ControlImpl):
            if method != "apply":
                raise self.type_error(node, f"{method} cannot be called on a {extra.kind}")
            return self._apply_block(node, extra, args, scope)
        t = base.type
        if isinstance(t, HeaderT) and base.place is not None:
            return self._header_method(node, base.place, method, base)
        if isinstance(t, StructT) and t.is_union and base.place is not None and method == "isValid":
            valid_slots = []
            offset = 0
            for _, ft in t.fields:
                valid_slots.append(base.place.at(offset, BoolT()).reader())
                offset += slot_count(ft)
            return E(BoolT(), lambda s: any(r(s) for r in valid_slots))
        if isinstance(t, StackT) and base.place is not None and method in ("push_front", "pop_front"):
            return self._stack_shift(node, base.place, t, method, args, scope)
        raise self.type_error(node, f"{t} has no method {method}")

    def _header_method(self, node: Tree, place: Place, method: str, base: E) -> E:
        if method in ("setValid", "setInvalid") and place.readonly:
            raise self.type_error(node, f"{method} on a read-only header (an `in` parameter)")
        valid = place.at(0, BoolT())
        read, write = valid.reader(), valid.writer()
        union_siblings = self._union_siblings(base)
        if method == "isValid":
            return E(BoolT(), read)
        if method == "setValid":
            clear_self = self._clearer(place)

            def set_valid(s: list) -> None:  # as BMv2's add_header: an invalid header starts at 0
                for clear in union_siblings:
                    clear(s)
                if not read(s):
                    clear_self(s)
                write(s, True)
            return E(VoidT(), set_valid)
        if method == "setInvalid":
            return E(VoidT(), self._clearer(place))
        raise self.type_error(node, f"headers have no method {method}")

    def _union_siblings(self, base: E) -> list:
        return list(base.extra[1]) if isinstance(base.extra, tuple) and base.extra and \
            base.extra[0] == "union_member" else []

    def _stack_shift(self, node: Tree, place: Place, t: StackT, method: str, args: list,
                     scope: Scope) -> E:
        if len(args) != 1:
            raise self.type_error(node, f"{method} takes one argument")
        count = self.const_int(args[0])
        stride = slot_count(t.elem)
        assert place.base is not None
        first, size, idx = place.base + 1, t.size, place.base
        empty = self._initial(t.elem)

        def shift(s: list) -> None:
            elems = [s[first + i * stride:first + (i + 1) * stride] for i in range(size)]
            if method == "push_front":
                elems = [list(empty) for _ in range(min(count, size))] + elems
                elems = elems[:size]
                s[idx] = min(size, s[idx] + count)
            else:
                elems = elems[count:] + [list(empty) for _ in range(min(count, size))]
                s[idx] = max(0, s[idx] - count)
            for i, e in enumerate(elems):
                s[first + i * stride:first + (i + 1) * stride] = e
        return E(VoidT(), shift)

    def _direct_invocation(self, node: Tree, callee: Tree, args: list, scope: Scope) -> E:
        """`C.apply(...)` on a control or parser type: an instance of its own, named after it."""
        type_tok = callee.children[1]
        t = self._named_type(type_tok)
        if not isinstance(t, DeclT) or t.kind not in ("control", "parser"):
            raise self.type_error(node, f"{_callee_text(callee)} cannot be called")
        prefix = scope.lookup("$prefix") or ""
        name = str(type_tok)
        impl = self.compile_block_instance(t, f"{prefix}.{name}" if prefix else name, [], scope)
        return self._apply_block(node, impl, args, scope)

    def _apply_block(self, node: Tree, impl: ControlImpl, args: list, scope: Scope) -> E:
        params = [p for p in impl.params if p[3] is not None]
        if len(args) != len(impl.params):
            raise self.type_error(node, f"apply takes {len(impl.params)} argument(s), got {len(args)}")
        copy_in: list[Fn] = []
        copy_out: list[Fn] = []
        for arg, (pname, ptype, direction, place) in zip(args, impl.params):
            if place is None:
                continue
            self._bind_param(node, arg, pname, ptype, direction, place, scope, copy_in, copy_out)
        del params
        pre, post, run = seq(copy_in), seq(copy_out), impl.run

        def apply(s: list) -> None:
            pre(s)
            try:
                run(s)
            except ExitSignal:
                post(s)
                raise
            post(s)
        return E(VoidT(), apply)


def _callee_text(node: Any) -> str:
    return expr_text(node)


