"""C preprocessing of P4 sources with pcpp (pure Python: no compiler toolchain needed).

pcpp is used rather than ``cpp -P`` because it is a declared dependency that works on every
machine, and it emits ``#line`` markers, which map errors back to the original file and line.
The architecture headers ``core.p4`` and ``v1model.p4`` are built in (``include/``).
"""

from __future__ import annotations

import io
import re
from bisect import bisect_right
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import pcpp

from p4switch.frontend.errors import P4PreprocessError, SourceLocation

BUILTIN_INCLUDE = Path(str(resources.files("p4switch.frontend").joinpath("include")))
_LINE_MARKER = re.compile(r'^#line (\d+)(?: "([^"]*)")?\s*$')


@dataclass
class PreprocessedSource:
    """Preprocessed text (``#line`` markers blanked) and the map back to original lines."""

    text: str
    name: str
    marked: str = ""
    _starts: list[int] = field(default_factory=list)
    _origins: list[tuple[str, int]] = field(default_factory=list)

    @classmethod
    def from_marked(cls, marked: str, name: str) -> "PreprocessedSource":
        """Build from text that still holds ``#line N "file"`` markers."""
        lines = marked.split("\n")
        out: list[str] = []
        starts: list[int] = []
        origins: list[tuple[str, int]] = []
        current = name
        for number, line in enumerate(lines, start=1):
            m = _LINE_MARKER.match(line)
            if m:
                current = m.group(2) or current
                starts.append(number + 1)
                origins.append((current, int(m.group(1))))
                out.append("")
            else:
                out.append(line)
        if not starts or starts[0] != 1:
            starts.insert(0, 1)
            origins.insert(0, (name, 1))
        return cls("\n".join(out), name, marked, starts, origins)

    def locate(self, line: int, column: int) -> SourceLocation:
        i = max(0, bisect_right(self._starts, line) - 1)
        file, first = self._origins[i]
        return SourceLocation(file, first + line - self._starts[i], column)


class _Preprocessor(pcpp.Preprocessor):
    def __init__(self) -> None:
        super().__init__()
        self.line_directive = "#line"
        self.compress = 0
        self.failure: str | None = None
        self.main_text = ""
        self.main_name = ""

    def on_error(self, file: str, line: int, msg: str) -> None:
        if self.failure is None:
            self.failure = f"{file}:{line}: {msg}"

    def on_include_not_found(self, is_malformed, is_system_include, curdir, includepath):  # type: ignore[override]
        where = None
        for number, line in enumerate(self.main_text.splitlines(), start=1):
            if line.lstrip().startswith("#") and "include" in line and includepath in line:
                where = SourceLocation(self.main_name, number, line.index(includepath) + 1)
                break
        raise P4PreprocessError(f"include file not found: {includepath}", where)

    def on_directive_unknown(self, directive, toks, ifpassthru, precedingtoks):  # type: ignore[override]
        text = "".join(tok.value for tok in toks).strip()
        if directive.value == "error":
            raise P4PreprocessError(f"#error {text}", SourceLocation(directive.source, directive.lineno, 1))
        if directive.value == "warning":
            return True
        raise P4PreprocessError(f"unknown directive #{directive.value}",
                                SourceLocation(directive.source, directive.lineno, 1))

    def on_comment(self, tok) -> bool:  # type: ignore[override]
        return False


def preprocess_text(text: str, name: str, include_dirs=(), defines=None) -> str:
    """Run the preprocessor; return text with ``#line`` markers."""
    pp = _Preprocessor()
    for directory in include_dirs:
        pp.add_path(str(directory))
    pp.add_path(str(BUILTIN_INCLUDE))
    for key, value in (defines or {}).items():
        pp.define(f"{key} {value}" if value not in (None, "") else f"{key} 1")
    pp.main_text, pp.main_name = text, name
    pp.parse(text, name)
    out = io.StringIO()
    pp.write(out)
    if pp.failure:
        raise P4PreprocessError(pp.failure)
    return out.getvalue()


def preprocess(path: Path, include_dirs=(), defines=None) -> PreprocessedSource:
    """Preprocess a P4 file (its own folder is searched for ``#include "..."``)."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise P4PreprocessError(f"cannot read {path}: {exc.strerror}") from None
    dirs = [path.parent, *include_dirs]
    marked = preprocess_text(text, str(path), dirs, defines)
    return PreprocessedSource.from_marked(marked, str(path))
