"""Blocks: actions, tables, extern instances, parsers, controls and the v1model package."""

from __future__ import annotations

from typing import Any

from lark import Token, Tree

from p4switch import hashes
from p4switch.action_profiles import ActionProfile
from p4switch.compile_expr import expr_text
from p4switch.compile_stmt import _inline, seq
from p4switch.compiled import (
    E, ActionImpl, CompiledProgram, Const, ControlImpl, ExternInstance, Fn, FunctionImpl,
    PacketParam, Place, Scope, TableImpl, Var, _anno_map, _anno_string, _same_type, anno_texts,
    codes, generate,
)
from p4switch.externs import CounterArray, Meter, MeterArray, RegisterArray, ValueSet
from p4switch.frontend.program import (
    ActionInfo, ActionProfileInfo, CounterInfo, MeterInfo, ParamInfo, RegisterInfo, TableInfo,
    ValueSetInfo,
)
from p4switch.frontend.types import (
    BitT, BoolT, DeclT, EnumT, ExternT, IntLitT, P4Type, StructT,
    field_offset, scalar_width,
)
from p4switch.runtime import ParserError, ReturnSignal
from p4switch.tables import (
    ActionSpec,
    Exact,
    KeyField,
    Lpm,
    Optional,
    Range,
    Table,
    TableEntry,
    TableError,
    Ternary,
)

_V1_ROLES = ("parser", "verify", "ingress", "egress", "compute", "deparser")
_MAX_PARSER_STEPS = 1000
_NO_MATCH = "$nomatch"  # the parser state a select without a matching case goes to
_LEGACY_PRIORITY_TOP = 1 << 24  # legacy @priority(N) becomes TOP - N (higher wins here)


def _fast_runner(impl: ActionImpl, may_return: bool) -> None:
    """Give `impl` a generated `run_with_args`: action data into its slots, then the body
    inlined (the generic method stays for actions that may `return`)."""
    if may_return:
        return
    lines, env = _inline(impl.body)
    slots = impl.data_slots
    head = [f"{', '.join(f's[{x}]' for x in slots)}, = args"] if slots else []
    body = "".join(f"    {line}\n" for line in head + lines or ["pass"])
    impl.run_with_args = generate(f"def run(s, args):\n{body}", "run", env)  # type: ignore[method-assign]


def _parser_loop(init: Fn, states: dict[str, Fn]) -> Fn | None:
    """The parser as one generated loop: each state's statements inlined in an if-chain,
    direct transitions as constants (no call per state, no dict lookup)."""
    lines, env = _inline(init)
    lines = list(lines) + ["state = 'start'", "steps = 0", "while True:"]
    env = dict(env)
    first = True
    for i, (name, fn) in enumerate(states.items()):
        parts = getattr(fn, "parts", None)
        if parts is None:
            return None
        body, nxt, direct = parts
        body_lines, body_env = _inline(body)
        env.update(body_env)
        lines.append(f"    {'if' if first else 'elif'} state == {name!r}:")
        first = False
        lines += [f"        {line}" for line in body_lines]
        if direct is not None:
            lines.append(f"        state = {direct!r}")
        elif getattr(nxt, "inline", None) is not None:
            table, key, fallback = nxt.inline
            env[f"_cases{i}"] = table
            lines.append(f"        state = _cases{i}.get({key}, {fallback!r})")
        else:
            env[f"_next{i}"] = nxt
            lines.append(f"        state = _next{i}(s)")
    lines += ["    if state == 'accept':", "        return",
              "    if state == 'reject':", "        raise ParserError('$reject')",
              f"    if state == {_NO_MATCH!r}:", "        raise ParserError('NoMatch')",
              "    steps += 1",
              f"    if steps >= {_MAX_PARSER_STEPS}:", "        raise ParserError('ParserTimeout')"]
    env["ParserError"] = ParserError
    source = "def run_parser(s):\n" + "".join(f"    {line}\n" for line in lines)
    return generate(source, "run_parser", env)


