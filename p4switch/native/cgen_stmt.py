"""C statements from the recorded compilation: assignments, control flow, calls of actions,
tables and v1model externs, and the packet_in/packet_out methods."""

from __future__ import annotations

from typing import Any

from lark import Tree

from p4switch.compiler.compiled import ActionImpl, ExternInstance, PacketParam, TableImpl
from p4switch.errors import P4SwitchError
from p4switch.frontend.types import BitT, BoolT, HeaderT, ListT, StackT, StructT, VarbitT, slot_count
from p4switch.native.cgen_expr import copy_code, is_signed, lit, wide_offsets, wide_zero, width_of
from p4switch.native.cgen_packet import PacketGen
from p4switch.runtime import PipelineAssertion

HASHES = {"crc16": "gf_crc16({b}, {n})", "crc32": "gf_crc32({b}, {n})",
           "csum16": "gf_csum16({b}, {n}, 0, 0)", "xor16": "gf_xor16({b}, {n})",
           "identity": "gf_identity({b}, {n})"}


#: Statements after which an `exit` inside them may have to leave the block.
_MAY_EXIT = ("method_call_stmt", "assignment", "if_stmt", "switch_stmt", "for_stmt", "for_in_stmt")


def _args(node: Any) -> list:
    if node is None:
        return []
    items = list(node.children) if isinstance(node, Tree) and node.data == "args" else [node]
    return [a.children[1] if isinstance(a, Tree) and a.data == "named_arg" else a for a in items]


