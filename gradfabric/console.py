"""The rich console every command prints tables with."""

from __future__ import annotations

import sys

from rich.console import Console

#: Width used when stdout is not a terminal: wide enough that no table is cut or wrapped.
PIPED_WIDTH = 1000


def console() -> Console:
    """A console for stdout: the terminal's width on a terminal, else wide enough for any table
    (rich would otherwise assume 80 columns and cut tables written to a file or a pipe)."""
    return Console(file=sys.stdout, width=None if sys.stdout.isatty() else PIPED_WIDTH)