def _has_return(node: Tree) -> bool:
    return any(t.data == "return_stmt" for t in node.iter_subtrees())


def _name(node: Any) -> str:
    return str(node.children[0]) if isinstance(node, Tree) else str(node)


def _fixed_id(compiler: Any, annos: dict[str, list], name: str) -> None:
    """Record an ``@id(N)`` annotation for P4Info."""
    args = annos.get("id")
    if args:
        compiler.info.fixed_ids[name] = compiler.const_int(args[0])


def _qualify(prefix: str, local: str, annos: dict[str, list]) -> str:
    given = _anno_string(annos, "name")
    if given is not None:
        if given.startswith("."):
            return given[1:]
        return f"{prefix}.{given}" if prefix else given
    return f"{prefix}.{local}" if prefix else local


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
            result.append((_name(name_node), self.resolve_type(type_node), d, type_node))
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
        local = _name(name_node)
        qualified = _qualify(prefix, local, annos)
        _fixed_id(self, annos, qualified)
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
        impl = ActionImpl(qualified, params, self.block(body.children[1:], inner), data_slots)
        impl.bool_slots = [p[3] for p in params if p[2] is None and isinstance(p[1], BoolT)]
        impl.may_return = _has_return(body)
        _fast_runner(impl, impl.may_return)
        self.info.actions.setdefault(qualified, ActionInfo(qualified, infos, anno_texts(annos_node)))
        return impl

    # -- extern instances ----------------------------------------------------------------------

    def instantiate(self, node: Tree, prefix: str, scope: Scope) -> None:
        annos_node, type_node, args_node, name_node = node.children
        local = _name(name_node)
        qualified = _qualify(prefix, local, _anno_map(annos_node))
        _fixed_id(self, _anno_map(annos_node), qualified)
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

    # -- tables ------------------------------------------------------------------------------

    def compile_table(self, node: Tree, prefix: str, scope: Scope) -> TableImpl:
        annos_node, name_node, *props = node.children
        annos = _anno_map(annos_node)
        local = _name(name_node)
        qualified = _qualify(prefix, local, annos)
        _fixed_id(self, annos, qualified)
        key_fns: list[Fn] = []
        keys: list[KeyField] = []
        action_impls: dict[str, ActionImpl] = {}
        specs: dict[str, ActionSpec] = {}
        refs: list[tuple[str, str]] = []
        default: tuple[str, tuple[int, ...]] | None = None
        const_default = False
        size = 1024
        entries_node = None
        const_entries = False
        direct_counter: ExternInstance | None = None
        direct_meter: ExternInstance | None = None
        idle_timeout = False
        profile: ActionProfile | None = None
        selector_keys: list[tuple[Fn, int]] = []
        for prop in props:
            kind = prop.data
            if kind == "table_key":
                for ke in prop.children[1:]:
                    expr_node, kind_node, kannos = ke.children
                    match_kind = _name(kind_node)
                    if match_kind not in self.match_kinds:
                        raise self.type_error(kind_node, f"unknown match kind {match_kind}")
                    e = self.expr(expr_node, scope)
                    fn, code = e.fn, e.code
                    if isinstance(e.type, BoolT):
                        width = 1
                        keyfn = (lambda f: (lambda s: 1 if f(s) else 0))(fn)
                        code = f"(1 if {code} else 0)" if code is not None else None
                    elif isinstance(e.type, BitT):
                        width = e.type.width
                        keyfn = fn if not e.type.signed else (
                            lambda f, m=(1 << width) - 1: (lambda s: f(s) & m))(fn)
                        if e.type.signed and code is not None:
                            code = f"({code} & {(1 << width) - 1})"
                    elif isinstance(e.type, EnumT) and e.type.repr is not None:
                        width, keyfn = e.type.repr.width, fn
                    else:
                        raise self.type_error(expr_node, f"a key of type {e.type} is not supported")
                    keyfn.key_code = code  # type: ignore[attr-defined]
                    kname = _anno_string(_anno_map(kannos), "name") or expr_text(expr_node)
                    if match_kind == "selector":
                        selector_keys.append((keyfn, width))
                        continue
                    keys.append(KeyField(kname, match_kind, width))
                    key_fns.append(keyfn)
            elif kind == "table_actions":
                for ref in prop.children[1:]:
                    rannos, rname, rargs = ref.children
                    impl = self._resolve_action(rname, scope)
                    if rargs is not None and rargs.children:
                        impl = self._bound_action(ref, impl, list(rargs.children), scope)
                    ra = _anno_map(rannos)
                    scope_kind = ("DEFAULT_ONLY" if "defaultonly" in ra else
                                  "TABLE_ONLY" if "tableonly" in ra else "TABLE_AND_DEFAULT")
                    action_impls[impl.name] = impl
                    info = self.info.actions[impl.name]
                    specs[impl.name] = ActionSpec(impl.name, tuple(p.bitwidth for p in info.params),
                                                  scope_kind == "DEFAULT_ONLY", scope_kind == "TABLE_ONLY")
                    refs.append((impl.name, scope_kind))
            elif kind == "table_default":
                _dannos, const_tok, _, call = prop.children
                const_default = const_tok is not None
                default = self._action_call(call, scope, action_impls, qualified)
            elif kind == "table_entries":
                const_entries = prop.children[1] is not None
                entries_node = prop
            elif kind == "table_custom":
                _cannos, _ctok, pname_node, value = prop.children
                pname = _name(pname_node)
                if pname == "size":
                    size = self.const_int(value)
                elif pname in ("counters", "meters"):
                    inst = scope.lookup(_name(value.children[0])) if value.data == "var" else None
                    want = "direct_counter" if pname == "counters" else "direct_meter"
                    if not isinstance(inst, ExternInstance) or inst.kind != want:
                        raise self.type_error(value, f"{pname} must name a {want}")
                    if pname == "counters":
                        direct_counter = inst
                    else:
                        direct_meter = inst
                elif pname == "implementation":
                    inst = scope.lookup(_name(value.children[0])) if value.data == "var" else None
                    if value.data == "construct":  # an inline instance, named after its table
                        kind = str(value.children[0])
                        if kind not in ("action_profile", "action_selector"):
                            raise self.type_error(value, "implementation must be an action_profile "
                                                         "or action_selector")
                        cargs = list(value.children[1].children) if value.children[1] is not None else []
                        inst = getattr(self, f"_new_{kind}")(value, qualified, self.resolve_type(
                            value.children[0]), cargs, scope)
                    if not isinstance(inst, ExternInstance) or inst.kind not in (
                            "action_profile", "action_selector"):
                        raise self.type_error(value, "implementation must name an action_profile "
                                                     "or action_selector")
                    profile = inst.obj
                elif pname == "support_timeout":
                    e = self.expr(value, scope)
                    if not isinstance(e.type, BoolT) or not e.is_const:
                        raise self.type_error(value, "support_timeout must be true or false")
                    idle_timeout = bool(e.const)
                elif pname in ("largest_priority_wins", "priority_delta"):
                    raise self.unsupported(prop, f"table property {pname} is not supported")
                else:
                    raise self.unsupported(prop, f"table property {pname} is not supported")
        if "NoAction" not in specs and (default is None or default[0] == "NoAction"):
            impl = self.global_action("NoAction")
            action_impls["NoAction"] = impl
            specs["NoAction"] = ActionSpec("NoAction", (), default_only=True)
            refs.append(("NoAction", "DEFAULT_ONLY"))
        if default is None:
            default = ("NoAction", ())
        if selector_keys and (profile is None or not profile.with_selector):
            raise self.type_error(node, f"table {local} has selector keys but no action_selector")
        if profile is not None and profile.with_selector and not selector_keys:
            raise self.type_error(node, f"table {local} uses an action_selector but has no selector key")
        table = Table(qualified, tuple(keys), specs, size, is_const=const_entries,
                      const_default=const_default, initial_default=default,
                      meter_factory=Meter if direct_meter is not None else None, profile=profile)
        if profile is not None:
            profile.actions.update({n: a for n, a in specs.items() if not a.default_only})
            self.info.action_profiles[profile.name].tables.append(qualified)
        info = TableInfo(qualified, tuple(keys), refs, size, default, const_default, const_entries,
                         direct_counter.name if direct_counter else None,
                         direct_meter.name if direct_meter else None,
                         profile.name if profile is not None else None,
                         annotations=anno_texts(annos_node), idle_timeout=idle_timeout,
                         initial_entries=entries_node is not None and not const_entries)
        for inst in (direct_counter, direct_meter):
            if inst is not None:
                table_map = self.info.counters if inst.kind == "direct_counter" else self.info.meters
                table_map[inst.name].direct_table = qualified
        if entries_node is not None:
            self._const_entries(entries_node, table, scope, action_impls, qualified)
        self.tables[qualified] = table
        self.info.tables[qualified] = info
        apply = self._table_apply(table, key_fns, action_impls, direct_counter is not None,
                                  selector_keys)
        return TableImpl(table, info, apply)

    def _bound_action(self, ref: Tree, impl: ActionImpl, args: list, scope: Scope) -> ActionImpl:
        """`actions = { a(x); }`: binds a's directional parameters to the given arguments."""
        bound = [p for p in impl.params if p[2] is not None]
        if len(args) != len(bound):
            raise self.type_error(ref, f"action {impl.name} has {len(bound)} directional "
                                       f"parameter(s), {len(args)} argument(s) given")
        copy_in: list[Fn] = []
        copy_out: list[Fn] = []
        for arg, (pname, ptype, direction, slot) in zip(args, bound):
            self._bind_param(ref, arg, pname, ptype, direction, Place(ptype, slot), scope,
                             copy_in, copy_out)
        body, pre, post = impl.body, seq(copy_in), seq(copy_out)

        def run_bound(s: list) -> None:
            pre(s)
            try:
                body(s)
            except ReturnSignal:
                pass
            post(s)
        wrapped = ActionImpl(impl.name, impl.params, run_bound, impl.data_slots)
        wrapped.bool_slots = getattr(impl, "bool_slots", [])
        _fast_runner(wrapped, False)  # run_bound catches the body's `return` itself
        return wrapped

    def _resolve_action(self, name_node: Any, scope: Scope) -> ActionImpl:
        name = _name(name_node)
        binding = scope.lookup(name)
        if isinstance(binding, ActionImpl):
            return binding
        if name in self.global_actions:
            return self.global_action(name)
        raise self.type_error(name_node, f"unknown action {name}")

    def _action_call(self, call: Tree, scope: Scope, impls: dict[str, ActionImpl],
                     table: str) -> tuple[str, tuple[int, ...]]:
        name_node, args_node = call.children
        impl = self._resolve_action(name_node, scope)
        if impl.name not in impls:
            raise self.type_error(call, f"action {_name(name_node)} is not in the actions of table {table}")
        args = list(args_node.children) if args_node is not None else []
        data = [p for p in impl.params if p[2] is None]
        if len(args) == len(impl.params) != len(data):  # directional arguments given too
            args = [a for a, p in zip(args, impl.params) if p[2] is None]
        if len(args) != len(data):
            raise self.type_error(call, f"action {impl.name} takes {len(data)} argument(s), got {len(args)}")
        values = []
        for arg, (pname, ptype, _, _) in zip(args, data):
            e = self.coerce(self.expr(arg, scope, ptype), ptype, arg)
            if not e.is_const:
                raise self.type_error(arg, f"argument {pname} must be a constant")
            value = e.const
            if isinstance(ptype, BoolT):
                value = 1 if value else 0
            values.append(int(value) & ((1 << scalar_width(ptype)) - 1))
        return impl.name, tuple(values)

    def _const_entries(self, prop: Tree, table: Table, scope: Scope, impls: dict[str, ActionImpl],
                       qualified: str) -> None:
        entries = prop.children[3:]
        n = len(entries)
        # The legacy `@priority(N)` annotation follows BMv2: the smallest number wins, and an
        # entry without one ranks by its position (1, 2, ...), as p4c writes them.
        legacy = [_anno_map(e.children[0]) | _anno_map(e.children[5]) for e in entries]
        use_legacy = any("priority" in a for a in legacy)
        for i, entry in enumerate(entries):
            _eannos, prio_tok, prio_expr, keyset, call, _tail = entry.children
            sets = keyset.children if isinstance(keyset, Tree) and keyset.data == "tuple_keyset" else [keyset]
            if len(sets) != len(table.keys):
                raise self.type_error(entry, f"entry has {len(sets)} key(s), table {qualified} has "
                                             f"{len(table.keys)}")
            match = tuple(self._entry_match(ks, key, scope) for ks, key in zip(sets, table.keys))
            priority = 0
            if table.needs_priority:
                if use_legacy:
                    args = legacy[i].get("priority")
                    rank = self.const_int(args[0]) if args else i + 1
                    priority = _LEGACY_PRIORITY_TOP - rank
                else:
                    priority = self.const_int(prio_expr) if prio_tok is not None else n - i
            action, args = self._action_call(call, scope, impls, qualified)
            try:
                table.insert_const(TableEntry(match, priority, action, args))
            except TableError as exc:  # report at the entry, with its location
                raise self.type_error(entry, str(exc)) from None

    def _entry_match(self, ks: Any, key: KeyField, scope: Scope) -> Any:
        t = BitT(key.bitwidth)
        top = (1 << key.bitwidth) - 1
        kind = ks.data if isinstance(ks, Tree) else ""
        if kind in ("default_keyset", "dontcare_keyset"):
            if key.match_kind == "exact":
                raise self.type_error(ks, f"exact key {key.name} cannot be a wildcard")
            return Lpm(0, 0) if key.match_kind == "lpm" else None

        def value(node: Any) -> int:
            e = self.expr(node, scope, t)
            if isinstance(e.type, BoolT):
                return 1 if e.const else 0
            e = self.coerce(e, t, node) if isinstance(e.type, IntLitT) else e
            if not e.is_const:
                raise self.type_error(node, "entry keys must be constants")
            return int(e.const) & top
        if kind == "mask_keyset":
            v, m = value(ks.children[0]), value(ks.children[1])
            if key.match_kind == "lpm":
                plen = bin(m).count("1")
                return Lpm(v & m, plen)
            return Ternary(v & m, m)
        if kind == "range_keyset":
            return Range(value(ks.children[0]), value(ks.children[1]))
        v = value(ks)
        return {"exact": Exact(v), "lpm": Lpm(v, key.bitwidth), "ternary": Ternary(v, top),
                "range": Range(v, v), "optional": Optional(v)}[key.match_kind]

    def _table_apply(self, table: Table, key_fns: list[Fn], impls: dict[str, ActionImpl],
                     counted: bool, selector_keys: list[tuple[Fn, int]] = ()) -> Fn:  # type: ignore[assignment]
        lookup = table.lookup
        fns = tuple(key_fns)
        key_codes = [getattr(f, "key_code", None) for f in fns]
        if fns and all(c is not None for c in key_codes):
            make_key = generate(f"def key(s):\n    return ({', '.join(key_codes)},)\n", "key")
        elif len(fns) == 1:
            k0 = fns[0]
            make_key = lambda s: (k0(s),)  # noqa: E731
        elif len(fns) == 2:
            k0, k1 = fns
            make_key = lambda s: (k0(s), k1(s))  # noqa: E731
        else:
            make_key = lambda s: tuple(f(s) for f in fns)  # noqa: E731

        if table.profile is not None:
            return self._indirect_apply(table, lookup, make_key if fns else None, impls, counted,
                                        selector_keys)
        runners = {name: impl.run_with_args for name, impl in impls.items()}
        env = {"lookup": lookup, "make_key": make_key, "table": table, "runners": runners,
               "entries": table._entries}
        if not fns:
            find = "None"
        elif all(c is not None for c in key_codes) and table._exact_only:
            find = f"entries.get((({', '.join(key_codes)},), 0))"  # exact: one dict probe
        elif all(c is not None for c in key_codes):
            find = f"lookup(({', '.join(key_codes)},))"
        else:
            find = "lookup(make_key(s))"
        count = ["    installed.packets += 1", "    installed.bytes += ctx.length"] if counted else []
        source = "\n".join([
            "def apply(s):",
            f"    installed = {find}",
            "    ctx = s[0]",
            "    ctx.hit_entry = installed",
            "    if installed is None:",
            "        name, args = table._default",
            "        runners[name](s, args)",
            "        return False, name",
            "    entry = installed.entry",
            *count,
            "    runners[entry.action](s, entry.args)",
            "    return True, entry.action", ""])
        for fn in fns:  # key code may name helpers of its own
            env.update(getattr(fn, "key_env", {}) or {})
        return generate(source, "apply", env)

    @staticmethod
    def _indirect_apply(table: Table, lookup: Any, make_key: Any, impls: dict[str, ActionImpl],
                        counted: bool, selector_keys: list[tuple[Fn, int]]) -> Fn:
        """Apply for a table implemented by an action profile or selector."""
        profile = table.profile
        sel_fns = [f for f, _ in selector_keys]
        sel_widths = [w for _, w in selector_keys]

        def apply_indirect(s: list) -> tuple[bool, str]:
            installed = lookup(make_key(s)) if make_key is not None else None
            ctx = s[0]
            ctx.hit_entry = installed
            chosen = None
            if installed is not None:
                entry = installed.entry
                if entry.member_id is not None:
                    chosen = profile.member_action(entry.member_id)
                else:
                    data = hashes.pack_bits([f(s) for f in sel_fns], sel_widths)
                    chosen = profile.group_action(entry.group_id, data)
            if chosen is None:  # a miss, or an empty or vanished group: the default action
                name, args = table._default
                impls[name].run_with_args(s, args)
                return False, name
            if counted:
                installed.packets += 1
                installed.bytes += ctx.length
            impls[chosen[0]].run_with_args(s, chosen[1])
            return True, chosen[0]
        return apply_indirect

    # -- functions -----------------------------------------------------------------------------

    def function(self, name: str) -> FunctionImpl:
        cache = self.compiled_functions
        if name in cache:
            return cache[name]
        node = self.functions[name]
        _annos, proto, body = node.children
        ret_node, _fname, tparams, params_node = proto.children
        if tparams is not None:
            raise self.unsupported(node, f"generic function {name} is not supported")
        ret = self.resolve_type(ret_node)
        inner = self.globals.child()
        inner.names["$return"] = ret
        params = []
        for pname, ptype, direction, _ in self.params(params_node):
            place = self.alloc(ptype)
            inner.names[pname] = Var(place.read_only() if direction in (None, "in") else place)
            params.append((pname, ptype, direction, place))
        impl = FunctionImpl(name, ret, params, lambda s: None)
        cache[name] = impl
        impl.body = self.block(body.children[1:], inner)
        return impl

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
                scope.names[_name(item.children[2])] = Const(self._const_value(item, scope))
            elif kind == "var_decl":
                fn = self._s_var_decl(item, scope)
                if fn is not None:
                    init.append(fn)
            elif kind == "instantiation":
                self.instantiate(item, prefix, scope)
            elif kind == "action_decl":
                impl = self.compile_action(item, prefix, scope)
                scope.names[_name(item.children[1])] = impl
            elif kind == "table_decl":
                scope.names[_name(item.children[1])] = self.compile_table(item, prefix, scope)
            elif kind == "function_decl":
                raise self.unsupported(item, "functions declared inside controls are not supported")
            elif kind == "value_set_decl":
                scope.names[_name(item.children[3])] = self._value_set(item, prefix)
            else:
                raise self.unsupported(item, f"{kind} inside a block is not supported")

    def _value_set(self, node: Tree, prefix: str) -> ExternInstance:
        annos_node, type_args, size_node, name_node = node.children
        annos = _anno_map(annos_node)
        qualified = _qualify(prefix, _name(name_node), annos)
        _fixed_id(self, annos, qualified)
        t = self.resolve_type(type_args.children[0])
        if isinstance(t, BitT):
            fields = [(_name(name_node), t.width, "exact")]
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
            raise self.type_error(node, f"{_name(node.children[1])} takes {len(params)} constructor "
                                        f"argument(s), got {len(args)}")
        result: dict[str, Any] = {}
        for arg, (pname, ptype, _, _) in zip(args, params):
            if isinstance(arg, Tree) and arg.data == "named_arg":
                arg = arg.children[1]
            if isinstance(ptype, DeclT):  # a parser or control instance passed to a constructor
                bound = scope.lookup(_name(arg.children[0])) if arg.data == "var" else None
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

    def compile_parser(self, node: Tree, prefix: str, bindings: dict[str, Any], nested: bool = False) -> Fn:
        children = node.children
        scope = self.globals.child()
        scope.names.update(bindings)
        scope.names["$prefix"] = prefix
        states = [c for c in children[5:] if isinstance(c, Tree) and c.data == "parser_state"]
        local_items = [c for c in children[5:] if isinstance(c, Tree) and c.data != "parser_state"]
        init: list[Fn] = []
        self._locals(local_items, prefix, scope, init)
        names = {_name(st.children[2]) for st in states}
        if "start" not in names:
            raise self.type_error(node, f"parser {_name(children[1])} has no start state")
        compiled: dict[str, Fn] = {}
        for st in states:
            compiled[_name(st.children[2])] = self._state(st, scope, names | {"accept", "reject"})
        start_init = seq(init)
        generated = _parser_loop(start_init, compiled)
        if generated is not None:
            return generated

        def run_parser(s: list) -> None:
            start_init(s)
            state = "start"
            steps = 0
            while state != "accept":
                if state == "reject":
                    raise ParserError("$reject")
                if state == _NO_MATCH:
                    raise ParserError("NoMatch")
                steps += 1
                if steps > _MAX_PARSER_STEPS:
                    raise ParserError("ParserTimeout")
                state = compiled[state](s)
        return run_parser

    def _state(self, node: Tree, scope: Scope, names: set[str]) -> Fn:
        _annos, _tok, name_node, *rest = node.children
        transition = rest[-1] if rest and isinstance(rest[-1], Tree) and rest[-1].data.startswith("transition") else None
        stmts = rest[:-1] if transition is not None or (rest and rest[-1] is None) else rest
        inner = scope.child()
        body = seq([self.stmt(st, inner) for st in stmts if st is not None])
        if transition is None:
            nxt: Fn = lambda s: "reject"  # noqa: E731
        elif transition.data == "transition_direct":
            target = _name(transition.children[0])
            if target not in names:
                raise self.type_error(transition, f"unknown parser state {target}")
            nxt = lambda s: target  # noqa: E731
        else:
            nxt = self._select(transition.children[0], inner, names)

        def state(s: list) -> str:
            body(s)
            return nxt(s)
        state.parts = (body, nxt, target if transition is not None and  # type: ignore[attr-defined]
                       transition.data == "transition_direct" else None)
        return state

    def _select(self, node: Tree, scope: Scope, names: set[str]) -> Fn:
        exprs = [c for c in node.children[0].children if c is not None]
        keys = [self.scalar(e, scope) for e in exprs]
        cases: list[tuple[list, str]] = []
        for case in node.children[1:]:
            ks, target_node = case.children
            target = _name(target_node)
            if target not in names:
                raise self.type_error(target_node, f"unknown parser state {target}")
            bound = scope.lookup(str(ks.children[0])) if isinstance(ks, Tree) and ks.data == "var" else None
            if isinstance(bound, ExternInstance) and bound.kind == "value_set":
                if len(bound.obj.fields) != len(keys):
                    raise self.type_error(case, f"value set {bound.name} has {len(bound.obj.fields)} "
                                                f"field(s), select has {len(keys)} key(s)")
                cases.append(([("pvs", bound.obj, None)], target))
                continue
            sets = ks.children if isinstance(ks, Tree) and ks.data == "tuple_keyset" else [ks]
            if len(sets) == 1 and len(keys) > 1 and isinstance(ks, Tree) and ks.data in (
                    "default_keyset", "dontcare_keyset"):
                sets = sets * len(keys)
            if len(sets) != len(keys):
                raise self.type_error(case, f"select has {len(keys)} key(s), case has {len(sets)}")
            cases.append(([self._select_matcher(k, st, scope) for k, st in zip(keys, sets)], target))
        fns = [k.fn for k in keys]
        fast = self._select_by_dict(keys, cases)
        if fast is not None:
            return fast
        compiled = [(tuple(m for m in ms), target) for ms, target in cases]

        def select(s: list) -> str:
            values = [f(s) for f in fns]
            for matchers, target in compiled:
                if matchers[0][0] == "pvs":
                    if matchers[0][1].matches(values):
                        return target
                    continue
                for (tag, a, b), v in zip(matchers, values):
                    if tag == "eq":
                        if v != a:
                            break
                    elif tag == "mask":
                        if v & b != a:
                            break
                    elif tag == "range":
                        if not a <= v <= b:
                            break
                else:
                    return target
            raise ParserError("NoMatch")
        return select

    @staticmethod
    def _select_by_dict(keys: list[E], cases: list[tuple[list, str]]) -> Fn | None:
        """Cases of plain values (then at most a final default) as one dict probe on the key
        values; no match is the state `$nomatch` (error.NoMatch)."""
        if not cases or any(m[0] != "eq" for ms, _ in cases[:-1] for m in ms):
            return None
        last = [m[0] for m in cases[-1][0]]
        if not (all(t == "eq" for t in last) or all(t == "any" for t in last)):
            return None
        table: dict = {}
        fallback = _NO_MATCH
        for ms, target in cases:
            if ms[0][0] == "any":
                fallback = target
                break
            table.setdefault(ms[0][1] if len(ms) == 1 else tuple(m[1] for m in ms), target)
        key_codes = codes(*keys)
        if len(keys) == 1:
            k0 = keys[0].fn
            select = lambda s: table.get(k0(s), fallback)  # noqa: E731
        elif key_codes is not None:
            select = generate(f"def select(s):\n    return table.get(({', '.join(key_codes)}), "
                              "fallback)\n", "select", {"table": table, "fallback": fallback})
        else:
            fns = [k.fn for k in keys]
            return lambda s: table.get(tuple(f(s) for f in fns), fallback)
        if key_codes is not None:  # for the parser loop to inline
            key = key_codes[0] if len(keys) == 1 else f"({', '.join(key_codes)})"
            select.inline = (table, key, fallback)  # type: ignore[attr-defined]
        return select

    def _select_matcher(self, key: E, ks: Any, scope: Scope) -> tuple[str, Any, Any]:
        kind = ks.data if isinstance(ks, Tree) else ""
        if kind in ("default_keyset", "dontcare_keyset"):
            return ("any", None, None)

        def value(node: Any) -> Any:
            e = self.expr(node, scope, key.type)
            e = self.coerce(e, key.type, node) if isinstance(e.type, IntLitT) else e
            if not e.is_const:
                raise self.type_error(node, "select cases must be constants")
            return e.const
        if kind == "mask_keyset":
            v, m = value(ks.children[0]), value(ks.children[1])
            return ("mask", v & m, m)
        if kind == "range_keyset":
            return ("range", value(ks.children[0]), value(ks.children[1]))
        return ("eq", value(ks), None)

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
            elif isinstance(arg, Tree) and arg.data == "var" and _name(arg) in self.instances:
                inst = self.instances[_name(arg)]
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


