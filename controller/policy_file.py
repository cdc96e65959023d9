"""Reading the files a policy comes from: the policy YAML and the traces it names.

Files come from operators and from other tools, so nothing here trusts them: the YAML may not
use aliases (a few hundred bytes of nested aliases expand to gigabytes) nor repeat a key (the
last would silently win), and it must be a UTF-8 text file of bounded size; a trace CSV must
hold finite, non-negative sizes. Every refusal is a :class:`PolicyError` naming the file and
the line or row.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

import yaml

from controller.errors import PolicyError

MAX_POLICY_BYTES = 1 << 20
MAX_TRACE_ROWS = 1 << 20


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader without aliases and without duplicate mapping keys."""

    def compose_node(self, parent: Any, index: Any) -> Any:  # type: ignore[override]
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(
                None, None, f"aliases (*{event.anchor}) are not allowed in policy files", event.start_mark)
        return super().compose_node(parent, index)

    def construct_mapping(self, node: Any, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, Any] = {}
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.get(key)
                except TypeError:
                    continue  # an unhashable key: SafeLoader reports it
                if first is not None:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {key!r} (first at line {first.line + 1})", key_node.start_mark)
                seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)


def read_text(path: Path, limit: int, what: str) -> str:
    """A UTF-8 text file of at most ``limit`` bytes, or PolicyError saying why not."""
    try:
        if path.is_dir():
            raise PolicyError(str(path), [f"is a directory, not a {what}"])
        with path.open("rb") as f:
            data = f.read(limit + 1)
    except FileNotFoundError:
        raise PolicyError(str(path), ["no such file"]) from None
    except OSError as exc:
        raise PolicyError(str(path), [f"cannot read: {exc.strerror or exc}"]) from None
    if len(data) > limit:
        raise PolicyError(str(path), [f"larger than {limit} bytes: not a {what}"])
    if b"\x00" in data:
        raise PolicyError(str(path), [f"binary data (NUL bytes): not a {what}"])
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PolicyError(str(path), [f"not UTF-8 text (byte {exc.start}): not a {what}"]) from None


def load_yaml(path: Path) -> Any:
    """The parsed policy YAML of ``path``."""
    text = read_text(path, MAX_POLICY_BYTES, "policy file")
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1} column {mark.column + 1}: " if mark else ""
        raise PolicyError(str(path), [f"{where}not valid YAML ({getattr(exc, 'problem', exc)})"]) from None


def trace_sizes(path: Path) -> list[float]:
    """Per-tensor sizes (elements) in forward order from a trace CSV (numel or *bytes column);
    raises ValueError naming the row of a missing, non-numeric, infinite, NaN or negative size."""
    try:
        text = read_text(path, 64 << 20, "trace CSV")
    except PolicyError as exc:
        raise ValueError("; ".join(exc.problems)) from None
    try:
        rows = list(csv.DictReader(text.splitlines()))
    except csv.Error as exc:
        raise ValueError(f"not a CSV file: {exc}") from None
    if not rows:
        raise ValueError("no rows")
    if len(rows) > MAX_TRACE_ROWS:
        raise ValueError(f"more than {MAX_TRACE_ROWS} rows")
    columns = [c for c in rows[0] if c is not None]
    if "numel" in columns:
        column, scale = "numel", 1.0
    else:
        byte_columns = [c for c in columns if c.endswith("bytes")]
        if not byte_columns:
            raise ValueError(f"needs a 'numel' or '*bytes' column (has: {', '.join(columns)})")
        column, scale = byte_columns[0], 0.25
    sizes = []
    for number, row in enumerate(rows, start=2):
        raw = row.get(column)
        try:
            size = float(raw) if raw is not None else math.nan
        except ValueError:
            raise ValueError(f"row {number}: {column} {raw!r} is not a number") from None
        if not math.isfinite(size) or size < 0:
            raise ValueError(f"row {number}: {column} {raw!r} is not a finite size >= 0")
        sizes.append(size * scale)
    return sizes
