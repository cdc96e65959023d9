"""Who of the job's peers was heard from, what was heard last, and when.

A peer is alive while it sends anything: data, probes, bitmaps or keep-alives. The
endpoint's receive thread notes every datagram here (one dict store per datagram); a send
or a wait that depends on one peer asks :meth:`Liveness.check` and fails when that peer
has been silent for longer than the endpoint's ``peer_timeout``, or at once when the last
thing heard from it, since the wait began, is its goodbye (:func:`goodbye`: it closed).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from hosts.errors import HostError, PeerGoneError
from hosts.wire import HEADER_LEN, HEADER_STRUCT, VERSION, Flags, MsgType

Address = tuple[str, int]

_KIND = {0: "gradient", 1: "parameter"}


def goodbye(job_id: int, worker_id: int) -> bytes:
    """What a closing endpoint sends the peers it heard from: a keep-alive answer flagged
    *last* (an endpoint without this rule takes it for a keep-alive answer)."""
    return HEADER_STRUCT.pack((VERSION << 4) | MsgType.BITMAP, Flags.LAST, job_id, worker_id, 0, 0, 0, 0, 0, 0, 7, 0)


def say_goodbye(send: Callable[[bytes, Address], object], peers: list[Address], data: bytes) -> None:
    """Send `data` (:func:`goodbye`) to each of `peers`, best effort."""
    for peer in peers:
        try:
            send(data, peer)
        except (OSError, HostError):
            pass


def is_goodbye(header: bytes | memoryview) -> bool:
    """Whether `header` is a peer's :func:`goodbye`."""
    return (len(header) >= HEADER_LEN and header[0] & 0x0F == MsgType.BITMAP and bool(header[1] & Flags.LAST)
            and HEADER_STRUCT.unpack_from(header)[7] == 0)


def describe(data: bytes | memoryview) -> str:
    """A short description of a datagram, for error messages."""
    if len(data) < HEADER_LEN:
        return f"a {len(data)}-byte datagram (not DLCP)"
    vt, _flags, job, worker, tensor, iteration, _off, tensor_len, _count, mag, _prio, _seq = (
        HEADER_STRUCT.unpack_from(data))
    kind = vt & 0x0F
    if kind in (MsgType.PROBE, MsgType.BITMAP) and tensor_len == 0:
        return "a keep-alive" if kind == MsgType.PROBE else "its goodbye" if is_goodbye(data) else "a keep-alive answer"
    what = {0: "gradient data", 1: "parameter data", 2: "a probe", 3: "a bitmap"}.get(kind, f"type {kind}")
    of = _KIND.get(mag, "?") if kind in (MsgType.PROBE, MsgType.BITMAP) else ""
    return (f"{what}{' for ' + of if of else ''} (job {job}, worker {worker}, tensor {tensor}, "
            f"iteration {iteration})")


class Liveness:
    """Last datagram heard per peer address (thread-safe enough: single stores)."""

    def __init__(self, peer_timeout: float) -> None:
        self.peer_timeout = peer_timeout
        self._heard: dict[Address, tuple[float, bytes]] = {}
        self._lock = threading.Lock()
        self.started = time.monotonic()

    def heard(self, source: Address, now: float, header: bytes) -> None:
        self._heard[source] = (now, header)

    def last(self, peer: Address) -> float | None:
        entry = self._heard.get(peer)
        return entry[0] if entry else None

    def peers(self) -> list[Address]:
        """Every address heard from."""
        return list(self._heard)

    def silent_for(self, peer: Address, since: float) -> float:
        """Seconds since `peer` was last heard, counting from `since` at the earliest."""
        last = self.last(peer)
        return time.monotonic() - max(since, last if last is not None else since)

    def check(self, peer: Address, since: float, waiting_for: str, limit: float | None = None) -> None:
        """Raise PeerGoneError when `peer` has been silent for more than `limit` seconds
        (``peer_timeout`` by default), counted from `since` at the earliest (e.g. when the
        wait began)."""
        limit = self.peer_timeout if limit is None else limit
        entry = self._heard.get(peer)
        if entry is not None and entry[0] >= since and is_goodbye(entry[1]):
            raise PeerGoneError(f"peer {peer[0]}:{peer[1]} closed its endpoint {time.monotonic() - entry[0]:.1f} s "
                                f"ago (its goodbye is the last heard from it) while waiting for {waiting_for}", peer)
        silent = self.silent_for(peer, since)
        if silent <= limit:
            return
        raise PeerGoneError(f"peer {peer[0]}:{peer[1]} is gone: {self.report(peer)}; "
                            f"nothing at all from it for {silent:.1f} s (limit {limit:g} s) "
                            f"while waiting for {waiting_for}", peer)

    def report(self, peer: Address) -> str:
        entry = self._heard.get(peer)
        if entry is None:
            return f"never heard from it since this endpoint opened {time.monotonic() - self.started:.1f} s ago"
        at, header = entry
        return f"last heard {describe(header)} {time.monotonic() - at:.1f} s ago"
