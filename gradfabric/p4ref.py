"""Where the reference P4 tools (p4c, BMv2) are found.

One rule for every part of the project: a tool is taken from ``$GRADFABRIC_P4REF/bin`` when
that variable names a prefix, else from PATH. ``make test`` and ``.ci/run`` set the variable
to ``../shared/p4ref`` when that folder exists; on a user's machine the tools come from their
own install (on PATH, or under the prefix they name).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from gradfabric.errors import GradfabricError

#: The environment variable naming a prefix whose bin/ holds p4c and BMv2.
ENV_PREFIX = "GRADFABRIC_P4REF"

#: The tools the project uses, by the name p4lang installs them under.
TOOLS = ("p4c", "simple_switch", "simple_switch_grpc", "simple_switch_CLI", "p4c-stf")


class P4RefNotFound(GradfabricError):
    """A reference tool (p4c or BMv2) is neither under $GRADFABRIC_P4REF nor on PATH."""


def prefix() -> Path | None:
    """The prefix named by $GRADFABRIC_P4REF, or None when it is unset or empty."""
    value = os.environ.get(ENV_PREFIX, "").strip()
    return Path(value).expanduser().resolve() if value else None


def find_tool(name: str) -> Path | None:
    """The executable `name` under $GRADFABRIC_P4REF/bin, else on PATH, else None."""
    root = prefix()
    if root is not None:
        candidate = root / "bin" / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which(name)
    return Path(found) if found else None


def require_tool(name: str) -> Path:
    """Like :func:`find_tool`, but raise :class:`P4RefNotFound` saying where it looked."""
    found = find_tool(name)
    if found is not None:
        return found
    root = prefix()
    where = f"{root}/bin (from ${ENV_PREFIX}) nor on PATH" if root else (
        f"on PATH (set ${ENV_PREFIX} to the prefix of a p4c/BMv2 install)"
    )
    raise P4RefNotFound(f"{name} is not {'under ' if root else ''}{where}")


def missing_tools(names: tuple[str, ...] = TOOLS) -> list[str]:
    """The tools of `names` that cannot be found (empty when all are there)."""
    return [name for name in names if find_tool(name) is None]
