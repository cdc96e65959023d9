"""Per-packet execution context and the control-flow signals of compiled P4 code."""

from __future__ import annotations

from typing import Any, Callable

from p4switch.errors import P4SwitchError

# standard_metadata.instance_type values (BMv2 simple_switch).
PKT_NORMAL = 0
PKT_INGRESS_CLONE = 1
PKT_EGRESS_CLONE = 2
PKT_RECIRC = 4
PKT_REPLICATION = 5
PKT_RESUBMIT = 6

DROP_PORT = 511


class ParserError(Exception):
    """Raised inside the parser; `error` is the P4 error member name."""

    def __init__(self, error: str) -> None:
        super().__init__(error)
        self.error = error


class ExitSignal(Exception):
    """`exit`: leave the current top-level control."""


class ReturnSignal(Exception):
    """`return` from an action, control or function (with an optional value)."""

    def __init__(self, value: Any = None) -> None:
        super().__init__()
        self.value = value


class PipelineAssertion(P4SwitchError):
    """A P4 `assert`/`assume` failed while processing a packet."""


class ExternFunctionMissing(P4SwitchError):
    """A packet reached a call of an extern function the program declares but no target
    implements (BMv2 needs a plug-in for it)."""


class PacketContext:
    """What compiled code needs besides the slot list; lives in slot 0."""

    __slots__ = ("data", "pos", "length", "out", "now_us", "clone", "resubmit", "recirculate",
                 "truncate", "hit_entry", "digest", "log", "payload")

    def __init__(self, data: bytes, now_us: int, digest: Callable, log: Callable) -> None:
        self.data = data
        self.pos = 0
        self.length = len(data)
        self.out: list[bytes] = []
        self.now_us = now_us
        self.clone: tuple[str, int, int | None] | None = None
        self.resubmit: int | None = None
        self.recirculate: int | None = None
        self.truncate: int | None = None
        self.hit_entry: Any = None
        self.digest = digest
        self.log = log
        self.payload = b""


class BreakSignal(Exception):
    """`break`: leave the innermost `for` loop."""


class ContinueSignal(Exception):
    """`continue`: go on with the innermost `for` loop's next iteration."""
