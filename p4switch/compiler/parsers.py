"""Parsers: states, select expressions (matched by dict where the keys allow) and the whole
parser as one generated loop."""

from __future__ import annotations

from typing import Any

from lark import Tree

from p4switch.compiler.stmt import _inline, seq
from p4switch.compiler.support import name_of
from p4switch.compiler.compiled import E, ExternInstance, Fn, Scope, codes, generate
from p4switch.frontend.types import IntLitT
from p4switch.runtime import ParserError


_MAX_PARSER_STEPS = 1000
_NO_MATCH = "$nomatch"  # the parser state a select without a matching case goes to


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


class ParserCompiler:
    """Mixin of the Compiler: parsers."""


    def compile_parser(self, node: Tree, prefix: str, bindings: dict[str, Any], nested: bool = False) -> Fn:
        children = node.children
        scope = self.globals.child()
        scope.names.update(bindings)
        scope.names["$prefix"] = prefix
        states = [c for c in children[5:] if isinstance(c, Tree) and c.data == "parser_state"]
        local_items = [c for c in children[5:] if isinstance(c, Tree) and c.data != "parser_state"]
        init: list[Fn] = []
        self._locals(local_items, prefix, scope, init)
        names = {name_of(st.children[2]) for st in states}
        if "start" not in names:
            raise self.type_error(node, f"parser {name_of(children[1])} has no start state")
        compiled: dict[str, Fn] = {}
        for st in states:
            compiled[name_of(st.children[2])] = self._state(st, scope, names | {"accept", "reject"})
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
            target = name_of(transition.children[0])
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
            target = name_of(target_node)
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
