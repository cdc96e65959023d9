"""The checks a policy file's values go through; each problem is kept as 'key.path: reason'."""

from __future__ import annotations

import ipaddress
from typing import Any


class Validator:
    """Collects every problem of a policy (so a file is reported whole, one problem a line)."""

    def __init__(self) -> None:
        self.problems: list[str] = []

    def fail(self, path: str, reason: str) -> None:
        self.problems.append(f"{path}: {reason}")

    def keys(self, obj: Any, path: str, allowed: set[str], required: set[str]) -> bool:
        if not isinstance(obj, dict):
            self.fail(path, f"must be a mapping, got {type(obj).__name__}")
            return False
        for key in obj:
            if key not in allowed:
                self.fail(f"{path}.{key}" if path else str(key), f"unknown key (known: {', '.join(sorted(allowed))})")
        for key in sorted(required - set(obj)):
            self.fail(f"{path}.{key}" if path else key, "is required")
        return True

    def int_in(self, value: Any, path: str, low: int, high: int) -> int | None:
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(path, f"must be an integer {low}..{high}, got {value!r}")
            return None
        if not low <= value <= high:
            self.fail(path, f"must be {low}..{high}, got {value}")
            return None
        return value

    def range_in(self, value: Any, path: str, low: int, high: int) -> tuple[int, int] | None:
        """A range written 'lo..hi' or a single integer."""
        if isinstance(value, int) and not isinstance(value, bool):
            v = self.int_in(value, path, low, high)
            return None if v is None else (v, v)
        if isinstance(value, str) and ".." in value:
            lo_text, _, hi_text = value.partition("..")
            try:
                lo, hi = int(lo_text), int(hi_text)
            except ValueError:
                self.fail(path, f"must be lo..hi with integers, got {value!r}")
                return None
            if not (low <= lo <= hi <= high):
                self.fail(path, f"must be lo..hi with {low} <= lo <= hi <= {high}, got {value!r}")
                return None
            return lo, hi
        self.fail(path, f"must be an integer or a range lo..hi, got {value!r}")
        return None

    def prefix(self, value: Any, path: str) -> tuple[int, int] | None:
        """An IPv4 prefix 'a.b.c.d/len' (or one address) as (address, length)."""
        try:
            net = ipaddress.IPv4Network(str(value), strict=True)
        except ValueError as exc:
            self.fail(path, f"must be an IPv4 prefix like 10.0.1.0/24, got {value!r} ({exc})")
            return None
        return int(net.network_address), net.prefixlen
