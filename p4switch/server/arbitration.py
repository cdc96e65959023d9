"""Client arbitration: election ids, one primary, any number of backups.

The primary is the connected client with the highest election id. Each client hears of its
own role when it arbitrates, and every client hears when the primary changes: status OK for
the primary, ALREADY_EXISTS for a backup while a primary exists, NOT_FOUND when none does;
the election id in the update is the primary's (or the highest seen when there is none).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

import grpc
from google.rpc import code_pb2
from p4.v1 import p4runtime_pb2

from p4switch.server.errors import RpcError

Notify = Callable[[p4runtime_pb2.StreamMessageResponse], None]


def election_value(uint128: p4runtime_pb2.Uint128) -> int:
    return (uint128.high << 64) | uint128.low


@dataclass
class Client:
    """One StreamChannel that has arbitrated."""

    stream_id: int
    election_id: int
    notify: Notify


class Arbiter:
    """Who may write to one device."""

    def __init__(self, device_id: int) -> None:
        self.device_id = device_id
        self._clients: dict[int, Client] = {}
        self._highest_seen = 0
        self._lock = threading.Lock()

    def _primary(self) -> Client | None:
        candidates = [c for c in self._clients.values() if c.election_id > 0]
        return max(candidates, key=lambda c: c.election_id, default=None)

    def arbitrate(self, stream_id: int, update: p4runtime_pb2.MasterArbitrationUpdate, notify: Notify) -> None:
        """Register or update a stream's election id and tell the clients that need to know."""
        if update.device_id != self.device_id:
            raise RpcError(grpc.StatusCode.NOT_FOUND,
                           f"device id {update.device_id} is not this switch (device id {self.device_id})")
        if update.HasField("role") and update.role.name:
            raise RpcError(grpc.StatusCode.UNIMPLEMENTED,
                           f"role {update.role.name!r}: only the default role is supported")
        election_id = election_value(update.election_id) if update.HasField("election_id") else 0
        with self._lock:
            if election_id and any(
                c.election_id == election_id and c.stream_id != stream_id for c in self._clients.values()
            ):
                raise RpcError(grpc.StatusCode.INVALID_ARGUMENT,
                               f"election id {election_id} is already used by another client")
            before = self._primary()
            self._clients[stream_id] = Client(stream_id, election_id, notify)
            self._highest_seen = max(self._highest_seen, election_id)
            after = self._primary()
            changed = (before.stream_id if before else None) != (after.stream_id if after else None)
            self._announce(everyone=changed, newcomer=stream_id)

    def remove(self, stream_id: int) -> None:
        """Forget a stream that ended; a new primary (if any) is announced."""
        with self._lock:
            before = self._primary()
            if self._clients.pop(stream_id, None) is None:
                return
            if before is not None and before.stream_id == stream_id:
                self._announce(everyone=True, newcomer=None)

    def _announce(self, everyone: bool, newcomer: int | None) -> None:
        primary = self._primary()
        for client in list(self._clients.values()):
            if not everyone and client.stream_id != newcomer:
                continue
            msg = p4runtime_pb2.StreamMessageResponse()
            arb = msg.arbitration
            arb.device_id = self.device_id
            value = primary.election_id if primary else self._highest_seen
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
