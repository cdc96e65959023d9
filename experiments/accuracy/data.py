"""The corpus: the installed Python standard library's ``.py`` files, split by file, as bytes.

Every machine with Python has it, nothing is downloaded. The split is deterministic: a file
goes to validation when the first byte of the SHA-256 of its path relative to the stdlib
folder is below ``256 * val_share`` (so a file keeps its side whatever else is installed).
``site-packages``, ``dist-packages`` and ``__pycache__`` are skipped. Tokens are bytes (0..255).
"""

from __future__ import annotations

import hashlib
import os
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from experiments.errors import ExperimentError

SKIPPED_DIRS = frozenset({"site-packages", "dist-packages", "__pycache__"})
SEPARATOR = b"\n\n"


@dataclass(frozen=True)
class Corpus:
    """Train and validation bytes, and what they were made from."""

    train: np.ndarray  # uint8
    val: np.ndarray  # uint8
    root: str
    train_files: int
    val_files: int
    fingerprint: str  # SHA-256 over the sorted (relative path, size) list

    def describe(self) -> dict[str, object]:
        return {"root": self.root, "train_files": self.train_files, "val_files": self.val_files,
                "train_bytes": int(self.train.size), "val_bytes": int(self.val.size),
                "fingerprint": self.fingerprint}


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def is_validation(relative: str, val_share: float) -> bool:
    """The split rule (module doc) for a path relative to the stdlib folder, '/'-separated."""
    return hashlib.sha256(relative.encode()).digest()[0] < round(256 * val_share)


def source_files(root: Path) -> list[str]:
    """Relative '/'-separated paths of the ``.py`` files under `root`, sorted."""
    found: list[str] = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS)
        for name in files:
            if name.endswith(".py"):
                found.append(Path(folder, name).relative_to(root).as_posix())
    return sorted(found)


def load_corpus(root: Path | None = None, val_share: float = 0.1) -> Corpus:
    """Read every source file under `root` (default: this Python's stdlib) and split it."""
    root = root or stdlib_root()
    if not 0.0 < val_share < 1.0:
        raise ExperimentError(f"val_share must be in (0, 1), got {val_share}")
    files = source_files(root)
    if not files:
        raise ExperimentError(f"no .py files under {root}")
    parts: dict[bool, list[bytes]] = {False: [], True: []}
    digest = hashlib.sha256()
    for rel in files:
        data = (root / rel).read_bytes()
        digest.update(f"{rel}\t{len(data)}\n".encode())
        parts[is_validation(rel, val_share)].append(data)
    if not parts[True] or not parts[False]:
        raise ExperimentError(f"the split of {len(files)} files under {root} left one side empty")

    def join(chunks: list[bytes]) -> np.ndarray:
        return np.frombuffer(SEPARATOR.join(chunks), dtype=np.uint8).copy()

    return Corpus(train=join(parts[False]), val=join(parts[True]), root=str(root),
                  train_files=len(parts[False]), val_files=len(parts[True]), fingerprint=digest.hexdigest())


def windows(text: np.ndarray, starts: np.ndarray, length: int) -> np.ndarray:
    """Rows ``text[s : s + length]`` for each start (int64 array of shape (len(starts), length))."""
    return text[starts[:, None] + np.arange(length)[None, :]].astype(np.int64)


def random_starts(rng: np.random.Generator, text: np.ndarray, count: int, length: int) -> np.ndarray:
    if text.size <= length:
        raise ExperimentError(f"text of {text.size} bytes is too short for windows of {length}")
    return rng.integers(0, text.size - length, size=count)


def fixed_starts(text: np.ndarray, count: int, length: int) -> np.ndarray:
    """`count` evenly spaced window starts over the whole text (a fixed validation set)."""
    if text.size <= length:
        raise ExperimentError(f"text of {text.size} bytes is too short for windows of {length}")
    return np.linspace(0, text.size - length - 1, count).astype(np.int64)
