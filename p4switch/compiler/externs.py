"""v1model externs: hash, checksums, digests, clones, resubmit/recirculate, registers,
counters, meters; and packing field lists into bytes for them."""

from __future__ import annotations

from typing import Any

from lark import Tree

from p4switch import hashes
from p4switch.compiler.compiled import E, ExternInstance, Fn, FunctionImpl, Scope, _mask, field_is_scalar, generate
from p4switch.externs import GREEN
from p4switch.frontend.program import DigestInfo, ParamInfo
from p4switch.frontend.types import (
    BitT, BoolT, EnumT, ErrorT, HeaderT, ListT, StringT, StructT, VarbitT, VoidT, field_offset,
)
from p4switch.runtime import DROP_PORT, ExternFunctionMissing, ParserError, PipelineAssertion


class ExternCompiler:
    """Mixin of the Compiler: v1model extern functions and extern objects."""

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
                out.extend(self.leaves(E(ft, sub.reader() if field_is_scalar(ft) else sub.block_reader(),
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
            fn = generate(f"def pack(s):\n    return ({terms}).to_bytes({nbytes}, 'big')\n", "pack")
            fn.value_code = (f"({terms})", nbytes)  # the number before it becomes bytes
            return fn
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
        if handler is None and name in self.program_extern_functions:
            return self._call_function(node, self._unimplemented_extern(name), args, scope)
        if handler is None:
            raise self.unsupported(node, f"extern function {name} is not supported")
        return handler(node, args, scope)

    def _unimplemented_extern(self, name: str) -> FunctionImpl:
        """A program-declared extern function: type-checked like a function; calling it fails
        the packet with ExternFunctionMissing (BMv2 needs a plug-in for it, too)."""
        cache = self.compiled_functions
        key = f"$extern {name}"
        if key in cache:
            return cache[key]
        decl = self.program_extern_functions[name]
        ret_node, _fname, tparams, params_node = decl.children[1].children
        if tparams is not None:
            raise self.unsupported(decl, f"generic extern function {name} is not supported")
        params = [(pname, ptype, direction, self.alloc(ptype))
                  for pname, ptype, direction, _ in self.params(params_node)]
        message = (f"extern function {name} (declared at {self.where(decl)}) has no implementation "
                   "on this target: the program declares it, and neither p4switch nor BMv2 (without "
                   "a plug-in) can run it")

        def missing(s: list) -> None:
            raise ExternFunctionMissing(message)
        impl = FunctionImpl(name, self.resolve_type(ret_node), params, missing, missing=message)
        cache[key] = impl
        return impl

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
        target = self.lvalue(args[2], scope) if update else self.expr(args[2], scope)
        if not isinstance(target.type, BitT):
            raise self.type_error(args[2], f"checksum field must be bit<W>, got {target.type}")
        algo = hashes.ALGORITHMS.get(self._algorithm(args[3], scope))
        if algo is None:
            raise self.unsupported(args[3], "random is not a checksum algorithm")
        m = _mask(target.type.width)
        read, write = target.fn, self.writer_for(node, target)
        cond_code = self._bool_operand(args[0], scope).code
        if cond_code is not None and (update or target.code is not None):
            return self._checksum_code(cond_code, data, algo, m, payload, update, write,
                                       target.code, None if update else self._std_slot("checksum_error"))
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

    @staticmethod
    def _checksum_code(cond: str, data: Fn, algo: Any, mask: int, payload: bool, update: bool,
                       write: Any, read: str | None, error_slot: int | None) -> E:
        """A checksum statement as generated code (the condition and the field inlined)."""
        value = "algo(data(s) + s[0].payload)" if payload else "algo(data(s))"
        number = getattr(data, "value_code", None)
        if algo is hashes.csum16 and not payload and number is not None:
            value = f"csum16_value({number[0]}, {number[1]})"  # no bytes round trip
        if update:
            body = f"    if {cond}:\n        write(s, {value} & {mask})\n"
        else:
            body = f"    if {cond} and {value} & {mask} != {read}:\n        s[{error_slot}] = 1\n"
        fn = generate(f"def checksum(s):\n{body}", "checksum",
                      {"algo": algo, "data": data, "write": write,
                       "csum16_value": hashes.csum16_value})
        return E(VoidT(), fn)

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
        if isinstance(data.type, StructT) and not all(
                isinstance(ft, BitT | BoolT) or (isinstance(ft, EnumT) and ft.repr is not None)
                for _, ft in data.type.fields):
            raise self.unsupported(args[1], f"digest struct {data.type.name} must hold only bit<W>, "
                                            "bool or serializable enum fields")
        leaves = self.leaves(data, args[1])
        if isinstance(data.type, StructT):
            dname = data.type.name
            fields = [(f, t) for f, t in data.type.fields]
            self.info.digests.setdefault(dname, DigestInfo(dname, [
                ParamInfo(f, w) for (f, _), (_, w) in zip(fields, leaves)]))
        elif isinstance(data.type, ListT):
            dname = self._tuple_digest_name(args[1])
            self.info.digests.setdefault(dname, DigestInfo(dname, [
                ParamInfo(f"f{i}", w) for i, (_, w) in enumerate(leaves)], is_tuple=True))
        else:
            raise self.unsupported(args[1], "digest data must be a struct or a list {a, b, ...}")
        fns = [f for f, _ in leaves]

        def digest(s: list) -> None:
            s[0].digest(dname, tuple(f(s) for f in fns))
        return E(VoidT(), digest, extra=("digest", dname))

    def _tuple_digest_name(self, data_node: Any) -> str:
        """`digest_N` for a digest of a list: N counts such calls in source order, as p4c
        names them ("Cannot find a good name for digest(...)")."""
        order = getattr(self, "_tuple_digest_order", None)
        if order is None:
            calls = []
            for sub in self.tree.iter_subtrees_topdown():
                callee = sub.children[0] if sub.data in ("call", "method_call_stmt") and sub.children else None
                if isinstance(callee, Tree) and callee.data == "var" and str(callee.children[0]) == "digest" \
                        and len(sub.children) == 2 and isinstance(sub.children[1], Tree):
                    items = [a.children[1] if isinstance(a, Tree) and a.data == "named_arg" else a
                             for a in sub.children[1].children]
                    if len(items) == 2 and isinstance(items[1], Tree) and items[1].data == "list_expr":
                        calls.append(items[1])
            order = {id(n): i for i, n in enumerate(calls)}
            self._tuple_digest_order = order
        return f"digest_{order.get(id(data_node), len(order))}"

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
        return E(VoidT(), clone, extra=("clone", ctype, None))

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
        return E(VoidT(), clone, extra=("clone", ctype, index))

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
        message = f"{self.where(node)}: {what} failed"

        def check(s: list) -> None:
            if not cond(s):
                raise PipelineAssertion(message)
        return E(VoidT(), check, extra=("assertion", message))

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

