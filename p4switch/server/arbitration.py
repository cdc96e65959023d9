"""Client arbitration as P4Runtime 1.4 section 5 specifies it (default role only).

A client that arbitrates with an election id at least the highest the server has ever seen
becomes (or stays) primary; any other client is a backup, and so is one without an election
id. When the primary leaves or lowers its id there is no primary until a client arbitrates
with an id at least the highest seen. Notifications carry OK for the primary, ALREADY_EXISTS
for a backup while a primary exists, NOT_FOUND when none does, and the highest election id
seen (unset while there has never been a primary).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

import grpc
from google.rpc import code_pb2
from p4.v1 import p4runtime_pb2

from p4switch.server.errors import RpcError

Notify = Callable[[p4runtime_pb2.StreamMessageResponse], object]


def election_value(uint128: p4runtime_pb2.Uint128) -> int:
    return (uint128.high << 64) | uint128.low


@dataclass
class Client:
    """One StreamChannel that has arbitrated; ``election_id`` None: it sent none."""

    stream_id: int
    election_id: int | None
    notify: Notify


class Arbiter:
    """Who may write to one device."""

    def __init__(self, device_id: int) -> None:
        self.device_id = device_id
        self._clients: dict[int, Client] = {}
        self._highest_seen: int | None = None
        self._primary_stream: int | None = None
        self._ever_primary = False
        self._lock = threading.Lock()

    def _primary(self) -> Client | None:
        return self._clients.get(self._primary_stream) if self._primary_stream is not None else None

    def arbitrate(self, stream_id: int, update: p4runtime_pb2.MasterArbitrationUpdate, notify: Notify) -> None:
        """Register or update a stream's election id and tell the clients that need to know."""
        known = stream_id in self._clients
        if update.device_id != self.device_id:
            if known:
                raise RpcError(grpc.StatusCode.FAILED_PRECONDITION,
                               f"device id {update.device_id} differs from this stream's ({self.device_id})")
            raise RpcError(grpc.StatusCode.NOT_FOUND,
                           f"device id {update.device_id} is not this switch (device id {self.device_id})")
        if update.HasField("role") and (update.role.name or update.role.HasField("config")):
            raise RpcError(grpc.StatusCode.UNIMPLEMENTED,
                           f"role {update.role.name!r}: only the default role is supported")
        election_id = election_value(update.election_id) if update.HasField("election_id") else None
        with self._lock:
            if election_id is not None and any(
                c.election_id == election_id and c.stream_id != stream_id for c in self._clients.values()
            ):
                raise RpcError(grpc.StatusCode.INVALID_ARGUMENT,
                               f"election id {election_id} is already used by another client")
            self._clients[stream_id] = Client(stream_id, election_id, notify)
            was_primary = self._primary_stream == stream_id
            if election_id is not None and (self._highest_seen is None or election_id >= self._highest_seen):
                self._primary_stream = stream_id
                self._highest_seen = election_id
                self._ever_primary = True
                self._announce()
                return
            if was_primary:  # the primary downgraded itself: nobody is primary now
                self._primary_stream = None
                self._announce()
                return
            self._announce(only=stream_id)

    def remove(self, stream_id: int) -> None:
        """Forget a stream that ended; when it was the primary, the others hear there is none."""
        with self._lock:
            if self._clients.pop(stream_id, None) is None:
                return
            if self._primary_stream == stream_id:
                self._primary_stream = None
                self._announce()

    def _announce(self, only: int | None = None) -> None:
        primary = self._primary()
        for client in list(self._clients.values()):
            if only is not None and client.stream_id != only:
                continue
            msg = p4runtime_pb2.StreamMessageResponse()
            arb = msg.arbitration
            arb.device_id = self.device_id
            if self._ever_primary and self._highest_seen is not None:
                value = self._highest_seen
                arb.election_id.high, arb.election_id.low = value >> 64, value & ((1 << 64) - 1)
            if primary is None:
                arb.status.code, arb.status.message = code_pb2.NOT_FOUND, "no primary client"
            elif primary.stream_id == client.stream_id:
                arb.status.code, arb.status.message = code_pb2.OK, "primary"
            else:
                arb.status.code, arb.status.message = code_pb2.ALREADY_EXISTS, "backup"
            client.notify(msg)

    def check_primary(self, election_id: p4runtime_pb2.Uint128, what: str) -> None:
        """Raise PERMISSION_DENIED unless ``election_id`` is the current primary's."""
        value = election_value(election_id)
        with self._lock:
            primary = self._primary()
        if primary is None or primary.election_id != value:
            holder = f"the primary's is {primary.election_id}" if primary else "there is no primary client"
            raise RpcError(grpc.StatusCode.PERMISSION_DENIED,
                           f"{what} refused: election id {value} is not the primary ({holder})")

    def check_primary_stream(self, stream_id: int, what: str) -> None:
        """Raise PERMISSION_DENIED unless the stream belongs to the primary client."""
        with self._lock:
            primary = self._primary()
        if primary is None or primary.stream_id != stream_id:
            raise RpcError(grpc.StatusCode.PERMISSION_DENIED, f"{what} refused: this client is not the primary")

    def primary_notify(self) -> Notify | None:
        """Where to send PacketIn and digests: the primary's stream."""
        with self._lock:
            primary = self._primary()
        return primary.notify if primary else None
