"""Blocks: actions, extern instances, functions, controls and the v1model package (tables are in
compile_tables.py, parsers in compile_parsers.py)."""

from __future__ import annotations

from typing import Any

from lark import Token, Tree

from p4switch import hashes
from p4switch.action_profiles import ActionProfile
from p4switch.compiler.stmt import seq
from p4switch.compiler.support import fast_runner, fixed_id, name_of, qualify
from p4switch.compiler.compiled import (
    ActionImpl, CompiledProgram, Const, ControlImpl, ExternInstance, Fn, FunctionImpl, PacketParam,
    Place, Scope, Var, _anno_map, _same_type, anno_texts,
)
from p4switch.expr_text import expr_text
from p4switch.externs import CounterArray, MeterArray, RegisterArray, ValueSet
from p4switch.frontend.program import (
    ActionInfo, ActionProfileInfo, CounterInfo, MeterInfo, ParamInfo, RegisterInfo, ValueSetInfo,
)
from p4switch.frontend.types import (
    BitT, BoolT, DeclT, EnumT, ExternT, IntLitT, P4Type, StructT, field_offset, scalar_width,
)
from p4switch.runtime import ReturnSignal

_V1_ROLES = ("parser", "verify", "ingress", "egress", "compute", "deparser")


def _has_return(node: Tree) -> bool:
    return any(t.data == "return_stmt" for t in node.iter_subtrees())


