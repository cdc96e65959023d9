"""A log of every P4Runtime request, one block per message, as the P4 tutorials keep."""

from __future__ import annotations

import datetime
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import text_format
from google.protobuf.message import Message

from p4switch.server.wire import SplitWriteRequest

ELIDE_BYTES = 1024  # device configs and large payloads are logged by size only


class RequestLog:
    """Appends each request (method, time, text-format message) to a file."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = path.open("a", encoding="utf-8")
        self._lock = threading.Lock()

    def record(self, method: str, message: Any) -> None:
        stamp = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds")
        if isinstance(message, SplitWriteRequest):
            message = message.message()
        text = _describe(message) if isinstance(message, Message) else f"{message!r}\n"
        with self._lock:
            if self._file.closed:
                return
            self._file.write(f"[{stamp}] {method}\n---\n{text}---\n\n")
            self._file.flush()

    def close(self) -> None:
        with self._lock:
            self._file.close()


def _describe(message: Message) -> str:
    """Text format, with long byte fields replaced by their size."""
    big = message.ByteSize() > ELIDE_BYTES
    if not big:
        return text_format.MessageToString(message)
    copy = type(message)()
    copy.CopyFrom(message)
    config = getattr(copy, "config", None)
    note = ""
    if config is not None and hasattr(config, "p4_device_config") and config.p4_device_config:
        note = f"# p4_device_config: {len(config.p4_device_config)} bytes (not shown)\n"
        config.p4_device_config = b""
    packet = getattr(copy, "packet", None)
    if packet is not None and hasattr(packet, "payload") and len(packet.payload) > 64:
        note += f"# packet payload: {len(packet.payload)} bytes (first 64 shown)\n"
        packet.payload = packet.payload[:64]
    return note + text_format.MessageToString(copy)


class RequestLogInterceptor(grpc.ServerInterceptor):
    """Wraps every handler so that each incoming message is recorded before it is served."""

    def __init__(self, log: RequestLog) -> None:
        self.log = log

    def intercept_service(self, continuation: Callable[[Any], Any], handler_call_details: Any) -> Any:
        handler = continuation(handler_call_details)
        if handler is None:
            return None
        method = handler_call_details.method
        record = self.log.record
        if handler.unary_unary:
            inner_uu = handler.unary_unary

            def unary_unary(request: Message, context: grpc.ServicerContext) -> Any:
                record(method, request)
                return inner_uu(request, context)

            return handler._replace(unary_unary=unary_unary)
        if handler.unary_stream:
            inner_us = handler.unary_stream

            def unary_stream(request: Message, context: grpc.ServicerContext) -> Any:
                record(method, request)
                return inner_us(request, context)

            return handler._replace(unary_stream=unary_stream)
        if handler.stream_stream:
            inner_ss = handler.stream_stream

            def stream_stream(requests: Iterator[Message], context: grpc.ServicerContext) -> Any:
                def logged() -> Iterator[Message]:
                    for request in requests:
                        record(method, request)
                        yield request

                return inner_ss(logged(), context)

            return handler._replace(stream_stream=stream_stream)
        return handler
