"""Tables: keys, actions and their data, const entries, default actions, direct and indirect
(action profile and selector) application."""

from __future__ import annotations

from typing import Any

from lark import Tree

from p4switch import hashes
from p4switch.action_profiles import ActionProfile
from p4switch.compiler.stmt import seq
from p4switch.compiler.support import fast_runner, fixed_id, name_of, qualify
from p4switch.compiler.compiled import (
    ActionImpl, ExternInstance, Fn, Place, Scope, TableImpl, _anno_map, _anno_string, anno_texts,
    generate,
)
from p4switch.expr_text import expr_text
from p4switch.externs import Meter
from p4switch.frontend.program import TableInfo
from p4switch.frontend.types import BitT, BoolT, EnumT, ErrorT, IntLitT, scalar_width
from p4switch.runtime import ExitSignal, ReturnSignal
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


#: Width the embedded tables give an ``error`` key internally (BMv2 keeps errors in 32 bits).
ERROR_KEY_WIDTH = 32
_LEGACY_PRIORITY_TOP = 1 << 24  # legacy @priority(N) becomes TOP - N (higher wins here)


class TableCompiler:
    """Mixin of the Compiler: tables."""

    # -- tables ------------------------------------------------------------------------------

    def compile_table(self, node: Tree, prefix: str, scope: Scope) -> TableImpl:
        annos_node, name_node, *props = node.children
        annos = _anno_map(annos_node)
        local = name_of(name_node)
        qualified = qualify(prefix, local, annos)
        fixed_id(self, annos, qualified)
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
                    match_kind = name_of(kind_node)
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
                    elif isinstance(e.type, ErrorT):
                        width, code = ERROR_KEY_WIDTH, None
                        keyfn = (lambda f, errors=self.errors: (lambda s: errors.index(f(s))))(fn)
                    else:
                        raise self.type_error(expr_node, f"a key of type {e.type} is not supported")
                    keyfn.key_code = code  # type: ignore[attr-defined]
                    kname = _anno_string(_anno_map(kannos), "name") or expr_text(expr_node)
                    if match_kind == "selector":
                        selector_keys.append((keyfn, width))
                        continue
                    keys.append(KeyField(kname, match_kind, width, is_error=isinstance(e.type, ErrorT)))
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
                pname = name_of(pname_node)
                if pname == "size":
                    size = self.const_int(value)
                elif pname in ("counters", "meters"):
                    inst = scope.lookup(name_of(value.children[0])) if value.data == "var" else None
                    want = "direct_counter" if pname == "counters" else "direct_meter"
                    if not isinstance(inst, ExternInstance) or inst.kind != want:
                        raise self.type_error(value, f"{pname} must name a {want}")
                    if pname == "counters":
                        direct_counter = inst
                    else:
                        direct_meter = inst
                elif pname == "implementation":
                    inst = scope.lookup(name_of(value.children[0])) if value.data == "var" else None
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
            except ExitSignal:  # `exit` still copies the arguments back
                post(s)
                raise
            post(s)
        wrapped = ActionImpl(impl.name, impl.params, run_bound, impl.data_slots)
        wrapped.bool_slots = getattr(impl, "bool_slots", [])
        fast_runner(wrapped, False)  # run_bound catches the body's `return` itself
        return wrapped

    def _resolve_action(self, name_node: Any, scope: Scope) -> ActionImpl:
        name = name_of(name_node)
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
            raise self.type_error(call, f"action {name_of(name_node)} is not in the actions of table {table}")
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
            e = self.expr(node, scope, None if key.is_error else t)
            if key.is_error:
                if not isinstance(e.type, ErrorT) or not e.is_const:
                    raise self.type_error(node, f"key {key.name} is an error: entries name error members")
                return self.errors.index(e.const)
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