class BlockCompiler:
    """Mixin of the Compiler: blocks and the top level."""

    # -- parameters ------------------------------------------------------------------------------

    def params(self, node: Tree | None) -> list[tuple[str, P4Type, str | None, Any]]:
        """(name, type, direction, type tree) of each parameter."""
        result = []
        if node is None:
            return result
        for p in node.children:
            _annos, direction, type_node, name_node, _default = p.children
            d = str(direction.children[0]) if direction is not None else None
            result.append((name_of(name_node), self.resolve_type(type_node), d, type_node))
        return result

    # -- actions -----------------------------------------------------------------------------

    def global_action(self, name: str) -> ActionImpl:
        impl = self.compiled_global_actions.get(name)
        if impl is None:
            impl = self.compile_action(self.global_actions[name], "", self.globals)
            self.compiled_global_actions[name] = impl
        return impl

    def compile_action(self, node: Tree, prefix: str, scope: Scope) -> ActionImpl:
        annos_node, name_node, params_node, body = node.children
        annos = _anno_map(annos_node)
        local = name_of(name_node)
        qualified = qualify(prefix, local, annos)
        fixed_id(self, annos, qualified)
        inner = scope.child()
        params = []
        data_slots = []
        infos = []
        for pname, ptype, direction, _ in self.params(params_node):
            place = self.alloc(ptype)
            inner.names[pname] = Var(place.read_only() if direction in (None, "in") else place)
            params.append((pname, ptype, direction, place.base))
            if direction is None:
                if not isinstance(ptype, BitT | BoolT) and not (isinstance(ptype, EnumT) and ptype.repr):
                    raise self.type_error(node, f"action {local}: parameter {pname} of type {ptype} "
                                                "cannot be action data")
                data_slots.append(place.base)
                infos.append(ParamInfo(pname, scalar_width(ptype)))
        self.action_depth = getattr(self, "action_depth", 0) + 1
        try:
            compiled_body = self.block(body.children[1:], inner)
        finally:
            self.action_depth -= 1
        impl = ActionImpl(qualified, params, compiled_body, data_slots)
        impl.bool_slots = [p[3] for p in params if p[2] is None and isinstance(p[1], BoolT)]
        impl.may_return = _has_return(body)
        fast_runner(impl, impl.may_return)
        self.info.actions.setdefault(qualified, ActionInfo(qualified, infos, anno_texts(annos_node)))
        return impl

    # -- extern instances ----------------------------------------------------------------------

    def instantiate(self, node: Tree, prefix: str, scope: Scope) -> None:
        annos_node, type_node, args_node, name_node = node.children
        local = name_of(name_node)
        qualified = qualify(prefix, local, _anno_map(annos_node))
        fixed_id(self, _anno_map(annos_node), qualified)
        args = list(args_node.children) if args_node is not None else []
        t = self.resolve_type(type_node)
        if isinstance(t, DeclT) and t.kind in ("control", "parser"):
            impl = self.compile_block_instance(t, qualified, args, scope)
            scope.names[local] = impl
            return
        if not isinstance(t, ExternT):
            raise self.type_error(node, f"cannot instantiate {t}")
        kind = t.name
        handler = getattr(self, f"_new_{kind}", None)
        if handler is None:
            raise self.unsupported(node, f"extern {kind} is not supported")
        scope.names[local] = handler(node, qualified, t, args, scope)

    def _enum_arg(self, node: Any, enum: str, scope: Scope) -> str:
        e = self.expr(node, scope)
        if not isinstance(e.type, EnumT) or e.type.name != enum or not e.is_const:
            raise self.type_error(node, f"expected a {enum} constant")
        return str(e.const)

    def _new_counter(self, node: Tree, name: str, t: ExternT, args: list, scope: Scope) -> ExternInstance:
        if len(args) != 2:
            raise self.type_error(node, "counter takes (size, CounterType)")
        size = self.const_int(args[0])
        unit = self._enum_arg(args[1], "CounterType", scope)
        counter = CounterArray(name, size, unit)
        self.counters[name] = counter
        self.info.counters[name] = CounterInfo(name, size, unit)
        return ExternInstance("counter", name, counter)

    def _new_direct_counter(self, node: Tree, name: str, t: ExternT, args: list, scope: Scope) -> ExternInstance:
        if len(args) != 1:
            raise self.type_error(node, "direct_counter takes (CounterType)")
        unit = self._enum_arg(args[0], "CounterType", scope)
        self.info.counters[name] = CounterInfo(name, 0, unit, direct_table="")
        return ExternInstance("direct_counter", name, unit)

    def _new_meter(self, node: Tree, name: str, t: ExternT, args: list, scope: Scope) -> ExternInstance:
        if len(args) != 2:
            raise self.type_error(node, "meter takes (size, MeterType)")
        size = self.const_int(args[0])
        unit = self._enum_arg(args[1], "MeterType", scope)
        meters = MeterArray(name, size, unit)
        self.meters[name] = meters
        self.info.meters[name] = MeterInfo(name, size, unit)
        return ExternInstance("meter", name, meters)

    def _new_direct_meter(self, node: Tree, name: str, t: ExternT, args: list, scope: Scope) -> ExternInstance:
        if len(args) != 1:
            raise self.type_error(node, "direct_meter takes (MeterType)")
        unit = self._enum_arg(args[0], "MeterType", scope)
        self.info.meters[name] = MeterInfo(name, 0, unit, direct_table="")
        return ExternInstance("direct_meter", name, unit)

    def _new_register(self, node: Tree, name: str, t: ExternT, args: list, scope: Scope) -> ExternInstance:
        if len(args) != 1 or not t.type_args:
            raise self.type_error(node, "register<T>(size) expected")
        value_t = t.type_args[0]
        if not isinstance(value_t, BitT):
            raise self.unsupported(node, f"registers of {value_t} are not supported")
        size = self.const_int(args[0])
        reg = RegisterArray(name, size, value_t.width)
        self.registers[name] = reg
        self.info.registers[name] = RegisterInfo(name, size, value_t.width)
        return ExternInstance("register", name, reg, value_t)

    def _new_Checksum16(self, node: Tree, name: str, t: ExternT, args: list, scope: Scope) -> ExternInstance:
        return ExternInstance("Checksum16", name)

    def _new_action_profile(self, node: Tree, name: str, t: ExternT, args: list, scope: Scope) -> ExternInstance:
        if len(args) != 1:
            raise self.type_error(node, "action_profile takes (size)")
        profile = ActionProfile(name, self.const_int(args[0]))
        self.action_profiles[name] = profile
        self.info.action_profiles[name] = ActionProfileInfo(name, profile.size, [], False)
        return ExternInstance("action_profile", name, profile)

    def _new_action_selector(self, node: Tree, name: str, t: ExternT, args: list, scope: Scope) -> ExternInstance:
        if len(args) != 3:
            raise self.type_error(node, "action_selector takes (HashAlgorithm, size, outputWidth)")
        algo = self._algorithm(args[0], scope)
        if algo not in hashes.ALGORITHMS:
            raise self.unsupported(args[0], f"HashAlgorithm.{algo} for an action selector")
        profile = ActionProfile(name, self.const_int(args[1]), selector=hashes.ALGORITHMS[algo],
                                output_width=self.const_int(args[2]))
        self.action_profiles[name] = profile
        self.info.action_profiles[name] = ActionProfileInfo(name, profile.size, [], True)
        return ExternInstance("action_selector", name, profile)

    # -- functions -----------------------------------------------------------------------------

    def function(self, name: str, type_args: Any = None, args: list | None = None,
                 scope: Scope | None = None) -> FunctionImpl:
        """The compiled function `name`; a generic one is specialized for the call's type
        arguments (given, or inferred from the arguments of parameters typed by a type
        variable) and compiled once per specialization."""
        node = self.functions[name]
        _annos, proto, body = node.children
        ret_node, _fname, tparams, params_node = proto.children
        bindings: dict[str, P4Type] = {}
        if tparams is not None:
            bindings = self._type_bindings(node, name, [str(t) for t in tparams.children],
                                           type_args, params_node, args or [], scope)
        key = name if not bindings else f"{name}<{', '.join(str(t) for t in bindings.values())}>"
        cache = self.compiled_functions
        if key in cache:
            return cache[key]
        saved = {t: self.types.get(t) for t in bindings}
        self.types.update(bindings)
        try:
            ret = self.resolve_type(ret_node)
            inner = self.globals.child()
            inner.names["$return"] = ret
            params = []
            for pname, ptype, direction, _ in self.params(params_node):
                place = self.alloc(ptype)
                inner.names[pname] = Var(place.read_only() if direction in (None, "in") else place)
                params.append((pname, ptype, direction, place))
            impl = FunctionImpl(key, ret, params, lambda s: None)
            cache[key] = impl
            impl.body = self.block(body.children[1:], inner)
        finally:
            for t, old in saved.items():
                if old is None:
                    self.types.pop(t, None)
                else:
                    self.types[t] = old
        return impl

    def _type_bindings(self, node: Tree, name: str, tvars: list[str], type_args: Any,
                       params_node: Any, args: list, scope: Scope | None) -> dict[str, P4Type]:
        if type_args is not None:
            given = [self.resolve_type(t) for t in type_args.children]
            if len(given) != len(tvars):
                raise self.type_error(node, f"function {name} takes {len(tvars)} type argument(s), got {len(given)}")
            return dict(zip(tvars, given))
        bindings: dict[str, P4Type] = {}
        param_nodes = [] if params_node is None else [p for p in params_node.children if isinstance(p, Tree)]
        for param, arg in zip(param_nodes, args):
            type_node = param.children[2]
            tname = str(type_node.children[-1]) if isinstance(type_node, Tree) and type_node.data == "named_type" else None
            if tname not in tvars or tname in bindings or scope is None:
                continue
            if isinstance(arg, Tree) and arg.data == "named_arg":
                arg = arg.children[1]
            t = self.expr(arg, scope).type
            if isinstance(t, IntLitT):
                raise self.type_error(arg, f"cannot infer type {tname} of {name} from an integer literal: "
                                           f"give it, {name}<bit<W>>(...)")
            bindings[tname] = t
        missing = [t for t in tvars if t not in bindings]
        if missing:
            raise self.type_error(node, f"cannot infer type argument(s) {', '.join(missing)} of function {name}")
        return bindings

    # -- controls and parsers ------------------------------------------------------------------

    def compile_block_instance(self, t: DeclT, qualified: str, ctor_args: list, scope: Scope) -> ControlImpl:
        """A parser or control instantiated inside another block: own slots for its params."""
        node = t.tree
        assert isinstance(node, Tree)
        params = self.params(node.children[3])
        bindings: dict[str, Any] = {}
        plist = []
        for pname, ptype, direction, _ in params:
            if isinstance(ptype, ExternT) and ptype.name in ("packet_in", "packet_out"):
                bindings[pname] = self._packet_binding(ptype)
                plist.append((pname, ptype, direction, None))
                continue
            place = self.alloc(ptype)
            bindings[pname] = Var(place.read_only() if direction in (None, "in") else place)
            plist.append((pname, ptype, direction, place))
        bindings.update(self.constructor_bindings(node, ctor_args, scope))
        run = (self.compile_control(node, qualified, bindings) if t.kind == "control"
               else self.compile_parser(node, qualified, bindings, nested=True))
        return ControlImpl(t.kind, plist, run)

    def _packet_binding(self, ptype: ExternT) -> Any:
        return PacketParam(ptype.name)

    def _locals(self, items: list, prefix: str, scope: Scope, init: list[Fn]) -> None:
        for item in items:
            kind = item.data
            if kind == "const_decl":
                scope.names[name_of(item.children[2])] = Const(self._const_value(item, scope))
            elif kind == "var_decl":
                fn = self._s_var_decl(item, scope)
                if fn is not None:
                    init.append(fn)
            elif kind == "instantiation":
                self.instantiate(item, prefix, scope)
            elif kind == "action_decl":
                impl = self.compile_action(item, prefix, scope)
                scope.names[name_of(item.children[1])] = impl
            elif kind == "table_decl":
                scope.names[name_of(item.children[1])] = self.compile_table(item, prefix, scope)
            elif kind == "function_decl":
                raise self.unsupported(item, "functions declared inside controls are not supported")
            elif kind == "value_set_decl":
                scope.names[name_of(item.children[3])] = self._value_set(item, prefix)
            else:
                raise self.unsupported(item, f"{kind} inside a block is not supported")

    def _value_set(self, node: Tree, prefix: str) -> ExternInstance:
        annos_node, type_args, size_node, name_node = node.children
        annos = _anno_map(annos_node)
        qualified = qualify(prefix, name_of(name_node), annos)
        fixed_id(self, annos, qualified)
        t = self.resolve_type(type_args.children[0])
        if isinstance(t, BitT):
            fields = [(name_of(name_node), t.width, "exact")]
        elif isinstance(t, StructT) and all(isinstance(ft, BitT) for _, ft in t.fields):
            fields = []
            for fname, ft in t.fields:
                kind_args = t.field_annotations.get(fname, {}).get("match")
                kind = expr_text(kind_args[0]) if kind_args else "exact"
                if kind not in ("exact", "ternary", "lpm", "range"):
                    raise self.unsupported(node, f"value set field {fname}: match kind {kind}")
                fields.append((fname, ft.width, kind))  # type: ignore[union-attr]
        else:
            raise self.unsupported(node, f"value_set of {t}: use bit<W> or a struct of bit<W>")
        size = self.const_int(size_node)
        vs = ValueSet(qualified, fields, size)
        self.value_sets[qualified] = vs
        self.info.value_sets[qualified] = ValueSetInfo(qualified, size, fields)
        return ExternInstance("value_set", qualified, vs, t)

    def constructor_bindings(self, node: Tree, args: list, scope: Scope) -> dict[str, Any]:
        """Constructor parameters of a parser or control bound to constant arguments."""
        params = self.params(node.children[4])
        if len(args) != len(params):
            raise self.type_error(node, f"{name_of(node.children[1])} takes {len(params)} constructor "
                                        f"argument(s), got {len(args)}")
        result: dict[str, Any] = {}
        for arg, (pname, ptype, _, _) in zip(args, params):
            if isinstance(arg, Tree) and arg.data == "named_arg":
                arg = arg.children[1]
            if isinstance(ptype, DeclT):  # a parser or control instance passed to a constructor
                bound = scope.lookup(name_of(arg.children[0])) if arg.data == "var" else None
                if not isinstance(bound, ControlImpl):
                    raise self.unsupported(arg, f"constructor argument {pname} must name a "
                                                "parser or control instance")
                result[pname] = bound
                continue
            e = self.coerce(self.expr(arg, scope, ptype), ptype, arg)
            if not e.is_const:
                raise self.unsupported(arg, f"constructor argument {pname} must be a compile-time constant")
            result[pname] = Const(e)
        return result

    def compile_control(self, node: Tree, prefix: str, bindings: dict[str, Any]) -> Fn:
        children = node.children
        apply_index = next(i for i, c in enumerate(children) if isinstance(c, Token) and c.type == "APPLY")
        scope = self.globals.child()
        scope.names.update(bindings)
        scope.names["$prefix"] = prefix
        init: list[Fn] = []
        self._locals(children[5:apply_index], prefix, scope, init)
        apply_block = children[apply_index + 1]
        body = seq(init + [self.stmt(apply_block, scope)])
        if not any(t.data == "return_stmt" for t in apply_block.iter_subtrees()):
            return body  # nothing to catch: the statements themselves

        def run_control(s: list) -> None:
            try:
                body(s)
            except ReturnSignal:
                pass
        return run_control

    # -- the v1model package -------------------------------------------------------------------

    def build(self) -> CompiledProgram:
        self.declare()
        for inst in self.instances.values():  # externs instantiated at the top level (shared)
            if isinstance(self.resolve_type(inst.children[1]), ExternT):
                self.instantiate(inst, "", self.globals)
        main = self.instances.get("main")
        if main is None:
            raise self.type_error(self.tree, "the program declares no `main` package instance")
        package_t = self.resolve_type(main.children[1])
        if not isinstance(package_t, DeclT) or package_t.name != "V1Switch":
            raise self.unsupported(main, f"architecture package {package_t} is not supported "
                                         "(only v1model's V1Switch)")
        args = list(main.children[2].children) if main.children[2] is not None else []
        if len(args) != 6:
            raise self.type_error(main, f"V1Switch takes 6 blocks, got {len(args)}")
        blocks: list[DeclT] = []
        block_args: list[list] = []
        for arg in args:
            if isinstance(arg, Tree) and arg.data == "construct":
                t = self._named_type(arg.children[0])
                block_args.append(list(arg.children[1].children) if arg.children[1] is not None else [])
            elif isinstance(arg, Tree) and arg.data == "var" and name_of(arg) in self.instances:
                inst = self.instances[name_of(arg)]
                t = self.resolve_type(inst.children[1])
                block_args.append(list(inst.children[2].children) if inst.children[2] is not None else [])
            else:
                raise self.unsupported(arg, "V1Switch arguments must be block instantiations")
            if not isinstance(t, DeclT) or t.tree is None:
                raise self.type_error(arg, f"{t} is not a parser or control")
            blocks.append(t)
        parser = blocks[0]
        if parser.kind != "parser":
            raise self.type_error(args[0], "the first V1Switch argument must be a parser")
        pparams = self.params(parser.tree.children[3])
        if len(pparams) != 4:
            raise self.type_error(parser.tree, "the v1model parser takes 4 parameters")
        hdr_t, meta_t = pparams[1][1], pparams[2][1]
        std_t = self.types["standard_metadata_t"]
        hdr = self.alloc(hdr_t)
        meta = self.alloc(meta_t)
        std = self.alloc(std_t)
        self.std_place = std
        shared = {"H": Var(hdr), "M": Var(meta), "S": Var(std)}
        roles = {
            "parser": ("parser", ["packet_in", "H", "M", "S"]),
            "verify": ("control", ["H", "M"]),
            "ingress": ("control", ["H", "M", "S"]),
            "egress": ("control", ["H", "M", "S"]),
            "compute": ("control", ["H", "M"]),
            "deparser": ("control", ["packet_out", "H"]),
        }
        expected_types = {"H": hdr_t, "M": meta_t, "S": std_t}
        compiled: dict[str, Fn] = {}
        for role, block, arg, ctor_args in zip(_V1_ROLES, blocks, args, block_args):
            kind, shape = roles[role]
            if block.kind != kind:
                raise self.type_error(arg, f"V1Switch expects a {kind} for its {role} block, got {block.name}")
            params = self.params(block.tree.children[3])
            if len(params) != len(shape):
                raise self.type_error(block.tree, f"{block.name} must take {len(shape)} parameters "
                                                  f"for the {role} block, it takes {len(params)}")
            bindings: dict[str, Any] = {}
            for (pname, ptype, _d, tnode), want in zip(params, shape):
                if want in ("packet_in", "packet_out"):
                    if not (isinstance(ptype, ExternT) and ptype.name == want):
                        raise self.type_error(tnode, f"{block.name}: parameter {pname} must be {want}")
                    bindings[pname] = PacketParam(want)
                    continue
                if not _same_type(ptype, expected_types[want]):
                    raise self.type_error(tnode, f"{block.name}: parameter {pname} has type {ptype}, "
                                                 f"expected {expected_types[want]}")
                var = shared[want]
                bindings[pname] = Var(var.place.read_only()) if _d == "in" else var
            prefix = block.name
            bindings.update(self.constructor_bindings(block.tree, ctor_args, self.globals))
            if kind == "parser":
                compiled[role] = self.compile_parser(block.tree, prefix, bindings)
            else:
                compiled[role] = self.compile_control(block.tree, prefix, bindings)
        assert isinstance(std_t, StructT)
        std_slots = {}
        for fname, ft in std_t.fields:
            off, _ = field_offset(std_t, fname)  # type: ignore[misc]
            std_slots[fname] = std.base + off  # type: ignore[operator]
        return CompiledProgram(
            info=self.info, slot_count=self.next_slot, template=list(self.template), hdr=hdr,
            meta=meta, std=std_slots, parser=compiled["parser"], verify=compiled["verify"],
            ingress=compiled["ingress"], egress=compiled["egress"], compute=compiled["compute"],
            deparser=compiled["deparser"], tables=self.tables, counters=self.counters,
            meters=self.meters, registers=self.registers, action_profiles=self.action_profiles,
            field_lists=self._field_lists(meta), digests=self.info.digests, errors=self.errors,
            value_sets=self.value_sets)

    def _std_slot(self, name: str) -> int:
        std = self.std_place
        if std is None:
            raise RuntimeError("standard metadata not allocated yet")
        std_t = self.types["standard_metadata_t"]
        off, _ = field_offset(std_t, name)  # type: ignore[arg-type,misc]
        return std.base + off

    def _field_lists(self, meta: Place) -> dict[int, list[int]]:
        lists: dict[int, list[int]] = {}
        t = meta.type
        if not isinstance(t, StructT):
            return lists
        for fname, ft in t.fields:
            annos = t.field_annotations.get(fname, {})
            if "field_list" not in annos:
                continue
            off, _ = field_offset(t, fname)  # type: ignore[misc]
            for arg in annos["field_list"]:
                idx = self.const_int(arg)
                from p4switch.frontend.types import slot_count
                lists.setdefault(idx, []).extend(range(meta.base + off, meta.base + off + slot_count(ft)))
        return lists


