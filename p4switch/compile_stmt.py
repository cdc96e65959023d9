"""Statements and calls: assignments, control flow, actions, tables and v1model externs."""

from __future__ import annotations

import logging
from typing import Any

from lark import Tree

from p4switch import hashes
from p4switch.compiled import (
    E, ActionImpl, Const, ControlImpl, ExternInstance, Fn, FunctionImpl, PacketParam, Place,
    Scope, TableImpl, Var, _mask, _same_type, const, generate,
)
from p4switch.externs import GREEN
from p4switch.frontend.types import (
    BitT, BoolT, EnumT, ErrorT, HeaderT, ListT, P4Type, StackT, StringT, StructT,
    VarbitT, VoidT, field_offset, scalar_width, slot_count,
)
from p4switch.runtime import (
    DROP_PORT, ExitSignal, ParserError, PipelineAssertion, ReturnSignal,
)

LOG = logging.getLogger("p4switch.pipeline")


def seq(fns: list[Fn]) -> Fn:
    fns = [f for f in fns if f is not None]
    if not fns:
        return lambda s: None
    if len(fns) == 1:
        return fns[0]
    env = {f"f{i}": f for i, f in enumerate(fns)}
    body = "".join(f"    f{i}(s)\n" for i in range(len(fns)))
    return generate(f"def run(s):\n{body}", "run", env)


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
        target = self.lvalue(node.children[0], scope)
        return self._assign(node, target, node.children[1], scope)

    def _assign(self, node: Tree, target: E, value_node: Any, scope: Scope) -> Fn:
        value = self.expr(value_node, scope, target.type)
        value = self.coerce(value, target.type, node)
        write = self.writer_for(node, target)
        if isinstance(target.type, HeaderT) and isinstance(value.type, HeaderT) and isinstance(
                target.extra, tuple) and target.extra and target.extra[0] == "stack_next":
            raise self.unsupported(node, "assigning to .next is not supported")
        if value.is_const and not isinstance(target.type, HeaderT | StructT | StackT):
            v = value.const
            if target.place is not None and target.place.base is not None and write is not None \
                    and not (isinstance(target.extra, tuple) and target.extra and target.extra[0] == "slice"):
                b = target.place.base

                def assign_const(s: list) -> None:
                    s[b] = v
                return assign_const
            return lambda s: write(s, v)
        fn = self.value_fn(value)
        if target.place is not None and target.place.base is not None and not isinstance(
                target.type, HeaderT | StructT | StackT) and not (
                isinstance(target.extra, tuple) and target.extra and target.extra[0] == "slice"):
            b = target.place.base
            k = getattr(fn, "slot", None)
            if k is not None:
                def copy_slot(s: list) -> None:
                    s[b] = s[k]
                return copy_slot

            def assign_static(s: list) -> None:
                s[b] = fn(s)
            return assign_static
        return lambda s: write(s, fn(s))

    def _s_if_stmt(self, node: Tree, scope: Scope) -> Fn:
        cond = self._bool_operand(node.children[0], scope)
        then = self.stmt(node.children[1], scope.child()) or (lambda s: None)
        other = node.children[2]
        fc = cond.fn
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
        if isinstance(callee, Tree) and callee.data == "var":
            target = self.expr(callee, scope)
            extra = target.extra
            if isinstance(extra, ActionImpl):
                return self._call_action(node, extra, args, scope)
            if isinstance(extra, tuple) and extra[0] == "extern_function":
                return self._extern_function(node, extra[1], args, type_args, scope)
            if isinstance(extra, tuple) and extra[0] == "function":
                return self._call_function(node, self.function(extra[1]), args, scope)
            if isinstance(extra, FunctionImpl):
                return self._call_function(node, extra, args, scope)
        raise self.type_error(node, f"{_callee_text(callee)} cannot be called")

    def _call_action(self, node: Tree, action: ActionImpl, args: list, scope: Scope) -> E:
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
            post(s)
        return E(VoidT(), run_action)

    def _bind_param(self, node: Tree, arg: Any, pname: str, ptype: P4Type, direction: str | None,
                    place: Place, scope: Scope, copy_in: list, copy_out: list) -> None:
        if isinstance(arg, Tree) and arg.data == "named_arg":
            arg = arg.children[1]
        if direction in ("out", "inout"):
            target = self.lvalue(arg, scope)
            if not _same_type(target.type, ptype):
                raise self.type_error(arg, f"argument for {direction} parameter {pname} has type "
                                           f"{target.type}, expected {ptype}")
            write_param = place.block_writer() if not _scalarish(ptype) else place.writer()
            read_param = place.block_reader() if not _scalarish(ptype) else place.reader()
            write_arg = self.writer_for(arg, target)
            if direction == "inout":
                read_arg = self.value_fn(target)
                copy_in.append(lambda s: write_param(s, read_arg(s)))
            copy_out.append(lambda s: write_arg(s, read_param(s)))
        else:
            value = self.coerce(self.expr(arg, scope, ptype), ptype, arg)
            fn = self.value_fn(value)
            write_param = place.block_writer() if not _scalarish(ptype) else place.writer()
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
        valid = place.at(0, BoolT())
        read, write = valid.reader(), valid.writer()
        union_siblings = self._union_siblings(base)
        if method == "isValid":
            return E(BoolT(), read)
        if method == "setValid":
            def set_valid(s: list) -> None:
                for w in union_siblings:
                    w(s, False)
                write(s, True)
            return E(VoidT(), set_valid)
        if method == "setInvalid":
            return E(VoidT(), lambda s: write(s, False))
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
            run(s)
            post(s)
        return E(VoidT(), apply)

    # -- flattening data for hashes, checksums and digests -------------------------------------

    def leaves(self, e: E, node: Any) -> list[tuple[Fn, int]]:
        """(value closure, bit width) of every scalar inside `e`, in order."""
        t = e.type
        if isinstance(t, ListT) and e.extra is not None and e.place is None:
            out: list[tuple[Fn, int]] = []
            for item in e.extra:
                out.extend(self.leaves(item, node))
            return out
        if isinstance(t, StructT) and e.place is None and e.fn is not None and all(
                isinstance(ft, BitT | BoolT) for _, ft in t.fields):
            build = e.fn
            out = []
            for i, (_, ft) in enumerate(t.fields):
                w = 1 if isinstance(ft, BoolT) else ft.width
                out.append(((lambda k, m: (lambda s: int(build(s)[k]) & m))(i, _mask(w)), w))
            return out
        if isinstance(t, HeaderT | StructT):
            if e.place is None:
                raise self.unsupported(node, "only lvalues may be hashed or digested")
            out = []
            for fname, ft in t.fields:
                off, _ = field_offset(t, fname)  # type: ignore[misc]
                sub = e.place.at(off, ft)
                out.extend(self.leaves(E(ft, sub.reader() if _scalarish(ft) else sub.block_reader(),
                                         place=sub), node))
            return out
        if isinstance(t, BoolT):
            fn = e.fn
            return [(lambda s: 1 if fn(s) else 0, 1)]
        if isinstance(t, BitT):
            fn = e.fn
            if t.signed:
                m = _mask(t.width)
                return [(lambda s: fn(s) & m, t.width)]
            return [(fn, t.width)]
        if isinstance(t, EnumT) and t.repr is not None:
            return [(e.fn, t.repr.width)]
        if isinstance(t, VarbitT):
            return [(e.fn, None)]  # width known per packet: the value is (bits, value)
        raise self.type_error(node, f"a value of type {t} cannot be used as data here")

    def data_bytes(self, e: E, node: Any) -> Fn:
        """Closure packing the leaves of `e` MSB first into bytes (zero-padded at the end)."""
        leaves = self.leaves(e, node)
        if any(w is None for _, w in leaves):
            return self._dynamic_pack(leaves)
        fns = [f for f, _ in leaves]
        widths = [w for _, w in leaves]
        total = sum(widths)
        pad = (-total) % 8
        nbytes = (total + pad) // 8
        shifts = []
        acc = total
        for w in widths:
            acc -= w
            shifts.append(acc + pad)
        slots = [getattr(f, "slot", None) for f in fns]
        if leaves and all(slot is not None for slot in slots):
            terms = " | ".join(f"(s[{slot}] << {sh})" if sh else f"s[{slot}]"
                               for slot, sh in zip(slots, shifts))
            return generate(f"def pack(s):\n    return ({terms}).to_bytes({nbytes}, 'big')\n", "pack")
        pairs = tuple(zip(fns, shifts, [_mask(w) for w in widths]))

        def pack(s: list) -> bytes:
            v = 0
            for f, sh, m in pairs:
                v |= (f(s) & m) << sh
            return v.to_bytes(nbytes, "big")
        return pack

    @staticmethod
    def _dynamic_pack(leaves: list) -> Fn:
        items = [(f, w, _mask(w) if w is not None else 0) for f, w in leaves]

        def pack_dynamic(s: list) -> bytes:
            v = total = 0
            for f, w, m in items:
                if w is None:
                    n, x = f(s)
                    v = (v << n) | x
                    total += n
                else:
                    v = (v << w) | (f(s) & m)
                    total += w
            pad = (-total) % 8
            return (v << pad).to_bytes((total + pad) // 8, "big")
        return pack_dynamic

    # -- v1model extern functions ----------------------------------------------------------------

    def _extern_function(self, node: Tree, name: str, args: list, type_args: Any, scope: Scope) -> E:
        args = [a.children[1] if isinstance(a, Tree) and a.data == "named_arg" else a for a in args]
        handler = getattr(self, f"_v1_{name}", None)
        self.call_type_args = type_args
        if handler is None:
            raise self.unsupported(node, f"extern function {name} is not supported")
        return handler(node, args, scope)

    def _expect_args(self, node: Tree, name: str, args: list, *counts: int) -> None:
        if len(args) not in counts:
            raise self.type_error(node, f"{name} takes {' or '.join(map(str, counts))} "
                                        f"argument(s), got {len(args)}")

    def _v1_mark_to_drop(self, node: Tree, args: list, scope: Scope) -> E:
        self._expect_args(node, "mark_to_drop", args, 1)
        sm = self.lvalue(args[0], scope)
        if not isinstance(sm.type, StructT) or sm.type.name != "standard_metadata_t" or sm.place is None:
            raise self.type_error(node, "mark_to_drop expects standard_metadata")
        spec = sm.place.at(field_offset(sm.type, "egress_spec")[0], BitT(9)).writer()  # type: ignore[index]
        grp = sm.place.at(field_offset(sm.type, "mcast_grp")[0], BitT(16)).writer()  # type: ignore[index]

        def mark_to_drop(s: list) -> None:
            spec(s, DROP_PORT)
            grp(s, 0)
        return E(VoidT(), mark_to_drop)

    def _v1_random(self, node: Tree, args: list, scope: Scope) -> E:
        self._expect_args(node, "random", args, 3)
        out = self.lvalue(args[0], scope)
        lo = self.coerce(self.expr(args[1], scope, out.type), out.type, node).fn
        hi = self.coerce(self.expr(args[2], scope, out.type), out.type, node).fn
        write, rng = self.writer_for(node, out), self.rng
        return E(VoidT(), lambda s: write(s, rng.randint(lo(s), max(lo(s), hi(s)))))

    def _algorithm(self, node: Any, scope: Scope) -> str:
        e = self.expr(node, scope)
        if not isinstance(e.type, EnumT) or e.type.name != "HashAlgorithm" or not e.is_const:
            raise self.type_error(node, "expected a HashAlgorithm constant")
        if e.const not in hashes.ALGORITHMS and e.const != "random":
            raise self.unsupported(node, f"HashAlgorithm.{e.const} is not supported")
        return str(e.const)

    def _v1_hash(self, node: Tree, args: list, scope: Scope) -> E:
        self._expect_args(node, "hash", args, 5)
        out = self.lvalue(args[0], scope)
        if not isinstance(out.type, BitT):
            raise self.type_error(args[0], f"hash result must be bit<W>, got {out.type}")
        algo = self._algorithm(args[1], scope)
        base = self.scalar(args[2], scope).fn
        data = self.data_bytes(self.expr(args[3], scope), args[3])
        maximum = self.scalar(args[4], scope).fn
        write = self.writer_for(node, out)
        m = _mask(out.type.width)
        rng = self.rng
        compute = hashes.ALGORITHMS.get(algo) or (lambda d: rng.getrandbits(32))

        def do_hash(s: list) -> None:
            h = compute(data(s))
            top = maximum(s)
            write(s, (base(s) + (h % top if top else 0)) & m)
        return E(VoidT(), do_hash)

    def _checksum(self, node: Tree, args: list, scope: Scope, update: bool, payload: bool) -> E:
        name = ("update" if update else "verify") + "_checksum" + ("_with_payload" if payload else "")
        self._expect_args(node, name, args, 4)
        cond = self._bool_operand(args[0], scope).fn
        data = self.data_bytes(self.expr(args[1], scope), args[1])
        target = self.lvalue(args[2], scope)
        if not isinstance(target.type, BitT):
            raise self.type_error(args[2], f"checksum field must be bit<W>, got {target.type}")
        algo = hashes.ALGORITHMS.get(self._algorithm(args[3], scope))
        if algo is None:
            raise self.unsupported(args[3], "random is not a checksum algorithm")
        m = _mask(target.type.width)
        read, write = target.fn, self.writer_for(node, target)
        if update:
            def update_checksum(s: list) -> None:
                if cond(s):
                    d = data(s)
                    if payload:
                        d += s[0].payload
                    write(s, algo(d) & m)
            return E(VoidT(), update_checksum)
        error_slot = self._std_slot("checksum_error")

        def verify_checksum(s: list) -> None:
            if cond(s):
                d = data(s)
                if payload:
                    d += s[0].payload
                if algo(d) & m != read(s):
                    s[error_slot] = 1
        return E(VoidT(), verify_checksum)

    def _v1_verify_checksum(self, node: Tree, args: list, scope: Scope) -> E:
        return self._checksum(node, args, scope, update=False, payload=False)

    def _v1_update_checksum(self, node: Tree, args: list, scope: Scope) -> E:
        return self._checksum(node, args, scope, update=True, payload=False)

    def _v1_verify_checksum_with_payload(self, node: Tree, args: list, scope: Scope) -> E:
        return self._checksum(node, args, scope, update=False, payload=True)

    def _v1_update_checksum_with_payload(self, node: Tree, args: list, scope: Scope) -> E:
        return self._checksum(node, args, scope, update=True, payload=True)

    def _v1_verify(self, node: Tree, args: list, scope: Scope) -> E:
        self._expect_args(node, "verify", args, 2)
        cond = self._bool_operand(args[0], scope).fn
        err = self.expr(args[1], scope)
        if not isinstance(err.type, ErrorT):
            raise self.type_error(args[1], f"verify needs an error, got {err.type}")
        get_err = err.fn

        def verify(s: list) -> None:
            if not cond(s):
                raise ParserError(get_err(s))
        return E(VoidT(), verify)

    def _v1_digest(self, node: Tree, args: list, scope: Scope) -> E:
        self._expect_args(node, "digest", args, 2)
        type_args = self.call_type_args
        if type_args is not None:
            target = self.resolve_type(type_args.children[0])
            data = self.coerce(self.expr(args[1], scope, target), target, args[1])
        else:
            data = self.expr(args[1], scope)
        leaves = self.leaves(data, args[1])
        if isinstance(data.type, StructT):
            dname = data.type.name
            fields = [(f, t) for f, t in data.type.fields]
            from p4switch.frontend.program import DigestInfo, ParamInfo
            self.info.digests.setdefault(dname, DigestInfo(dname, [
                ParamInfo(f, w) for (f, _), (_, w) in zip(fields, leaves)]))
        else:
            raise self.unsupported(args[1], "digest data must be a struct")
        fns = [f for f, _ in leaves]

        def digest(s: list) -> None:
            s[0].digest(dname, tuple(f(s) for f in fns))
        return E(VoidT(), digest)

    def _clone_type(self, node: Any, scope: Scope) -> str:
        e = self.expr(node, scope)
        if not isinstance(e.type, EnumT) or e.type.name != "CloneType" or not e.is_const:
            raise self.type_error(node, "expected CloneType.I2E or CloneType.E2E")
        return str(e.const)

    def _v1_clone(self, node: Tree, args: list, scope: Scope) -> E:
        self._expect_args(node, "clone", args, 2)
        ctype = self._clone_type(args[0], scope)
        session = self.scalar(args[1], scope).fn

        def clone(s: list) -> None:
            s[0].clone = (ctype, session(s), None)
        return E(VoidT(), clone)

    def _v1_clone3(self, node: Tree, args: list, scope: Scope) -> E:
        self._expect_args(node, "clone3", args, 3)
        return self._v1_clone(node, args[:2], scope)

    def _v1_clone_preserving_field_list(self, node: Tree, args: list, scope: Scope) -> E:
        self._expect_args(node, "clone_preserving_field_list", args, 3)
        ctype = self._clone_type(args[0], scope)
        session = self.scalar(args[1], scope).fn
        index = self.const_int(args[2])

        def clone(s: list) -> None:
            s[0].clone = (ctype, session(s), index)
        return E(VoidT(), clone)

    def _v1_resubmit(self, node: Tree, args: list, scope: Scope) -> E:
        def resubmit(s: list) -> None:
            s[0].resubmit = -1
        return E(VoidT(), resubmit)

    def _v1_resubmit_preserving_field_list(self, node: Tree, args: list, scope: Scope) -> E:
        index = self.const_int(args[0])

        def resubmit(s: list) -> None:
            s[0].resubmit = index
        return E(VoidT(), resubmit)

    def _v1_recirculate(self, node: Tree, args: list, scope: Scope) -> E:
        def recirculate(s: list) -> None:
            s[0].recirculate = -1
        return E(VoidT(), recirculate)

    def _v1_recirculate_preserving_field_list(self, node: Tree, args: list, scope: Scope) -> E:
        index = self.const_int(args[0])

        def recirculate(s: list) -> None:
            s[0].recirculate = index
        return E(VoidT(), recirculate)

    def _v1_truncate(self, node: Tree, args: list, scope: Scope) -> E:
        self._expect_args(node, "truncate", args, 1)
        length = self.scalar(args[0], scope).fn

        def truncate(s: list) -> None:
            s[0].truncate = length(s)
        return E(VoidT(), truncate)

    def _assertion(self, node: Tree, args: list, scope: Scope, what: str) -> E:
        self._expect_args(node, what, args, 1)
        cond = self._bool_operand(args[0], scope).fn
        where = str(self.where(node))

        def check(s: list) -> None:
            if not cond(s):
                raise PipelineAssertion(f"{where}: {what} failed")
        return E(VoidT(), check)

    def _v1_assert(self, node: Tree, args: list, scope: Scope) -> E:
        return self._assertion(node, args, scope, "assert")

    def _v1_assume(self, node: Tree, args: list, scope: Scope) -> E:
        return self._assertion(node, args, scope, "assume")

    def _v1_log_msg(self, node: Tree, args: list, scope: Scope) -> E:
        self._expect_args(node, "log_msg", args, 1, 2)
        fmt = self.expr(args[0], scope)
        if not isinstance(fmt.type, StringT):
            raise self.type_error(args[0], "log_msg needs a string literal")
        text = str(fmt.const)
        leaves = self.leaves(self.expr(args[1], scope), args[1]) if len(args) == 2 else []
        fns = [f for f, _ in leaves]

        def log_msg(s: list) -> None:
            message = text
            for f in fns:
                message = message.replace("{}", str(f(s)), 1)
            s[0].log(message)
        return E(VoidT(), log_msg)

    # -- extern objects ----------------------------------------------------------------------

    def _extern_method(self, node: Tree, inst: ExternInstance, method: str, args: list,
                       scope: Scope) -> E:
        args = [a.children[1] if isinstance(a, Tree) and a.data == "named_arg" else a for a in args]
        kind = inst.kind
        if kind == "counter" and method == "count":
            self._expect_args(node, "count", args, 1)
            index = self.scalar(args[0], scope).fn
            counter = inst.obj

            def count(s: list) -> None:
                counter.count(index(s), s[0].length)
            return E(VoidT(), count)
        if kind == "direct_counter" and method == "count":
            return E(VoidT(), lambda s: None)  # direct counters count on every hit
        if kind == "register" and method in ("read", "write"):
            reg = inst.obj
            values, size = reg.values, reg.size
            if method == "write":
                self._expect_args(node, "write", args, 2)
                index = self.scalar(args[0], scope).fn
                value_t = inst.type
                value = self.coerce(self.expr(args[1], scope, value_t), value_t, args[1]).fn
                m = _mask(reg.width)

                def reg_write(s: list) -> None:
                    i = index(s)
                    if 0 <= i < size:
                        values[i] = value(s) & m
                return E(VoidT(), reg_write)
            if len(args) == 1:
                index = self.scalar(args[0], scope).fn
                return E(inst.type, lambda s: values[i] if 0 <= (i := index(s)) < size else 0)
            self._expect_args(node, "read", args, 2)
            out = self.lvalue(args[0], scope)
            write = self.writer_for(node, out)
            index = self.scalar(args[1], scope).fn

            def reg_read(s: list) -> None:
                i = index(s)
                write(s, values[i] if 0 <= i < size else 0)
            return E(VoidT(), reg_read)
        if kind == "meter" and method == "execute_meter":
            self._expect_args(node, "execute_meter", args, 2)
            index = self.scalar(args[0], scope).fn
            out = self.lvalue(args[1], scope)
            write = self.writer_for(node, out)
            meters = inst.obj

            def execute(s: list) -> None:
                ctx = s[0]
                write(s, meters.execute(index(s), ctx.length, ctx.now_us))
            return E(VoidT(), execute)
        if kind == "direct_meter" and method == "read":
            self._expect_args(node, "read", args, 1)
            out = self.lvalue(args[0], scope)
            write = self.writer_for(node, out)
            unit_packets = inst.obj == "packets"

            def read_color(s: list) -> None:
                ctx = s[0]
                hit = ctx.hit_entry
                meter = hit.meter if hit is not None else None
                if meter is None:
                    write(s, GREEN)
                else:
                    write(s, meter.execute(1 if unit_packets else ctx.length, ctx.now_us))
            return E(VoidT(), read_color)
        if kind == "Checksum16" and method == "get":
            self._expect_args(node, "get", args, 1)
            data = self.data_bytes(self.expr(args[0], scope), args[0])
            return E(BitT(16), lambda s: hashes.csum16(data(s)))
        raise self.type_error(node, f"{kind} {inst.name} has no method {method}")

    # -- packet_in / packet_out ----------------------------------------------------------------

    def _packet_method(self, node: Tree, param: PacketParam, method: str, args: list,
                       type_args: Any, scope: Scope) -> E:
        if param.kind == "packet_out":
            if method != "emit":
                raise self.type_error(node, f"packet_out has no method {method}")
            self._expect_args(node, "emit", args, 1)
            return E(VoidT(), self._emit(self.lvalue(args[0], scope), args[0]))
        if method == "extract":
            if len(args) == 2:
                target = self.lvalue(args[0], scope)
                return E(VoidT(), self._extract_varbit(target, self.scalar(args[1], scope).fn, args[0]))
            self._expect_args(node, "extract", args, 1)
            target = self.lvalue(args[0], scope)
            return E(VoidT(), self._extract(target, args[0]))
        if method == "advance":
            self._expect_args(node, "advance", args, 1)
            bits = self.scalar(args[0], scope).fn

            def advance(s: list) -> None:
                n = bits(s)
                ctx = s[0]
                if n % 8:
                    raise ParserError("ParserInvalidArgument")
                if ctx.pos + n // 8 > ctx.length:
                    raise ParserError("PacketTooShort")
                ctx.pos += n // 8
            return E(VoidT(), advance)
        if method == "length":
            return E(BitT(32), lambda s: s[0].length)
        if method == "lookahead":
            if type_args is None or len(type_args.children) != 1:
                raise self.type_error(node, "lookahead needs one type argument")
            return self._lookahead(node, self.resolve_type(type_args.children[0]))
        raise self.type_error(node, f"packet_in has no method {method}")

    def _lookahead(self, node: Tree, t: P4Type) -> E:
        if isinstance(t, BitT):
            width = t.width
            nbytes = (width + 7) // 8
            drop = nbytes * 8 - width
            m = _mask(width)

            def peek(s: list) -> int:
                ctx = s[0]
                if ctx.pos + nbytes > ctx.length:
                    raise ParserError("PacketTooShort")
                return (int.from_bytes(ctx.data[ctx.pos:ctx.pos + nbytes], "big") >> drop) & m
            return E(t, peek)
        if isinstance(t, HeaderT):
            layout = self._header_layout(t, node)
            nbytes = layout[0]

            def peek_header(s: list) -> list:
                ctx = s[0]
                if ctx.pos + nbytes > ctx.length:
                    raise ParserError("PacketTooShort")
                v = int.from_bytes(ctx.data[ctx.pos:ctx.pos + nbytes], "big")
                return [True] + [conv((v >> sh) & m) for sh, m, conv in layout[1]]
            return E(t, peek_header)
        raise self.unsupported(node, f"lookahead<{t}> is not supported")

    def _header_layout(self, t: HeaderT, node: Any, allow_varbit: bool = False) -> tuple[int, list]:
        """(bytes, [(shift, mask, conversion)]) of the fixed fields of a header."""
        bits = t.bit_width
        if t.varbit is not None and not allow_varbit:
            raise self.type_error(node, f"header {t.name} has a varbit field: extract it with "
                                        "the two-argument extract")
        if bits % 8 and t.varbit is None:
            raise self.type_error(node, f"header {t.name} is {bits} bits, not a whole number of bytes")
        fields = []
        acc = bits
        for _, ft in t.fields:
            if isinstance(ft, VarbitT):
                continue
            w = scalar_width(ft)
            acc -= w
            if isinstance(ft, BoolT):
                conv = bool
            elif isinstance(ft, BitT) and ft.signed:
                half = 1 << (w - 1)
                conv = lambda v, half=half, m=_mask(w): ((v + half) & m) - half  # noqa: E731
            else:
                conv = int
            fields.append((acc, _mask(w), conv))
        return bits // 8, fields

    def _extract(self, target: E, node: Any) -> Fn:
        t = target.type
        if not isinstance(t, HeaderT) or target.place is None:
            raise self.type_error(node, f"extract needs a header, got {t}")
        nbytes, layout = self._header_layout(t, node)
        place = target.place
        plain = all(conv is int for _, _, conv in layout)
        offsets = [(1 + i, sh, m) for i, (sh, m, _) in enumerate(layout)]
        convs = [conv for _, _, conv in layout]
        siblings = self._union_siblings(target)
        stack_next = target.extra[1] if isinstance(target.extra, tuple) and target.extra and \
            target.extra[0] == "stack_next" else None
        if place.base is not None and plain and not siblings:
            lines = [
                "def extract(s):",
                "    ctx = s[0]",
                "    p = ctx.pos",
                f"    end = p + {nbytes}",
                "    if end > ctx.length:",
                "        raise ParserError('PacketTooShort')",
                "    v = int.from_bytes(ctx.data[p:end], 'big')",
                "    ctx.pos = end",
            ]
            lines += [f"    s[{place.base + o}] = (v >> {sh}) & {m}" for o, sh, m in offsets]
            lines.append(f"    s[{place.base}] = True")
            return generate("\n".join(lines) + "\n", "extract", {"ParserError": ParserError})
        base_of = (lambda s: place.base) if place.base is not None else place.dyn
        bump = stack_next.writer() if stack_next is not None else None
        read_next = stack_next.reader() if stack_next is not None else None

        def extract(s: list) -> None:
            ctx = s[0]
            b = base_of(s)
            p = ctx.pos
            end = p + nbytes
            if end > ctx.length:
                raise ParserError("PacketTooShort")
            v = int.from_bytes(ctx.data[p:end], "big")
            ctx.pos = end
            for (o, sh, m), conv in zip(offsets, convs):
                s[b + o] = conv((v >> sh) & m)
            for w in siblings:
                w(s, False)
            s[b] = True
            if bump is not None:
                bump(s, read_next(s) + 1)
        return extract

    def _extract_varbit(self, target: E, length: Fn, node: Any) -> Fn:
        t = target.type
        if not isinstance(t, HeaderT) or t.varbit is None or target.place is None:
            raise self.type_error(node, "the two-argument extract needs a header with a varbit field")
        if target.place.base is None:
            raise self.unsupported(node, "two-argument extract into a stack element")
        _, layout = self._header_layout(t, node, allow_varbit=True)
        b, fixed_bits, vmax = target.place.base, t.bit_width, t.varbit.max_width
        fields = [(b + 1 + i, sh, m, conv) for i, (sh, m, conv) in enumerate(layout)]
        vslot = b + len(t.fields)

        def extract_varbit(s: list) -> None:
            ctx = s[0]
            n = length(s)
            if n > vmax:
                raise ParserError("HeaderTooShort")
            total = fixed_bits + n
            if total % 8:
                raise ParserError("ParserInvalidArgument")
            p, end = ctx.pos, ctx.pos + total // 8
            if end > ctx.length:
                raise ParserError("PacketTooShort")
            v = int.from_bytes(ctx.data[p:end], "big")
            ctx.pos = end
            s[vslot] = (n, v & ((1 << n) - 1))
            fixed = v >> n
            for slot, sh, m, conv in fields:
                s[slot] = conv((fixed >> sh) & m)
            s[b] = True
        return extract_varbit

    def _emit_varbit(self, t: HeaderT, place: Place, node: Any) -> Fn:
        _, layout = self._header_layout(t, node, allow_varbit=True)
        b, fixed_bits = place.base, t.bit_width
        assert b is not None
        fields = [(b + 1 + i, sh, m) for i, (sh, m, _) in enumerate(layout)]
        vslot = b + len(t.fields)

        def emit_varbit(s: list) -> None:
            if s[b]:
                fixed = 0
                for slot, sh, m in fields:
                    fixed |= (int(s[slot]) & m) << sh
                n, value = s[vslot]
                total = fixed_bits + n
                pad = (-total) % 8
                s[0].out.append((((fixed << n) | value) << pad).to_bytes((total + pad) // 8, "big"))
        return emit_varbit

    def _emit(self, target: E, node: Any) -> Fn:
        t = target.type
        if target.place is None:
            raise self.type_error(node, "emit needs a header, stack, union or struct lvalue")
        if isinstance(t, HeaderT) and t.varbit is not None:
            if target.place.base is None:
                raise self.unsupported(node, "emit of a dynamically indexed header")
            return self._emit_varbit(t, target.place, node)
        if isinstance(t, HeaderT):
            nbytes, layout = self._header_layout(t, node)
            place = target.place
            if place.base is None:
                raise self.unsupported(node, "emit of a dynamically indexed header")
            b = place.base
            terms = " | ".join(f"((s[{b + 1 + i}] & {m}) << {sh})" for i, (sh, m, _) in enumerate(layout))
            source = (f"def emit(s):\n    if s[{b}]:\n"
                      f"        s[0].out.append(({terms}).to_bytes({nbytes}, 'big'))\n")
            return generate(source, "emit")
        if isinstance(t, StructT):
            parts = []
            for fname, ft in t.fields:
                off, _ = field_offset(t, fname)  # type: ignore[misc]
                sub = target.place.at(off, ft)
                parts.append(self._emit(E(ft, place=sub), node))
            return seq(parts)
        if isinstance(t, StackT):
            stride = slot_count(t.elem)
            parts = [self._emit(E(t.elem, place=target.place.at(1 + i * stride, t.elem)), node)
                     for i in range(t.size)]
            return seq(parts)
        raise self.type_error(node, f"cannot emit a value of type {t}")


def _scalarish(t: P4Type) -> bool:
    return not isinstance(t, HeaderT | StructT | StackT | ListT)


def _callee_text(node: Any) -> str:
    from p4switch.compile_expr import expr_text
    return expr_text(node)


