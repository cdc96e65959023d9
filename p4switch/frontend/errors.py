"""Front-end errors; each message starts with ``file:line:col``."""

from __future__ import annotations

from dataclasses import dataclass

from p4switch.errors import P4SwitchError


@dataclass(frozen=True)
class SourceLocation:
    file: str
    line: int
    column: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"


class P4FrontendError(P4SwitchError):
    """A P4 program could not be loaded."""

    kind = "error"

    def __init__(self, message: str, location: SourceLocation | None = None) -> None:
        self.message = message
        self.location = location
        where = f"{location}: " if location else ""
        super().__init__(f"{where}{self.kind}: {message}")


class P4PreprocessError(P4FrontendError):
    kind = "preprocessor error"


class P4SyntaxError(P4FrontendError):
    kind = "syntax error"


class P4TypeError(P4FrontendError):
    kind = "type error"


class P4UnsupportedError(P4FrontendError):
    kind = "unsupported"
