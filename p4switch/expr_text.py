"""Source-like text of expressions: the names P4Info gives key fields and annotations.

Kept apart from the expression compiler so that the compiled-program model can name things
without importing the compiler (no import cycle between them).
"""

from __future__ import annotations

from typing import Any

from lark import Token, Tree


def expr_text(node: Any) -> str:
    """Source-like text of an expression (P4Info names of key fields)."""
    if isinstance(node, Token):
        return str(node)
    kind = node.data
    if kind == "var":
        return str(node.children[0])
    if kind == "name":
        return str(node.children[0])
    if kind == "member":
        return f"{expr_text(node.children[0])}.{expr_text(node.children[1])}"
    if kind == "index":
        return f"{expr_text(node.children[0])}[{expr_text(node.children[1])}]"
    if kind == "slice":
        return (f"{expr_text(node.children[0])}[{expr_text(node.children[1])}:"
                f"{expr_text(node.children[2])}]")
    if kind == "int_lit":
        return str(node.children[0])
    if kind == "call":
        inner = node.children[0]
        if isinstance(inner, Tree) and inner.data == "member" and str(inner.children[1].children[0]) == "isValid":
            return f"{expr_text(inner.children[0])}.$valid$"
        return f"{expr_text(inner)}()"
    if kind == "type_member":
        return f"{node.children[0]}.{expr_text(node.children[1])}"
    return kind
