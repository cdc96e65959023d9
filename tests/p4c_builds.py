"""p4c's BMv2 builds shared by the tests of one process: each program (by its text) is
compiled once per suite, into a folder of this process that tests only read."""

from __future__ import annotations

import functools
import hashlib
import tempfile
from pathlib import Path

from gradfabric.p4build import Artifacts, compile_p4c
from gradfabric.p4ref import require_tool


@functools.cache
def _build(source: Path, digest: str, p4c: str) -> Artifacts:
    return compile_p4c(source, Path(tempfile.mkdtemp(prefix=f"p4c-{source.stem}-{digest[:8]}.")), p4c)


def p4c_build(source: Path, p4c: str | None = None) -> Artifacts:
    """``source`` compiled by p4c for v1model (``p4c``: default $GRADFABRIC_P4REF/bin or PATH);
    a program whose text changed is compiled again."""
    source = Path(source).resolve()
    return _build(source, hashlib.sha256(source.read_bytes()).hexdigest(), p4c or str(require_tool("p4c")))
