"""Which code a sweep's runs ran: the commit, the uncommitted changes, and a fingerprint of
every source file the ranks, switches and controller import.

A sweep's workers and switches are new processes per run, so an edit made while a sweep
runs (a file saved in the same working tree) reaches the runs after it: the sweep would
then mix code versions without saying so. :func:`snapshot` is taken when a sweep begins and
compared before every run; :class:`CodeChangedError` stops the sweep, naming the files.
"""

from __future__ import annotations

import hashlib
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from experiments.errors import ExperimentError

#: Folders whose source files a run executes (results and caches are left out).
CODE_DIRS = ("controller", "experiments", "gradfabric", "hosts", "mininet_topos", "p4src", "p4switch")
SUFFIXES = {".py", ".c", ".h", ".p4", ".yaml"}
SKIPPED_PARTS = {"results", "__pycache__", "build"}


class CodeChangedError(ExperimentError):
    """The source files changed while a sweep ran (or since it began, on --resume)."""


@dataclass(frozen=True)
class CodeVersion:
    commit: str | None
    #: tracked source files with uncommitted changes when the snapshot was taken
    dirty: tuple[str, ...]
    #: relative path -> sha256 of the file's bytes
    files: dict[str, str]

    @property
    def fingerprint(self) -> str:
        digest = hashlib.sha256()
        for path, sha in sorted(self.files.items()):
            digest.update(f"{path}\0{sha}\n".encode())
        return digest.hexdigest()[:16]

    def to_dict(self) -> dict[str, Any]:
        return {"commit": self.commit, "dirty": list(self.dirty), "fingerprint": self.fingerprint}

    def changed(self, other: CodeVersion) -> list[str]:
        """Files added, removed or edited between this snapshot and `other`."""
        names = set(self.files) | set(other.files)
        return sorted(n for n in names if self.files.get(n) != other.files.get(n))


def source_files(root: Path) -> dict[str, str]:
    files: dict[str, str] = {}
    for top in CODE_DIRS:
        for path in sorted((root / top).rglob("*")):
            rel = path.relative_to(root)
            if path.suffix in SUFFIXES and path.is_file() and not SKIPPED_PARTS & set(rel.parts):
                files[str(rel)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return files


def _git(root: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def snapshot(root: Path) -> CodeVersion:
    commit = _git(root, "rev-parse", "HEAD")
    status = _git(root, "status", "--porcelain", "--untracked-files=no", "--", *CODE_DIRS) or ""
    dirty = tuple(sorted(line[3:] for line in status.splitlines() if line[3:] and Path(line[3:]).suffix in SUFFIXES))
    return CodeVersion(commit.strip() if commit else None, dirty, source_files(root))


def check_unchanged(root: Path, began: CodeVersion, when: str) -> None:
    """Raise :class:`CodeChangedError` when the source files differ from `began`."""
    changed = began.changed(snapshot(root))
    if changed:
        shown = ", ".join(changed[:8]) + (f" and {len(changed) - 8} more" if len(changed) > 8 else "")
        raise CodeChangedError(
            f"{when}: source files changed since the sweep began ({shown}); a sweep's runs must all run "
            f"the same code: commit or set aside the edits, or run sweeps from their own checkout "
            f"(git worktree add)")
