"""P4-16 source text to a lark parse tree (LALR, with type names told apart first)."""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from typing import Callable

from lark import Lark, Token, Tree
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken

from p4switch.frontend.errors import P4SyntaxError, SourceLocation

#: Maps a line of the preprocessed text to its (file, line) in the original sources.
LineMapper = Callable[[int, int], SourceLocation]

_DECLARES_TYPE = {"header", "struct", "header_union", "parser", "control", "package"}


@lru_cache(maxsize=1)
def p4_parser() -> Lark:
    grammar = resources.files("p4switch.frontend").joinpath("p4.lark").read_text()
    return Lark(grammar, parser="lalr", lexer="basic", propagate_positions=True,
                maybe_placeholders=True, cache=True)


def _type_names(tokens: list[Token]) -> set[str]:
    """Names the program declares as types (so the lexer can tag them TYPE_IDENTIFIER)."""
    names: set[str] = set()
    n = len(tokens)

    def val(i: int) -> str:
        return tokens[i].value if 0 <= i < n else ""

    for i, tok in enumerate(tokens):
        v = tok.value
        if tok.type == "IDENTIFIER":
            # NAME < A, B > (  or  NAME < A > {  : generic declaration, A and B are type params.
            if val(i + 1) == "<" and val(i - 1) not in ("", ".", "=", "(", ",", "return"):
                j, params = i + 2, []
                while j < n and tokens[j].type == "IDENTIFIER" and val(j + 1) in (",", ">"):
                    params.append(tokens[j].value)
                    if val(j + 1) == ">":
                        break
                    j += 2
                if params and val(j + 1) == ">" and val(j + 2) in ("(", "{"):
                    names.update(params)
            continue
        if v in _DECLARES_TYPE and i + 1 < n:
            names.add(val(i + 1))
        elif v == "extern" and tokens[i + 1].type == "IDENTIFIER" and val(i + 2) in ("{", "<"):
            names.add(val(i + 1))
        elif v == "typedef" or (v == "type" and tok.type != "IDENTIFIER" and val(i - 1) != "."
                                and val(i + 1) not in (";", ")", ",", "=", ":", "]", ".")):
            # `typedef T N;` and `type T N;`, not a field or parameter named `type`
            j = i + 1
            while j < n and val(j) != ";":
                j += 1
            names.add(val(j - 1))
        elif v == "enum":
            j = i + 1
            while j < n and val(j) != "{":
                j += 1
            names.add(val(j - 1))
    names.discard("")
    return names


@lru_cache(maxsize=1)
def _terminal_names(parser: Lark) -> dict[str, str]:
    """Readable names of terminals for messages: literals quoted, the rest in words."""
    names = {"IDENTIFIER": "a name", "TYPE_IDENTIFIER": "a type name", "INTEGER": "a number",
             "STRING": "a string", "_R_ANGLE_SHIFT": "'>'", "_L_ANGLE_ARGS": "'<'"}
    for term in parser.terminals:
        if term.name not in names and term.pattern.type == "str":
            names[term.name] = repr(term.pattern.value)
    return names


_TYPE_START = {"TYPE_IDENTIFIER", "BIT", "INT", "VARBIT", "BOOL", "TUPLE", "UNDERSCORE", "ERROR"}


def _mark_type_argument_lists(tokens: list[Token]) -> None:
    """Tag `<` that opens explicit type arguments of a call (``f<bit<8>>(...)``).

    Only after a plain identifier (a function or method name), when a type follows and the
    matching `>` is followed by `(`; otherwise `<` stays a comparison.
    """
    n = len(tokens)
    for i in range(1, n - 1):
        tok = tokens[i]
        if tok.value != "<" or tokens[i - 1].type != "IDENTIFIER" or tokens[i + 1].type not in _TYPE_START:
            continue
        before = tokens[i - 2] if i >= 2 else None
        if before is not None and (before.type in _TYPE_START or before.type in ("VOID", "MORETHAN",
                                                                                  "_R_ANGLE_SHIFT")):
            continue  # a generic declaration: `T name<T>(...)`
        depth, j = 1, i + 1
        while j < n and depth > 0:
            v = tokens[j].value
            if v == "<":
                depth += 1
            elif v == ">":
                depth -= 1
            elif v in (";", "{", "}", ")"):
                break
            j += 1
        if depth == 0 and j < n and tokens[j].value == "(":
            tok.type = "_L_ANGLE_ARGS"


def parse_source(text: str, locate: LineMapper) -> Tree:
    """Parse preprocessed P4 text; syntax errors carry the original file:line:col."""
    parser = p4_parser()
    try:
        tokens = list(parser.lex(text))
    except UnexpectedCharacters as exc:
        raise P4SyntaxError(f"unexpected character {text[exc.pos_in_stream]!r}",
                            locate(exc.line, exc.column)) from None
    types = _type_names(tokens)
    for tok, nxt in zip(tokens, tokens[1:] + tokens[-1:]):
        if tok.type == "IDENTIFIER" and tok.value in types:
            tok.type = "TYPE_IDENTIFIER"
        elif tok.value == ">" and nxt is not tok and nxt.value in (">", ">=") and nxt.start_pos == tok.end_pos:
            tok.type = "_R_ANGLE_SHIFT"  # `>>`: a shift, or two closing angles (p4c's lexer does this)
    _mark_type_argument_lists(tokens)
    interactive = parser.parse_interactive()
    last: Token | None = None
    try:
        for tok in tokens:
            last = tok
            interactive.feed_token(tok)
        return interactive.feed_eof(last)
    except UnexpectedToken as exc:
        tok = exc.token
        if tok.type == "$END":
            where = locate(last.end_line or 1, last.end_column or 1) if last else None
            raise P4SyntaxError("unexpected end of input", where) from None
        names = _terminal_names(parser)
        expected = sorted({names.get(e, e) for e in exc.expected if not e.startswith("__")})
        hint = f"; expected {' or '.join(expected[:10])}" if expected else ""
        what = repr(tok.value)
        if tok.type == "IDENTIFIER" and "TYPE_IDENTIFIER" in exc.expected:
            what += " (not a declared type)"
        raise P4SyntaxError(f"unexpected {what}{hint}", locate(tok.line, tok.column)) from None
    except (UnexpectedEOF, UnexpectedInput) as exc:
        raise P4SyntaxError(f"cannot parse: {exc}", None) from None