class StmtGen(PacketGen):
    """Mixin of the generator: statements. `self.exit_label` is where `return` goes in a
    control (None inside actions, where `return` returns)."""

    exit_label: str | None
    in_parser: bool
    has_exit: bool
    faults: list[P4SwitchError]
    log_formats: list[str]

    def stmts(self, nodes: list, out: list[str], ind: str) -> None:
        for n in nodes:
            if n is not None:
                self.stmt(n, out, ind)

    def stmt(self, node: Any, out: list[str], ind: str) -> None:
        handler = getattr(self, f"_st_{node.data}", None)
        if handler is None:
            raise self.fail(node, f"statement {node.data}")
        handler(node, out, ind)
        if self.has_exit and not self.in_parser and node.data in _MAY_EXIT:
            out.append(f"{ind}if (c->exit_flag) {self.leave()}")

    def leave(self) -> str:
        return f"goto {self.exit_label};" if self.exit_label else "return;"

    def _st_block(self, node: Tree, out: list[str], ind: str) -> None:
        out.append(f"{ind}{{")
        self.stmts(node.children[1:], out, ind + "    ")
        out.append(f"{ind}}}")

    def _st_switch_body(self, node: Tree, out: list[str], ind: str) -> None:
        out.append(f"{ind}{{")
        self.stmts(node.children, out, ind + "    ")
        out.append(f"{ind}}}")

    def _st_empty_stmt(self, node: Tree, out: list[str], ind: str) -> None:
        pass

    def _st_return_stmt(self, node: Tree, out: list[str], ind: str) -> None:
        if node.children and node.children[0] is not None:
            raise self.fail(node, "return with a value")
        out.append(f"{ind}{self.leave()}")

    def _st_exit_stmt(self, node: Tree, out: list[str], ind: str) -> None:
        out.append(f"{ind}c->exit_flag = 1; {self.leave()}")

    def _st_const_decl(self, node: Tree, out: list[str], ind: str) -> None:
        pass

    def _st_var_decl(self, node: Tree, out: list[str], ind: str) -> None:
        base = self.rec.var_slots.get(id(node))
        if base is None or id(node) in self.rec.conflicts:
            raise self.fail(node, "a local variable compiled in several contexts")
        init = node.children[3]
        t = self.rec.var_types[id(node)]
        if init is None:
            n = slot_count(t)
            for i in range(n):
                out.append(f"{ind}S[{base + i}] = {lit(self.template_c[base + i])};")
            if wide_offsets(t):
                out.append(f"{ind}{wide_zero(base, t)}")
            return
        self.assign_place(node, base, t, init, out, ind)

    def assign_place(self, node: Any, base: int, t: Any, value_node: Any, out: list[str], ind: str) -> None:
        if isinstance(t, ListT):  # a tuple: its items' slots in order, as a struct's fields
            if any(isinstance(et, HeaderT | StructT | StackT | ListT | VarbitT) or
                   isinstance(et, BitT) and et.width > 64 for et in t.elems):
                raise self.fail(node, f"a value of type {t}")
            t = StructT("tuple", [(f"f{i}", et) for i, et in enumerate(t.elems)])
        if isinstance(t, HeaderT | StructT | StackT):
            n = slot_count(t)
            if _is_initializer(value_node) and isinstance(t, HeaderT | StructT):
                # every slot's value first, then the stores: the value may read the target
                codes = self.value_slots(node, t, value_node)
                out.append(f"{ind}{{ {slots_in_order(codes)} memcpy(&S[{base}], v_, sizeof v_); }}")
                return
            src = self.e(value_node)
            if src.place is None or src.place.base is None:
                raise self.fail(node, "assignment of a header or struct value that is not an lvalue")
            out.append(f"{ind}{copy_code(base, src.place.base, t)}")
            return
        if isinstance(t, VarbitT):  # the length in its slot, the bits in the slot's buffer
            src = self.e(value_node)
            if src.place is None or src.place.base is None or not isinstance(src.type, VarbitT):
                raise self.fail(node, "varbit assignment from a value that is not a static varbit")
            out.append(f"{ind}{copy_code(base, src.place.base, t)}")
            return
        if isinstance(t, BitT) and t.width > 64:
            words = self.wide_words(value_node, t.width)
            out.append(f"{ind}{{ uint64_t w_[{len(words)}] = {{{', '.join(words)}}}; "
                       f"memcpy(&S[GF_WSLOT({base})], w_, sizeof w_); }}")
            return
        code = self.cx(value_node)
        out.append(f"{ind}S[{base}] = {self.masked(code, t) if isinstance(t, BitT) else code};")

    def value_slots(self, node: Any, t: Any, value_node: Any) -> list[str]:
        """The C value of every slot of a header or struct (a header's validity first: a
        header given a list or structure value is valid) from a list or structure expression
        or an lvalue."""
        if not _is_initializer(value_node):
            src = self.e(value_node)
            if src.place is None or src.place.base is None or wide_offsets(t):
                raise self.fail(node, "a header or struct value that is not an lvalue or has wide fields")
            return [f"S[{src.place.base + i}]" for i in range(slot_count(t))]
        if isinstance(t, HeaderT) and t.groups:
            raise self.fail(node, "a list value of a header with struct fields")
        if value_node.data == "list_expr":
            items = [c for c in value_node.children if c is not None]
        else:
            given = {str(kv.children[0].children[0]): kv.children[1] for kv in value_node.children}
            items = [given.get(fname) for fname, _ in t.fields]
        if len(items) != len(t.fields) or any(i is None for i in items):
            raise self.fail(node, "a list or structure value that does not match its type")
        codes = ["1"] if isinstance(t, HeaderT) else []
        for (_, ft), item in zip(t.fields, items):
            if isinstance(ft, HeaderT | StructT):
                codes += self.value_slots(node, ft, item)
            elif isinstance(ft, StackT | VarbitT):
                raise self.fail(node, "a list value with a stack or varbit field")
            else:
                self.check_type(ft, node)
                code = self.cx(item)
                codes.append(self.masked(code, ft) if isinstance(ft, BitT) else code)
        return codes

    def hoisted_target(self, target_node: Any, out: list[str], ind: str) -> Any:
        """An lvalue whose indices make calls: those indices into their temporaries first
        (left to right, before the right side), then the lvalue that reads them."""
        found = self.rec.hoisted.get(id(target_node))
        if found is None:
            return target_node
        rewritten, temps = found
        for var, index in temps:
            temp = self.e(var)
            if temp.place is None or temp.place.base is None:
                raise self.fail(target_node, "an index temporary without a slot")
            out.append(f"{ind}S[{temp.place.base}] = {self.masked(self.cx(index), temp.type)};")
        return rewritten

    def _st_assignment(self, node: Tree, out: list[str], ind: str) -> None:
        target_node, value_node = node.children
        target_node = self.hoisted_target(target_node, out, ind)
        target = self.e(target_node)
        if isinstance(target.extra, tuple) and target.extra and target.extra[0] == "slice":
            _, base, hi, lo = target.extra
            if base.place is None or base.place.base is None or width_of(base.type) > 64:
                raise self.fail(node, "slice of a non-static lvalue or of a value wider than 64 bits")
            m = ((1 << (hi - lo + 1)) - 1) << lo
            b = base.place.base
            code = f"(S[{b}] & ~{lit(m)}) | ((({self.cx(value_node)}) << {lo}) & {lit(m)})"
            out.append(f"{ind}S[{b}] = {self.masked(code, base.type) if is_signed(base.type) else code};")
            return
        if target.place is None or target.place.base is None:
            self.assign_dynamic(node, target_node, target.type, value_node, out, ind)
            return
        self.assign_place(node, target.place.base, target.type, value_node, out, ind)

    def assign_dynamic(self, node: Tree, target_node: Any, t: Any, value_node: Any, out: list[str], ind: str) -> None:
        """`s[i].f = v`: the value first, then the element `i` names (p4c's order for an index
        without calls)."""
        element = target_node.children[0] if isinstance(target_node, Tree) and target_node.data == "member" else None
        dyn = self.dyn_element(element)
        if dyn is None or not isinstance(t, BitT | BoolT):
            raise self.fail(node, "assignment to a dynamically indexed place")
        offset = self.dyn_field(node, element, str(target_node.children[1].children[0]))
        value = self.cx(value_node)
        out.append(f"{ind}{{ uint64_t v_ = {self.masked(value, t) if isinstance(t, BitT) else value}; "
                   f"S[{dyn} + {offset}] = v_; }}")

    def _st_if_stmt(self, node: Tree, out: list[str], ind: str) -> None:
        cond, then, other = node.children
        out.append(f"{ind}if ({self.cx(cond)}) {{")
        self.stmt(then, out, ind + "    ")
        if other is not None:
            out.append(f"{ind}}} else {{")
            self.stmt(other, out, ind + "    ")
        out.append(f"{ind}}}")

    def _st_switch_stmt(self, node: Tree, out: list[str], ind: str) -> None:
        subject_node = node.children[0]
        subject = self.e(subject_node)
        is_action_run = isinstance(subject.extra, tuple) and subject.extra[0] == "action_run"
        if is_action_run:
            impl: TableImpl = subject.extra[1]
            tid = self.table_ids[impl.table.name]
            actions = list(impl.table.actions)
            out.append(f"{ind}switch (t{tid}_apply(c)) {{")
        else:
            out.append(f"{ind}switch ({self.cx(subject_node)}) {{")
        for case in node.children[1:]:
            label, body = case.children
            if isinstance(label, Tree) and label.data == "default_label":
                out.append(f"{ind}default:")
            elif is_action_run:
                name = str(label.children[0]) if isinstance(label, Tree) and label.data == "var" else None
                idx = next((i for i, q in enumerate(actions) if name and (q == name or q.endswith("." + name))), None)
                if idx is None:
                    raise self.fail(label, "switch label")
                out.append(f"{ind}case {idx}:")
            else:
                out.append(f"{ind}case {self.cx(label)}:")
            if body is not None:
                out.append(f"{ind}    {{")
                self.stmt(body, out, ind + "        ")
                out.append(f"{ind}    }}")
                out.append(f"{ind}    break;")
        out.append(f"{ind}}}")

    # -- calls --------------------------------------------------------------------------------

    def _st_method_call_stmt(self, node: Tree, out: list[str], ind: str) -> None:
        callee = node.children[0]
        args = _args(node.children[-1]) if len(node.children) > 1 else []
        if isinstance(callee, Tree) and callee.data == "member":
            method = str(callee.children[1].children[0])
            base = self.e(callee.children[0])
            extra = base.extra
            if isinstance(extra, TableImpl):
                out.append(f"{ind}t{self.table_ids[extra.table.name]}_apply(c);")
                return
            if isinstance(extra, ExternInstance):
                self.extern_method(node, extra, method, args, out, ind)
                return
            if isinstance(extra, PacketParam):
                self.packet_method(node, extra, method, args, out, ind)
                return
            if isinstance(base.type, StackT) and method in ("push_front", "pop_front") and len(args) == 1:
                self.stack_shift(node, base, method, args[0], out, ind)
                return
            dyn = self.dyn_element(callee.children[0]) if isinstance(base.type, HeaderT) else None
            if dyn is not None and wide_offsets(base.type):
                raise self.fail(node, "a run-time-indexed header with fields wider than 64 bits")
            if dyn is not None and method == "setValid":  # an invalid header starts at 0 (BMv2)
                n = slot_count(base.type)
                out.append(f"{ind}if (!S[{dyn}]) memset(&S[{dyn}], 0, {n} * sizeof(uint64_t));")
                out.append(f"{ind}S[{dyn}] = 1;")
                return
            if dyn is not None and method == "setInvalid":
                out.append(f"{ind}memset(&S[{dyn}], 0, {slot_count(base.type)} * sizeof(uint64_t));")
                return
            if isinstance(base.type, HeaderT) and base.place is not None and base.place.base is not None:
                union = isinstance(base.extra, tuple) and base.extra and base.extra[0] == "union_member"
                if union and method == "setValid":
                    self.union_set_valid(node, callee.children[0], out, ind)
                    return
                b = base.place.base
                if union and wide_offsets(base.type):
                    raise self.fail(node, "a header union member with fields wider than 64 bits")
                if method == "setValid":
                    n = slot_count(base.type)
                    out.append(f"{ind}if (!S[{b}]) {{ memset(&S[{b}], 0, {n} * sizeof(uint64_t)); "
                               f"{wide_zero(b, base.type)} }}")
                    out.append(f"{ind}S[{b}] = 1;")
                    return
                if method == "setInvalid":
                    for i in range(slot_count(base.type)):
                        out.append(f"{ind}S[{b + i}] = 0;")
                    if wide_offsets(base.type):
                        out.append(f"{ind}{wide_zero(b, base.type)}")
                    return
                if method == "isValid":
                    return
            raise self.fail(node, f"method {method}")
        if isinstance(callee, Tree) and callee.data == "var":
            target = self.e(callee)
            extra = target.extra
            if isinstance(extra, ActionImpl):
                self.call_action(node, extra, args, out, ind)
                return
            if isinstance(extra, tuple) and extra[0] == "extern_function":
                self.extern_function(node, extra[1], args, out, ind)
                return
        raise self.fail(node, "call")

    def call_action(self, node: Tree, impl: ActionImpl, args: list, out: list[str], ind: str) -> None:
        fname = self.action_fn(impl, node)
        copy_out = []
        for arg, (pname, ptype, direction, slot) in zip(args, impl.params):
            if isinstance(arg, Tree) and arg.data == "named_arg":
                arg = arg.children[1]
            if isinstance(arg, Tree) and arg.data == "dontcare_arg":
                continue  # `_` for an out argument: the value is not wanted
            if direction in ("out", "inout"):
                target = self.e(arg)
                if target.place is None or target.place.base is None or isinstance(target.extra, tuple):
                    # a slice or a field of a run-time-indexed element: read in, written back
                    if direction == "inout":
                        out.append(f"{ind}S[{slot}] = {self.cx(arg)};")
                    copy_out.append(f"{ind}{self.write_back(arg, target, slot)}")
                    continue
                if isinstance(ptype, StackT):
                    raise self.fail(arg, "out argument that is not a static place")
                if direction == "inout":
                    out.append(f"{ind}{copy_code(slot, target.place.base, ptype)}")
                copy_out.append(f"{ind}{copy_code(target.place.base, slot, ptype)}")
            else:
                self.assign_place(arg, slot, ptype, arg, out, ind)
        out.append(f"{ind}{fname}(c);")
        out.extend(copy_out)

    def write_back(self, arg: Any, target: Any, slot: int) -> str:
        """The statement storing slot `slot` into an out argument that is a slice of a static
        scalar or a scalar field of a run-time-indexed stack element (its index evaluated
        now, as the Python pipeline writes it back)."""
        extra = target.extra
        if isinstance(extra, tuple) and extra and extra[0] == "slice":
            _, base, hi, lo = extra
            if base.place is None or base.place.base is None or width_of(base.type) > 64:
                raise self.fail(arg, "out argument that is a slice of a non-static or wide place")
            m = ((1 << (hi - lo + 1)) - 1) << lo
            b = base.place.base
            code = f"(S[{b}] & ~{lit(m)}) | ((S[{slot}] << {lo}) & {lit(m)})"
            return f"S[{b}] = {self.masked(code, base.type) if is_signed(base.type) else code};"
        element = arg.children[0] if isinstance(arg, Tree) and arg.data == "member" else None
        dyn = self.dyn_element(element) if element is not None else None
        if dyn is None or not isinstance(target.type, BitT | BoolT):
            raise self.fail(arg, "out argument that is not a static place")
        offset = self.dyn_field(arg, element, str(arg.children[1].children[0]))
        return f"S[{dyn} + {offset}] = S[{slot}];"

    def extern_method(self, node: Tree, inst: ExternInstance, method: str, args: list,
                      out: list[str], ind: str) -> None:
        if inst.kind == "counter" and method == "count":
            cid = self.counter_ids[inst.name]
            out.append(f"{ind}gf_count(&P->counters[{cid}], {self.cx(args[0])}, c->len);")
            return
        if inst.kind == "direct_counter" and method == "count":
            return
        if inst.kind == "register" and method in ("read", "write"):
            rid = self.register_ids[inst.name]
            r = f"P->registers[{rid}]"
            if method == "write":
                idx, val = self.cx(args[0]), self.cx(args[1])
                out.append(f"{ind}{{ uint64_t i_ = {idx}; if (i_ < {r}.size) "
                           f"__atomic_store_n(&{r}.values[i_], ({val}) & gf_mask({r}.width), __ATOMIC_RELAXED); }}")
                return
            target = self.e(args[0])
            if target.place is None or target.place.base is None:
                raise self.fail(node, "register read into a dynamic place")
            out.append(f"{ind}{{ uint64_t i_ = {self.cx(args[1])}; S[{target.place.base}] = i_ < {r}.size ? "
                       f"__atomic_load_n(&{r}.values[i_], __ATOMIC_RELAXED) : 0; }}")
            return
        if inst.kind == "meter" and method == "execute_meter":
            mid = self.meter_ids[inst.name]
            target = self.e(args[1])
            if target.place is None or target.place.base is None:
                raise self.fail(node, "meter result into a dynamic place")
            out.append(f"{ind}S[{target.place.base}] = gf_meter_execute(&P->meters[{mid}], "
                       f"{self.cx(args[0])}, c->len, c->now_us);")
            return
        raise self.fail(node, f"{inst.kind}.{method}")

    def extern_function(self, node: Tree, name: str, args: list, out: list[str], ind: str) -> None:
        std = self.std
        if name in ("assert", "assume"):
            message = self.rec.assertions.get(id(node))
            if message is None:
                raise self.fail(node, name)
            self.faults.append(PipelineAssertion(message))
            fail = f"c->fault = {len(self.faults)}; " + (
                "goto p_done;" if self.in_parser else f"c->exit_flag = 1; {self.leave()}")
            out.append(f"{ind}if (!({self.cx(args[0])})) {{ {fail} }}")
            return
        if name in ("clone", "clone3", "clone_preserving_field_list"):
            found = self.rec.clones.get(id(node))
            if found is None:
                raise self.fail(node, name)
            ctype, index = found  # the copy is made at the end of ingress (I2E) or egress (E2E)
            out.append(f"{ind}S[GF_CLONE] = {1 if ctype == 'I2E' else 2}; "
                       f"S[GF_CLONE_SESSION] = {self.cx(args[1])} & UINT64_C(0xFFFFFFFF); "
                       f"S[GF_CLONE_FL] = {0 if index is None else index + 1};")
            return
        if name in ("resubmit", "resubmit_preserving_field_list", "recirculate",
                    "recirculate_preserving_field_list"):
            found = self.rec.loops.get(id(node))
            if found is None:
                raise self.fail(node, name)
            kind, index = found  # acted on at the end of ingress (resubmit) or egress (recirculate)
            slot = "GF_RESUBMIT" if kind == "resubmit" else "GF_RECIRC"
            out.append(f"{ind}S[{slot}] = {1 if index is None else index + 2};")
            return
        if name == "truncate":  # the frame leaves cut to that many bytes (0: whole)
            out.append(f"{ind}S[GF_TRUNCATE] = {self.cx(args[0])} & UINT64_C(0xFFFFFFFF);")
            return
        if name == "mark_to_drop":
            out.append(f"{ind}S[{std['egress_spec']}] = {511}; S[{std['mcast_grp']}] = 0;")
            return
        if name in ("verify_checksum", "update_checksum", "verify_checksum_with_payload",
                    "update_checksum_with_payload"):
            self.checksum(node, name, args, out, ind)
            return
        if name == "hash":
            target = self.e(args[0])
            if target.place is None or target.place.base is None:
                raise self.fail(node, "hash into a dynamic place")
            algo = str(self.e(args[1]).const)
            lines, n = self.pack(self.leaves(args[3]), "hb_")
            if algo == "random":
                h = "gf_rand(&c->rng)"
            elif algo in HASHES:
                h = HASHES[algo].format(b="hb_", n=n)
            else:
                raise self.fail(node, f"hash algorithm {algo}")
            out.append(f"{ind}{{")
            out.extend(f"{ind}    {line}" for line in lines)
            out.append(f"{ind}    uint64_t h_ = {h}, top_ = {self.cx(args[4])};")
            out.append(f"{ind}    S[{target.place.base}] = ({self.cx(args[2])} + (top_ ? h_ % top_ : 0)) & "
                       f"{lit((1 << width_of(target.type)) - 1)};")
            out.append(f"{ind}}}")
            return
        if name == "random":
            target = self.e(args[0])
            if target.place is None or target.place.base is None:
                raise self.fail(node, "random into a dynamic place")
            lo, hi = self.cx(args[1]), self.cx(args[2])
            out.append(f"{ind}{{ uint64_t lo_ = {lo}, hi_ = {hi}; if (hi_ < lo_) hi_ = lo_; "
                       f"uint64_t span_ = hi_ - lo_ + 1; S[{target.place.base}] = "
                       f"span_ ? lo_ + gf_rand(&c->rng) % span_ : lo_ + gf_rand(&c->rng); }}")
            return
        if name == "log_msg":
            self.log_msg(node, args, out, ind)
            return
        if name == "digest":
            self.digest(node, args, out, ind)
            return
        if name == "verify":
            if not self.in_parser:
                raise self.fail(node, "verify outside a parser")
            out.append(f"{ind}if (!({self.cx(args[0])})) {{ err_ = {self.cx(args[1])}; goto p_error; }}")
            return
        raise self.fail(node, f"extern {name}")

    def digest(self, node: Tree, args: list, out: list[str], ind: str) -> None:
        """`digest<T>(receiver, data)`: [id, n, values masked to T's fields] appended to the
        packet's digest words, which the control plane reads after ingress; digests that do
        not fit in one packet's words are left out."""
        name = self.rec.digest_names.get(id(args[1]))
        if name is None:
            raise self.fail(node, "digest data that was not compiled")
        fields = self.compiled.digests[name].fields
        leaves = self.leaves(args[1])
        if len(leaves) != len(fields) or any(f.bitwidth > 64 for f in fields):
            raise self.fail(node, f"digest {name}: data that is not one value per field of at most 64 bits")
        values = [(code, f.bitwidth) for (code, _), f in zip(leaves, fields)]
        self.append_words(str(list(self.compiled.digests).index(name)), values, out, ind)

    @staticmethod
    def append_words(ident: str, values: list[tuple[str, int]], out: list[str], ind: str) -> None:
        """[ident, n, values masked to their widths...] appended to the packet's digest words,
        left out when they do not fit."""
        n = len(values)
        out.append(f"{ind}if (c->ndig + {n + 2} <= GF_DIGEST_WORDS) {{")
        out.append(f"{ind}    uint64_t *d_ = &c->dig[c->ndig];")
        out.append(f"{ind}    d_[0] = {ident}; d_[1] = {n};")
        for k, (code, w) in enumerate(values):
            out.append(f"{ind}    d_[{k + 2}] = ({code}) & {lit((1 << w) - 1)};")
        out.append(f"{ind}    c->ndig += {n + 2};")
        out.append(f"{ind}}}")

    def log_msg(self, node: Tree, args: list, out: list[str], ind: str) -> None:
        """`log_msg(text[, {values}])`: [GF_LOG_ID + k, n, values...] joins the packet's digest
        words; the Python side puts the values into format k (as many words as fit)."""
        text = self.e(args[0]).const
        if not isinstance(text, str):
            raise self.fail(node, "log_msg without a string literal")
        self.log_formats.append(text)
        leaves = self.leaves(args[1]) if len(args) == 2 else []
        self.append_words(f"GF_LOG_ID + {len(self.log_formats) - 1}", leaves, out, ind)

    def checksum(self, node: Tree, name: str, args: list, out: list[str], ind: str) -> None:
        update = name.startswith("update")
        payload = name.endswith("payload")
        algo = str(self.e(args[3]).const)
        target = self.e(args[2])
        if target.place is None or target.place.base is None:
            raise self.fail(node, "checksum field in a dynamic place")
        lines, n = self.pack(self.leaves(args[1]), "cb_")
        pl = ("c->data + c->payload_off", "c->len - c->payload_off") if payload else ("0", "0")
        if algo == "csum16":
            h = f"gf_csum16(cb_, {n}, {pl[0]}, {pl[1]})"
        elif algo in HASHES and not payload:
            h = HASHES[algo].format(b="cb_", n=n)
        else:
            raise self.fail(node, f"checksum algorithm {algo}{' with payload' if payload else ''}")
        m = lit((1 << width_of(target.type)) - 1)
        out.append(f"{ind}if ({self.cx(args[0])}) {{")
        out.extend(f"{ind}    {line}" for line in lines)
        if update:
            out.append(f"{ind}    S[{target.place.base}] = {h} & {m};")
        else:
            out.append(f"{ind}    if (({h} & {m}) != S[{target.place.base}]) S[{self.std['checksum_error']}] = 1;")
        out.append(f"{ind}}}")


def _is_initializer(node: Any) -> bool:
    """A list expression `{a, b}` or a structure expression `{f = a, g = b}`."""
    return isinstance(node, Tree) and node.data in ("list_expr", "struct_expr")


def slots_in_order(codes: list[str]) -> str:
    """C declaring `v_` and computing its words one statement each, left to right (the
    elements of an initializer list are not sequenced in C, and a value may call a function)."""
    return f"uint64_t v_[{len(codes)}]; " + " ".join(f"v_[{i}] = {code};" for i, code in enumerate(codes))
