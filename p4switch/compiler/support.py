"""What the block compilers share: names of declarations and generated action runners."""

from __future__ import annotations

from typing import Any

from lark import Tree

from p4switch.compiler.stmt import _inline
from p4switch.compiler.compiled import ActionImpl, _anno_string, generate


def fast_runner(impl: ActionImpl, may_return: bool) -> None:
    """Give `impl` a generated `run_with_args`: action data into its slots, then the body
    inlined (the generic method stays for actions that may `return`)."""
    if may_return:
        return
    lines, env = _inline(impl.body)
    slots = impl.data_slots
    head = [f"{', '.join(f's[{x}]' for x in slots)}, = args"] if slots else []
    body = "".join(f"    {line}\n" for line in head + lines or ["pass"])
    impl.run_with_args = generate(f"def run(s, args):\n{body}", "run", env)  # type: ignore[method-assign]


def name_of(node: Any) -> str:
    return str(node.children[0]) if isinstance(node, Tree) else str(node)


def fixed_id(compiler: Any, annos: dict[str, list], name: str) -> None:
    """Record an ``@id(N)`` annotation for P4Info."""
    args = annos.get("id")
    if args:
        compiler.info.fixed_ids[name] = compiler.const_int(args[0])


def qualify(prefix: str, local: str, annos: dict[str, list]) -> str:
    given = _anno_string(annos, "name")
    if given is not None:
        if given.startswith("."):
            return given[1:]
        return f"{prefix}.{given}" if prefix else given
    return f"{prefix}.{local}" if prefix else local
