"""Where the project's own files live: sources, build outputs, logs and pcaps."""

from __future__ import annotations

import os
from pathlib import Path

#: The repository (or installed tree) root: the folder that holds p4src/.
ROOT = Path(__file__).resolve().parent.parent


def workdir() -> Path:
    """The folder build/, logs/ and pcaps/ go under: $GRADFABRIC_WORKDIR or the repo root."""
    return Path(os.environ.get("GRADFABRIC_WORKDIR", ROOT))


def build_dir() -> Path:
    return workdir() / "build"


def logs_dir() -> Path:
    return workdir() / "logs"


def pcaps_dir() -> Path:
    return workdir() / "pcaps"


P4SRC = ROOT / "p4src"
TOPOLOGIES = ROOT / "mininet_topos"
