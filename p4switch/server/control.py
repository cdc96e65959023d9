"""Run-time control of the traffic manager, served next to P4Runtime on the same gRPC port.

BMv2 sets queue rates and depths through its Thrift CLI (``simple_switch_CLI``:
``set_queue_rate``, ``set_queue_depth``); here the same settings travel as small JSON
messages over the ``p4switch.Control`` gRPC service, so no second port is needed.
``SetPortRate`` (one rate shared by all priority queues of a port) is embedded-only.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

import grpc

from p4switch.errors import P4SwitchError
from p4switch.traffic_manager import Rate, TrafficManager

SERVICE = "p4switch.Control"
METHODS = ("SetQueueRate", "SetPortRate", "SetQueueDepth", "ShowQueues", "Stats")


def _encode(value: Any) -> bytes:
    return json.dumps(value).encode()


def _decode(data: bytes) -> Any:
    return json.loads(data or b"{}")


def _target(request: dict[str, Any]) -> tuple[int, int | None]:
    port = request.get("port")
    priority = request.get("priority")
    if not isinstance(port, int):
        raise P4SwitchError("a port number is required")
    if priority is not None and not isinstance(priority, int):
        raise P4SwitchError("priority must be a number")
    return port, priority


class ControlService:
    """Queue settings and statistics of one switch."""

    def __init__(self, tm: TrafficManager, tm_ready: threading.Condition,
                 stats: Callable[[], dict[str, Any]]) -> None:
        self.tm = tm
        self.tm_ready = tm_ready  # guards the traffic manager; notified when settings change
        self.stats = stats

    def handle(self, method: str, request: dict[str, Any]) -> dict[str, Any]:
        with self.tm_ready:
            if method == "SetQueueRate":
                port, priority = _target(request)
                rate = request.get("rate")
                self.tm.set_queue_rate(port, Rate.parse(rate) if rate else None, priority)
                self.tm_ready.notify_all()
                return self.tm.queue_settings(port)
            if method == "SetPortRate":
                port, _ = _target({"port": request.get("port")})
                rate = request.get("rate")
                self.tm.set_port_rate(port, Rate.parse(rate) if rate else None)
                self.tm_ready.notify_all()
                return self.tm.queue_settings(port)
            if method == "SetQueueDepth":
                port, priority = _target(request)
                self.tm.set_queue_depth(port, int(request.get("depth", 0)), priority)
                self.tm_ready.notify_all()
                return self.tm.queue_settings(port)
            if method == "ShowQueues":
                ports = [request["port"]] if isinstance(request.get("port"), int) else self.tm.ports()
                return {str(p): self.tm.queue_settings(p) for p in ports}
            if method == "Stats":
                return self.stats()
        raise P4SwitchError(f"unknown control method {method}")

    def generic_handler(self) -> grpc.GenericRpcHandler:
        def make(method: str) -> grpc.RpcMethodHandler:
            def behaviour(request: dict[str, Any], context: grpc.ServicerContext) -> dict[str, Any]:
                try:
                    return self.handle(method, request)
                except (P4SwitchError, ValueError, KeyError) as exc:
                    context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
                    raise  # abort raises; this line is never reached

            return grpc.unary_unary_rpc_method_handler(
                behaviour, request_deserializer=_decode, response_serializer=_encode)

        return grpc.method_handlers_generic_handler(SERVICE, {m: make(m) for m in METHODS})


def call(address: str, method: str, request: dict[str, Any], timeout: float = 5.0) -> dict[str, Any]:
    """Client side: one control request to the switch at ``address``."""
    with grpc.insecure_channel(address) as channel:
        stub = channel.unary_unary(f"/{SERVICE}/{method}", request_serializer=_encode,
                                   response_deserializer=_decode)
        try:
            return stub(request, timeout=timeout)
        except grpc.RpcError as exc:
            raise P4SwitchError(f"{address}: {exc.details() or exc.code().name}") from exc
