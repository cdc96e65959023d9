"""C for calls of the program's functions and of controls instantiated inside a control, as
`StmtCompiler._call_function` and `_apply_block` run them.

Each compiled function (each specialization of a generic one) becomes one C function over
the slot array that returns its scalar result (0 for `void`; a header or struct result goes
to an array the caller passes, one word per slot); each control instance one
`void` C function with its own locals. A call copies `in` and `inout` arguments into the
parameters' slots, calls, then copies `out` and `inout` parameters back, also when the body
ran `exit` (the caller then leaves its block). In an expression the call is a GCC statement
expression, so the copies keep their order around the value.
"""

from __future__ import annotations

from typing import Any

from lark import Tree

from p4switch.compiler.compiled import E, ControlImpl, FunctionImpl, PacketParam
from p4switch.frontend.types import BitT, BoolT, HeaderT, StackT, StructT, VoidT, field_offset, slot_count
from p4switch.native.cgen_expr import copy_code, wide_offsets
from p4switch.native.cgen_stmt import StmtGen, slots_in_order
from p4switch.runtime import ExternFunctionMissing


def _args(node: Any) -> list:
    if node is None:
        return []
    return list(node.children) if isinstance(node, Tree) and node.data == "args" else [node]


class FunctionGen(StmtGen):
    """Mixin of the generator: the program's functions and their calls."""

    function_fns: dict[int, str]
    compound_fns: set[str]
    function_defs: list[list[str]]
    instance_fns: dict[int, str]
    sub_parsers: set[str]
    fn_ret: Any

    def control(self, role: str, node: Tree) -> list[str]:
        raise NotImplementedError  # ProgramGen's

    def parser(self, node: Tree, name: str = "parser", sub: bool = False) -> list[str]:
        raise NotImplementedError  # ProgramGen's

    def instance_fn(self, impl: ControlImpl, where: Any) -> str:
        """The C function of a control instantiated inside a control (`ctl_<name>`)."""
        name = self.instance_fns.get(id(impl))
        if name is not None:
            return f"ctl_{name}"
        found = self.rec.instances.get(id(impl))
        if found is None or found[1] not in ("control", "parser") or (found[1] == "parser") != self.in_parser:
            raise self.fail(where, "a block instance applied where the backend does not cover it")
        decl, kind, recorded = found
        name = f"sub{len(self.instance_fns)}"
        self.instance_fns[id(impl)] = name
        saved = (self.rec, self.exit_label, self.in_parser, self.fn_ret)
        self.rec, self.fn_ret = recorded, None
        try:
            if kind == "parser":  # returns how it ended (ProgramGen.parser)
                self.sub_parsers.add(name)
                self.function_defs.append(self.parser(decl, name, sub=True))
            else:
                self.function_defs.append(self.control(name, decl))
        finally:
            self.rec, self.exit_label, self.in_parser, self.fn_ret = saved
        return f"ctl_{name}"

    def leave(self) -> str:
        if self.fn_ret is not None and not self.exit_label:
            return "return 0;"
        return super().leave()

    def function_fn(self, impl: FunctionImpl, where: Any) -> str:
        fname = self.function_fns.get(id(impl))
        if fname is not None:
            return fname
        found = self.rec.function_bodies.get(id(impl))
        if found is None and impl.missing is not None and not self.in_parser:
            # a program-declared extern function: the packet fails, as on the Python pipeline
            self.faults.append(ExternFunctionMissing(impl.missing))
            fname = f"f{len(self.function_fns)}"
            self.function_fns[id(impl)] = fname
            self.function_defs.append([f"/* extern {impl.name}: no implementation */",
                                       f"static uint64_t {fname}(gf_ctx *c) {{",
                                       f"    c->fault = {len(self.faults)}; c->exit_flag = 1; return 0;", "}"])
            return fname
        if found is None:
            raise self.fail(where, f"function {impl.name} without a body")
        decl, recorded = found
        # a header, struct or bit<N> with N > 64: the value goes to r_ (one word per slot of a
        # header or struct, the words of a wide value)
        compound = isinstance(impl.ret, HeaderT | StructT) or isinstance(impl.ret, BitT) and impl.ret.width > 64
        if not (compound or isinstance(impl.ret, BitT | BoolT | VoidT)):
            raise self.fail(where, f"function {impl.name} returning {impl.ret}")
        fname = f"f{len(self.function_fns)}"
        self.function_fns[id(impl)] = fname
        if compound:
            self.compound_fns.add(fname)
        saved = (self.rec, self.exit_label, self.in_parser, self.fn_ret)
        self.rec = recorded  # the body's own recordings; tables and actions are shared
        self.exit_label, self.in_parser, self.fn_ret = None, False, impl.ret
        try:
            params = "gf_ctx *c, uint64_t *r_" if compound else "gf_ctx *c"
            body: list[str] = [f"/* {impl.name} */", f"static uint64_t {fname}({params}) {{"]
            self.stmts(decl.children[2].children[1:], body, "    ")
            body += ["    return 0;", "}"]
        finally:
            self.rec, self.exit_label, self.in_parser, self.fn_ret = saved
        self.function_defs.append(body)
        return fname

    def _copy(self, dst: int, src: int, t: Any) -> str:
        if isinstance(t, HeaderT | StructT | StackT) or isinstance(t, BitT) and t.width > 64:
            return copy_code(dst, src, t)
        return f"S[{dst}] = S[{src}];"

    def function_call(self, node: Tree, impl: FunctionImpl | ControlImpl, args: list) -> tuple[list[str], str, list[str]]:
        """(copy-in statements, the C call, copy-out statements) of one call site."""
        if isinstance(impl, ControlImpl):
            fname = self.instance_fn(impl, node)
        else:
            fname = self.function_fn(impl, node)
        pre: list[str] = []
        post: list[str] = []
        for arg, (_, ptype, direction, place) in zip(args, impl.params):
            if isinstance(arg, Tree) and arg.data == "named_arg":
                arg = arg.children[1]
            if isinstance(arg, Tree) and arg.data == "dontcare_arg":
                continue  # `_`: the out value is not wanted
            if place is None:
                continue  # packet_in / packet_out: the same packet
            if place.base is None:
                raise self.fail(node, f"{fname}: a parameter without a slot of its own")
            if direction in ("out", "inout"):
                target: E = self.e(arg)
                if (target.place is None or target.place.base is None or isinstance(target.extra, tuple)) \
                        and isinstance(ptype, BitT | BoolT):
                    # a slice or a field of a run-time-indexed element: read in, written back
                    # (its index evaluated again, as the Python pipeline writes it back)
                    if direction == "inout":
                        pre.append(f"S[{place.base}] = {self.cx(arg)};")
                    post.append(self.write_back(arg, target, place.base))
                    continue
                if target.place is None or target.place.base is None or isinstance(target.extra, tuple):
                    raise self.fail(arg, "out argument that is not a static place")
                if direction == "inout":
                    pre.append(self._copy(place.base, target.place.base, ptype))
                post.append(self._copy(target.place.base, place.base, ptype))
            else:
                self.assign_place(arg, place.base, ptype, arg, pre, "")
        return pre, f"{fname}(c)", post

    def _callee_impl(self, node: Tree) -> FunctionImpl | None:
        impl = self.rec.function_calls.get(id(node))
        if impl is not None and id(node) in self.rec.conflicts:
            raise self.fail(node, "a call compiled in several contexts")
        return impl

    def _call_args(self, node: Tree) -> list:
        return _args(node.children[-1]) if len(node.children) > 1 else []

    def _instance_of(self, node: Tree) -> ControlImpl | None:
        applied = self.rec.block_applies.get(id(node))
        if applied is not None:  # also `T.apply(...)` of a control type, instantiated there
            if id(node) in self.rec.conflicts:
                raise self.fail(node, "a block applied in several contexts")
            return applied  # type: ignore[no-any-return]
        callee = node.children[0]
        if isinstance(callee, Tree) and callee.data == "member" and str(callee.children[1].children[0]) == "apply":
            base = self.e(callee.children[0])
            if isinstance(base.extra, ControlImpl):
                return base.extra
        return None

    def _st_method_call_stmt(self, node: Tree, out: list[str], ind: str) -> None:
        impl: FunctionImpl | ControlImpl | None = self._callee_impl(node) or self._instance_of(node)
        if impl is None:
            super()._st_method_call_stmt(node, out, ind)
            return
        pre, call, post = self.function_call(node, impl, self._call_args(node))
        if call.startswith("ctl_") and call[4:-3] in self.sub_parsers:
            # a parser applied in a parser: its reject or error ends this parser too (its
            # arguments are then not copied out, as on the Python pipeline)
            out.append(f"{ind}{{ {' '.join(pre)} uint64_t sp_ = {call}; if (sp_ == 1) goto p_reject; "
                       f"if (sp_) {{ err_ = sp_ - 2; goto p_error; }} {' '.join(post)} }}")
            return
        if isinstance(impl, FunctionImpl) and self.function_fns.get(id(impl)) in self.compound_fns:
            # a header, struct or wide value not used: into scratch words
            n = slot_count(impl.ret) if isinstance(impl.ret, HeaderT | StructT) else (impl.ret.width + 63) // 64
            out.append(f"{ind}{{ uint64_t rv_[{n}]; {' '.join(pre)} {call[:-1]}, rv_); {' '.join(post)} }}")
            return
        out.append(f"{ind}{{ {' '.join(pre)} {call}; {' '.join(post)} }}")

    def _function_value(self, node: Tree) -> str | None:
        impl = self._callee_impl(node)
        if impl is None:
            return None
        if self.function_fn(impl, node) in self.compound_fns:
            raise self.fail(node, "a header, struct or wide value of a call in an expression")
        pre, call, post = self.function_call(node, impl, self._call_args(node))
        leave = f" if (c->exit_flag) {{ {self.leave()} }}" if self.has_exit and not self.in_parser else ""
        return f"({{ {' '.join(pre)} uint64_t r_ = {call}; {' '.join(post)}{leave} r_; }})"

    def _cx_call(self, node: Tree, e: E) -> str:
        value = self._function_value(node)
        return value if value is not None else super()._cx_call(node, e)

    def _cx_call_generic(self, node: Tree, e: E) -> str:
        value = self._function_value(node)
        if value is not None:
            return value
        if self._is_lookahead(node) and isinstance(e.type, BitT):
            # `pkt.lookahead<bit<W>>()`: the next W bits, PacketTooShort when fewer bytes remain
            return self._peek((e.type.width + 7) // 8, 0, e.type.width)
        raise self.fail(node, "call with type arguments")

    # -- lookahead<T> of a header or struct ----------------------------------------------------

    def _is_lookahead(self, node: Any) -> bool:
        if not (isinstance(node, Tree) and node.data == "call_generic" and self.in_parser):
            return False
        callee = node.children[0]
        return isinstance(callee, Tree) and callee.data == "member" and \
            str(callee.children[1].children[0]) == "lookahead" and \
            isinstance(self.e(callee.children[0]).extra, PacketParam)

    def _peek(self, nbytes: int, bit: int, width: int) -> str:
        short = self.error_index("PacketTooShort")
        return (f"({{ if (c->pos + {nbytes} > c->len) {{ err_ = {short}; goto p_error; }} "
                f"gf_get(c->data + c->pos, {bit}, {width}); }})")

    def _lookahead_layout(self, t: Any, node: Any) -> tuple[int, list[tuple[int, int, int]]]:
        """(bytes to peek, [(slot offset, bit offset, width)]) of a header or struct read by
        lookahead: a header's fields after its validity slot, a struct's leaves in order."""
        if isinstance(t, HeaderT):
            return self.header_layout(t, node)
        fields: list[tuple[int, int, int]] = []

        def walk(st: Any, slot: int, bit: int) -> tuple[int, int]:
            for _, ft in st.fields:
                if isinstance(ft, StructT) and not ft.is_union:
                    slot, bit = walk(ft, slot, bit)
                elif isinstance(ft, BitT | BoolT):
                    self.check_type(ft, node)
                    w = 1 if isinstance(ft, BoolT) else ft.width
                    fields.append((slot, bit, f"GF_SIGNED({w})" if isinstance(ft, BitT) and ft.signed else w))
                    slot, bit = slot + 1, bit + w
                else:
                    raise self.fail(node, f"lookahead of a struct with a field of type {ft}")
            return slot, bit
        _, bits = walk(t, 0, 0)
        return (bits + 7) // 8, fields

    def assign_place(self, node: Any, base: int, t: Any, value_node: Any, out: list[str], ind: str) -> None:
        impl = self._callee_impl(value_node) if isinstance(value_node, Tree) and \
            value_node.data in ("call", "call_generic") else None
        if isinstance(t, HeaderT | StructT) and impl is not None:
            # a function's header or struct value: into a temporary, stored once the call
            # (and its copies out) is done, not at all when it ran `exit`
            if wide_offsets(t):
                raise self.fail(node, "a function's value with fields wider than 64 bits")
            n = slot_count(t)
            pre, call, post = self.function_call(value_node, impl, self._call_args(value_node))
            if not call.endswith("(c)") or self.function_fns.get(id(impl)) not in self.compound_fns:
                raise self.fail(node, "a header or struct value of a call")
            call = call[:-1] + ", rv_)"
            leave = f" if (c->exit_flag) {{ {self.leave()} }}" if self.has_exit and not self.in_parser else ""
            out.append(f"{ind}{{ uint64_t rv_[{n}]; memset(rv_, 0, sizeof rv_); {' '.join(pre)} {call}; "
                       f"{' '.join(post)}{leave} memcpy(&S[{base}], rv_, sizeof rv_); }}")
            return
        if isinstance(t, HeaderT | StructT) and self._is_lookahead(value_node):
            nbytes, fields = self._lookahead_layout(t, value_node)
            out.append(f"{ind}if (c->pos + {nbytes} > c->len) {{ err_ = {self.error_index('PacketTooShort')}; "
                       f"goto p_error; }}")
            for slot, bit, w in fields:
                out.append(f"{ind}S[{base + slot}] = gf_get(c->data + c->pos, {bit}, {w});")
            if isinstance(t, HeaderT):
                out.append(f"{ind}S[{base}] = 1;")
            return
        super().assign_place(node, base, t, value_node, out, ind)

    def _cx_member(self, node: Tree, e: E) -> str:
        base_node, name_node = node.children
        if self._is_lookahead(base_node):
            t = self.e(base_node).type
            nbytes, fields = self._lookahead_layout(t, base_node)
            found = field_offset(t, str(name_node.children[0]))
            if found is None or isinstance(found[1], HeaderT | StructT):
                raise self.fail(node, "a field of a lookahead value that is not a scalar")
            slot = found[0]
            match = next((f for f in fields if f[0] == slot), None)
            if match is None:
                raise self.fail(node, "a field of a lookahead value")
            return self._peek(nbytes, match[1], match[2])
        return super()._cx_member(node, e)

    def _st_return_stmt(self, node: Tree, out: list[str], ind: str) -> None:
        value = node.children[0] if node.children else None
        if value is None or self.fn_ret is None:
            super()._st_return_stmt(node, out, ind)
            return
        if isinstance(self.fn_ret, BitT) and self.fn_ret.width > 64:
            codes = self.wide_words(value, self.fn_ret.width)
            out.append(f"{ind}{{ {slots_in_order(codes)} memcpy(r_, v_, sizeof v_); return 0; }}")
            return
        if isinstance(self.fn_ret, HeaderT | StructT):
            codes = self.value_slots(node, self.fn_ret, value)
            out.append(f"{ind}{{ {slots_in_order(codes)} memcpy(r_, v_, sizeof v_); return 0; }}")
            return
        out.append(f"{ind}return {self.masked(self.cx(value), self.fn_ret)};")
