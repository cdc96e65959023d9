"""A client of the embedded switch's control channel: what P4Runtime does not carry.

The embedded target (``p4switch run``) serves a ``p4switch.Control`` gRPC service on its
P4Runtime port (p4switch/README.md, "Queues at run time"): unary methods whose request and
answer are JSON objects, encoded as UTF-8 bytes. The controller reads the traffic manager's
drop counts through ``Stats``; it speaks the documented protocol here rather than importing
the switch, so it can reach a target only through P4Runtime and this channel. BMv2 has no
such service (its queues are set through Thrift: ``bmv2_queues.py``).
"""

from __future__ import annotations

import json
from typing import Any

import grpc

from controller.errors import ControllerError

SERVICE = "p4switch.Control"


class ControlChannelError(ControllerError):
    """A control request that failed: no such service (BMv2), unreachable switch, refused request."""

    def __init__(self, address: str, method: str, detail: str, code: grpc.StatusCode | None = None) -> None:
        self.address = address
        self.method = method
        self.code = code
        super().__init__(f"{address}: control {method}: {detail}")


def call(address: str, method: str, request: dict[str, Any] | None = None, timeout: float = 5.0) -> dict[str, Any]:
    """One control request to the switch at ``address``; its JSON answer."""
    with grpc.insecure_channel(address) as channel:
        stub = channel.unary_unary(f"/{SERVICE}/{method}",
                                   request_serializer=lambda value: json.dumps(value).encode(),
                                   response_deserializer=lambda data: json.loads(data or b"{}"))
        try:
            answer = stub(request or {}, timeout=timeout)
        except grpc.RpcError as exc:
            raise ControlChannelError(address, method, exc.details() or exc.code().name, exc.code()) from exc
    if not isinstance(answer, dict):
        raise ControlChannelError(address, method, f"answer is not a JSON object: {answer!r}")
    return answer


def queue_drops(address: str, timeout: float = 2.0) -> dict[tuple[int, int, str], int] | None:
    """The traffic manager's drops by (port, priority, reason), or None when the switch has no
    control service (BMv2: ``simple_switch`` keeps no count of tail drops) or does not answer."""
    try:
        stats = call(address, "Stats", {}, timeout=timeout)
    except ControlChannelError:
        return None
    out: dict[tuple[int, int, str], int] = {}
    for key, packets in (stats.get("queue_drops") or {}).items():
        port, priority, reason = str(key).split(":", 2)
        out[(int(port), int(priority), reason)] = int(packets)
    return out
