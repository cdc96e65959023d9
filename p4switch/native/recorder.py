"""The compiler, recording what it resolved: the typed, slot-addressed program the C backend reads.

:class:`RecordingCompiler` is the ordinary :class:`~p4switch.compiler.program.Compiler`; on the way it
keeps, per syntax node, the compiled expression (type, storage place, constant value), the
slot of every local variable, every action with its parameter slots, every table with its
actions, and the six v1model blocks. Nothing here changes what the Python pipeline does.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from lark import Tree

from p4switch.compiler.compiled import E, ActionImpl, CompiledProgram, Fn, FunctionImpl, Place, Scope
from p4switch.compiler.program import Compiler
from p4switch.frontend.types import BitT, HeaderT, ListT, StackT, StructT, slot_count
from p4switch.tables import Table


def _record_wide(out: dict[int, int], t: Any, base: int) -> None:
    """Every slot of a value of type `t` at `base` that holds a bit<N> or int<N>, N > 64."""
    if isinstance(t, BitT) and t.width > 64:
        out[base] = t.width
    elif isinstance(t, HeaderT | StructT | ListT):
        at = base + (1 if isinstance(t, HeaderT) else 0)
        for ft in (t.elems if isinstance(t, ListT) else [ft for _, ft in t.fields]):
            _record_wide(out, ft, at)
            at += slot_count(ft)
    elif isinstance(t, StackT):
        n = slot_count(t.elem)
        for i in range(t.size):
            _record_wide(out, t.elem, base + 1 + i * n)


@dataclass
class Recorded:
    """What the backend needs besides the CompiledProgram."""

    exprs: dict[int, E] = field(default_factory=dict)
    conflicts: set[int] = field(default_factory=set)  # nodes compiled twice to different places
    var_slots: dict[int, int] = field(default_factory=dict)  # var_decl or its name node -> base slot
    var_types: dict[int, Any] = field(default_factory=dict)  # var_decl node -> type
    actions: dict[int, ActionImpl] = field(default_factory=dict)  # action_decl node -> impl
    action_nodes: dict[str, Tree] = field(default_factory=dict)  # qualified name -> action_decl
    impl_nodes: dict[int, Tree] = field(default_factory=dict)  # id(ActionImpl) -> action_decl
    # id(ActionImpl) of an action bound with arguments in a table's actions -> (the action,
    # the argument nodes, the table's action reference)
    bound_actions: dict[int, tuple[ActionImpl, list, Any]] = field(default_factory=dict)
    table_actions: dict[str, dict[str, ActionImpl]] = field(default_factory=dict)
    table_counted: dict[str, bool] = field(default_factory=dict)
    table_nodes: dict[int, str] = field(default_factory=dict)  # table_decl node -> name
    table_keys: dict[str, list[Any]] = field(default_factory=dict)  # name -> key expr nodes
    table_selectors: dict[str, list[Any]] = field(default_factory=dict)  # name -> selector key expr nodes
    blocks: list[tuple[str, Tree]] = field(default_factory=list)  # (kind, node) in compile order
    digest_names: dict[int, str] = field(default_factory=dict)  # digest data node -> struct name
    function_calls: dict[int, FunctionImpl] = field(default_factory=dict)  # call node -> function
    # id(FunctionImpl) -> (declaration, the recordings of its body): a generic function's body
    # is compiled once per specialization, each with recordings of its own
    function_bodies: dict[int, tuple[Tree, "Recorded"]] = field(default_factory=dict)
    # id(ControlImpl) -> (declaration, kind, recordings) of a parser or control instantiated
    # inside a block: its body is compiled once per instance
    instances: dict[int, tuple[Tree, str, "Recorded"]] = field(default_factory=dict)
    table_context: dict[str, "Recorded"] = field(default_factory=dict)  # table -> where compiled
    action_context: dict[int, "Recorded"] = field(default_factory=dict)  # id(ActionImpl) -> same
    missing_externs: set[str] = field(default_factory=set)  # extern functions without a body called
    assertions: dict[int, str] = field(default_factory=dict)  # assert/assume call -> failure message
    clones: dict[int, tuple[str, int | None]] = field(default_factory=dict)  # clone call -> (type, list)
    # resubmit/recirculate call -> ("resubmit" or "recirculate", field list or None)
    loops: dict[int, tuple[str, int | None]] = field(default_factory=dict)
    # id(lvalue) -> (the lvalue reading temporaries, [(temporary's var node, index expression)])
    # for an lvalue whose indices make calls (StmtCompiler.hoist_indices)
    hoisted: dict[int, tuple[Any, list[tuple[Any, Any]]]] = field(default_factory=dict)
    keep: list[Any] = field(default_factory=list)  # keeps recorded nodes alive (ids stay unique)
    block_applies: dict[int, Any] = field(default_factory=dict)  # `T.apply(...)` call node -> ControlImpl
    wide: dict[int, int] = field(default_factory=dict)  # slot of a bit<N> value, N > 64 -> N (program-wide)

    def child(self) -> "Recorded":
        """Recordings of a body compiled on its own (a function, a block instance): its
        expressions and locals apart, what is program-wide (tables, actions) shared."""
        return replace(self, exprs={}, conflicts=set(), var_slots={}, var_types={}, digest_names={},
                       function_calls={}, blocks=[], hoisted={}, block_applies={})


class RecordingCompiler(Compiler):
    """A Compiler that records its resolutions in :attr:`recorded`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.recorded = Recorded()

    def alloc(self, t: Any) -> Place:
        place = super().alloc(t)
        assert place.base is not None
        _record_wide(self.recorded.wide, t, place.base)
        return place

    def expr(self, node: Any, scope: Scope, expected: Any = None) -> E:
        e = super().expr(node, scope, expected)
        rec = self.recorded
        key = id(node)
        old = rec.exprs.get(key)
        if old is not None and old.place is not None and e.place is not None and \
                old.place.base != e.place.base:
            rec.conflicts.add(key)
        rec.exprs[key] = e
        rec.keep.append(node)
        return e

    def call(self, node: Tree, scope: Scope, statement: bool) -> E:
        e = super().call(node, scope, statement)
        if statement and node.data == "method_call_stmt":  # its type: `pkt.lookahead<T>();`
            self.recorded.exprs[id(node)] = e
            self.recorded.keep.append(node)
        return e

    def _s_var_decl(self, node: Tree, scope: Scope) -> Fn | None:
        fn = super()._s_var_decl(node, scope)
        binding = scope.lookup(str(node.children[2].children[0]))
        place = getattr(binding, "place", None)
        if place is not None and place.base is not None:
            # Keyed by the declaration and by its name node: a loop variable's declaration is
            # made by the compiler, its name node is the program's.
            for key_node in (node, node.children[2]):
                key = id(key_node)
                if key in self.recorded.var_slots and self.recorded.var_slots[key] != place.base:
                    self.recorded.conflicts.add(key)
                self.recorded.var_slots[key] = place.base
                self.recorded.var_types[key] = place.type
                self.recorded.keep.append(key_node)
        return fn

    def compile_action(self, node: Tree, prefix: str, scope: Scope) -> ActionImpl:
        impl = super().compile_action(node, prefix, scope)
        rec = self.recorded
        if id(node) in rec.actions:
            rec.conflicts.add(id(node))
        rec.actions[id(node)] = impl
        rec.action_nodes[impl.name] = node
        rec.impl_nodes[id(impl)] = node
        rec.action_context[id(impl)] = rec
        rec.keep.extend((node, impl))
        return impl

    def _bound_action(self, ref: Tree, impl: ActionImpl, args: list, scope: Scope) -> ActionImpl:
        wrapped = super()._bound_action(ref, impl, args, scope)
        self.recorded.bound_actions[id(wrapped)] = (impl, list(args), ref)
        self.recorded.keep.extend((wrapped, ref))
        return wrapped

    def compile_table(self, node: Tree, prefix: str, scope: Scope) -> Any:
        impl = super().compile_table(node, prefix, scope)
        name = impl.table.name
        rec = self.recorded
        rec.table_nodes[id(node)] = name
        rec.table_context[name] = rec
        keys = []
        for prop in node.children[2:]:
            if isinstance(prop, Tree) and prop.data == "table_key":
                for ke in prop.children[1:]:
                    kind = str(ke.children[1].children[0]) if isinstance(ke.children[1], Tree) else str(ke.children[1])
                    if kind == "selector":
                        rec.table_selectors.setdefault(name, []).append(ke.children[0])
                        continue
                    keys.append(ke.children[0])
        rec.table_keys[name] = keys
        rec.keep.append(node)
        return impl

    def _table_apply(self, table: Table, key_fns: list[Fn], impls: dict[str, ActionImpl],
                     counted: bool, selector_keys: Any = ()) -> Fn:
        self.recorded.table_actions[table.name] = dict(impls)
        self.recorded.table_counted[table.name] = counted
        return super()._table_apply(table, key_fns, impls, counted, selector_keys)

    def _v1_digest(self, node: Tree, args: list, scope: Scope) -> E:
        e = super()._v1_digest(node, args, scope)
        self.recorded.digest_names[id(args[1])] = e.extra[1]  # ("digest", name)
        self.recorded.keep.append(args[1])
        return e

    def _assertion(self, node: Tree, args: list, scope: Scope, what: str) -> E:
        e = super()._assertion(node, args, scope, what)
        self.recorded.assertions[id(node)] = e.extra[1]  # ("assertion", message)
        self.recorded.keep.append(node)
        return e

    def _v1_resubmit(self, node: Tree, args: list, scope: Scope) -> E:
        return self._loop_recorded(node, "resubmit", None, super()._v1_resubmit(node, args, scope))

    def _v1_resubmit_preserving_field_list(self, node: Tree, args: list, scope: Scope) -> E:
        e = super()._v1_resubmit_preserving_field_list(node, args, scope)
        return self._loop_recorded(node, "resubmit", self.const_int(args[0]), e)

    def _v1_recirculate(self, node: Tree, args: list, scope: Scope) -> E:
        return self._loop_recorded(node, "recirculate", None, super()._v1_recirculate(node, args, scope))

    def _v1_recirculate_preserving_field_list(self, node: Tree, args: list, scope: Scope) -> E:
        e = super()._v1_recirculate_preserving_field_list(node, args, scope)
        return self._loop_recorded(node, "recirculate", self.const_int(args[0]), e)

    def _loop_recorded(self, node: Tree, kind: str, index: int | None, e: E) -> E:
        self.recorded.loops[id(node)] = (kind, index)
        self.recorded.keep.append(node)
        return e

    def _v1_clone(self, node: Tree, args: list, scope: Scope) -> E:
        return self._clone_recorded(node, super()._v1_clone(node, args, scope))

    def _v1_clone_preserving_field_list(self, node: Tree, args: list, scope: Scope) -> E:
        return self._clone_recorded(node, super()._v1_clone_preserving_field_list(node, args, scope))

    def _clone_recorded(self, node: Tree, e: E) -> E:
        self.recorded.clones[id(node)] = e.extra[1:]  # ("clone", type, field list index or None)
        self.recorded.keep.append(node)
        return e

    def _apart(self, compile_body: Any) -> tuple[Any, Recorded]:
        """Run `compile_body()` recording into a child of the current recordings."""
        outer = self.recorded
        self.recorded = inner = outer.child()
        try:
            return compile_body(), inner
        finally:
            self.recorded = outer

    def function(self, name: str, type_args: Any = None, args: list | None = None,
                 scope: Scope | None = None) -> FunctionImpl:
        outer = self.recorded
        impl, inner = self._apart(lambda: super(RecordingCompiler, self).function(name, type_args, args, scope))
        if id(impl) not in outer.function_bodies:  # compiled by this call, not from the cache
            outer.function_bodies[id(impl)] = (self.functions[name], inner)
            outer.keep.append(impl)
        return impl

    def hoist_indices(self, lvalue: Any, value: Any, scope: Scope) -> tuple[list[Fn], Any, Scope]:
        pre, rewritten, inner = super().hoist_indices(lvalue, value, scope)
        if pre:
            temps: list[tuple[Any, Any]] = []

            def pair(original: Any, new: Any) -> None:
                if isinstance(original, Tree) and original.data in ("index", "member", "slice"):
                    pair(original.children[0], new.children[0])
                    if original.data == "index" and new.children[1] is not original.children[1]:
                        temps.append((new.children[1], original.children[1]))
            pair(lvalue, rewritten)
            self.recorded.hoisted[id(lvalue)] = (rewritten, temps)
            self.recorded.keep.append(rewritten)
        return pre, rewritten, inner

    def _unimplemented_extern(self, name: str) -> FunctionImpl:
        self.recorded.missing_externs.add(name)
        return super()._unimplemented_extern(name)

    def _call_function(self, node: Tree, fn_impl: FunctionImpl, args: list, scope: Scope) -> E:
        e = super()._call_function(node, fn_impl, args, scope)
        if id(node) in self.recorded.function_calls and self.recorded.function_calls[id(node)] is not fn_impl:
            self.recorded.conflicts.add(id(node))
        self.recorded.function_calls[id(node)] = fn_impl
        self.recorded.keep.append(node)
        return e

    def _apply_block(self, node: Tree, impl: Any, args: list, scope: Scope) -> E:
        rec = self.recorded
        if rec.block_applies.get(id(node), impl) is not impl:
            rec.conflicts.add(id(node))
        rec.block_applies[id(node)] = impl
        rec.keep.append(node)
        return super()._apply_block(node, impl, args, scope)

    def compile_block_instance(self, t: Any, qualified: str, ctor_args: list, scope: Scope) -> Any:
        outer = self.recorded
        impl, inner = self._apart(
            lambda: super(RecordingCompiler, self).compile_block_instance(t, qualified, ctor_args, scope))
        outer.instances[id(impl)] = (t.tree, t.kind, inner)
        outer.keep.append(impl)
        return impl

    def compile_control(self, node: Tree, prefix: str, bindings: dict[str, Any]) -> Fn:
        self.recorded.blocks.append(("control", node))
        return super().compile_control(node, prefix, bindings)

    def compile_parser(self, node: Tree, prefix: str, bindings: dict[str, Any], nested: bool = False) -> Fn:
        self.recorded.blocks.append(("parser" if not nested else "nested_parser", node))
        return super().compile_parser(node, prefix, bindings, nested)


def compile_recorded(program: Any, seed: int = 0) -> tuple[CompiledProgram, Recorded]:
    """Compile a loaded Program, returning the executable result and the recordings."""
    compiler = RecordingCompiler(program.tree, program.source.locate, seed)
    compiled = compiler.build()
    compiler.recorded.keep.append(program.tree)
    return compiled, compiler.recorded
