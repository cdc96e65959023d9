"""P4-16 front end: preprocessing (pcpp), parsing (lark) and type checking.

`load_program` is the entry point; errors are P4SyntaxError, P4TypeError or
P4UnsupportedError (all P4SwitchError) whose message starts with ``file:line:col``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from p4switch.frontend.errors import (
    P4FrontendError, P4PreprocessError, P4SyntaxError, P4TypeError, P4UnsupportedError,
    SourceLocation,
)
from p4switch.frontend.parse import parse_source
from p4switch.frontend.preprocess import PreprocessedSource, preprocess, preprocess_text
from p4switch.frontend.program import Program

__all__ = [
    "P4FrontendError", "P4PreprocessError", "P4SyntaxError", "P4TypeError", "P4UnsupportedError",
    "Program", "SourceLocation", "load_program", "load_program_text", "program_from_preprocessed",
]


def program_from_preprocessed(source: PreprocessedSource) -> Program:
    """Parse and type-check already preprocessed source."""
    from p4switch.compiler.program import Compiler

    tree = parse_source(source.text, source.locate)
    program = Program(Path(source.name).stem, source, tree)
    program.info = Compiler(tree, source.locate).build().info
    return program


def load_program(path: Path, include_dirs: Iterable[Path] = (),
                 defines: Mapping[str, str] | None = None) -> Program:
    """Preprocess, parse and type-check a P4 file."""
    return program_from_preprocessed(preprocess(Path(path), tuple(include_dirs), dict(defines or {})))


def load_program_text(text: str, name: str = "program.p4", include_dirs: Iterable[Path] = (),
                      defines: Mapping[str, str] | None = None) -> Program:
    """Like load_program, for source held in memory."""
    marked = preprocess_text(text, name, tuple(include_dirs), dict(defines or {}))
    return program_from_preprocessed(PreprocessedSource.from_marked(marked, name))
