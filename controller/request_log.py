"""A per-switch log of every P4Runtime request, with entities named rather than numbered."""

from __future__ import annotations

import datetime
import threading
from pathlib import Path


class RequestLog:
    """Appends one block per request to a file; ``RequestLog(None)`` logs nowhere."""

    def __init__(self, path: str | Path | None) -> None:
        self.path = Path(path) if path else None
        self._lock = threading.Lock()
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)

    def record(self, rpc: str, lines: list[str] | None = None, *, result: str = "") -> None:
        if self.path is None:
            return
        stamp = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds")
        text = f"[{stamp}] {rpc}" + (f" -> {result}" if result else "") + "\n"
        text += "".join(f"    {line}\n" for line in lines or [])
        with self._lock, self.path.open("a") as out:
            out.write(text)
