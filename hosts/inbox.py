"""Completed messages not taken yet, the threads waiting for them, and what a closing endpoint
still owes their senders (used by :mod:`hosts.endpoint`).

A wait for one message (:meth:`Endpoint.take`) is woken by that message alone; a wait for any
(:meth:`Endpoint.receive`) by every delivery. With one condition notified for each completed
message, every waiting all-reduce of a rank (68 on the trace job) woke per delivery: a thread
switch and a GIL hand-off each, about a third of a DLCP rank's CPU (experiments/README.md).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

from hosts.messages import Delivered, MessageKey
from hosts.pacing import RttEstimator
from hosts.wire import HEADER_LEN, HEADER_STRUCT, Flags, MsgType

Address = tuple[str, int]
_LAST = int(Flags.LAST)


class Inbox:
    """Completed messages by key, in arrival order (thread-safe)."""

    def __init__(self) -> None:
        self.messages: OrderedDict[MessageKey, Delivered] = OrderedDict()
        self._lock = threading.Lock()
        self._any = threading.Condition(self._lock)
        self._any_waiters = 0
        #: key -> [its waiters' condition (on the same lock), how many wait]
        self._keys: dict[MessageKey, list[threading.Condition | int]] = {}

    def put(self, delivered: list[Delivered]) -> None:
        """Queue completed messages; wake whoever waits for them."""
        with self._lock:
            for message in delivered:
                self.messages[message.key] = message
                entry = self._keys.get(message.key)
                if entry is not None:
                    entry[0].notify_all()  # type: ignore[union-attr]
            if self._any_waiters:
                self._any.notify_all()

    def wake_all(self) -> None:
        """Wake every waiter (they look at their stop condition)."""
        with self._lock:
            self._any.notify_all()
            for cond, _n in self._keys.values():
                cond.notify_all()  # type: ignore[union-attr]

    def wait(self, pick: Callable[[], MessageKey | None], timeout: float, only: MessageKey | None,
             stopped: Callable[[], bool]) -> Delivered | None:
        """The message `pick` chooses (called with the lock held), taken out; None after
        `timeout` seconds or once `stopped()`. `only`: the one key `pick` looks for."""
        deadline = time.monotonic() + timeout
        with self._lock:
            if only is None:
                cond = self._any
                self._any_waiters += 1
            else:
                entry = self._keys.setdefault(only, [threading.Condition(self._lock), 0])
                entry[1] += 1  # type: ignore[operator]
                cond = entry[0]  # type: ignore[assignment]
            try:
                while (key := pick()) is None:
                    left = deadline - time.monotonic()
                    if stopped() or left <= 0:
                        return None
                    cond.wait(left)
                return self.messages.pop(key)
            finally:
                if only is None:
                    self._any_waiters -= 1
                else:
                    entry[1] -= 1  # type: ignore[operator]
                    if not entry[1]:
                        del self._keys[only]


class Finals:
    """Messages this endpoint completed, and when it last told their sender so (an answer
    flagged *last*), so that :meth:`Endpoint.close` stays until their senders know.

    A sender ends a message only on such an answer; a receiver that closed as soon as its
    peers fell quiet left a sender whose last probe (or its answer) was lost re-probing a
    closed port until its peer timeout (a trace job's rank waited 120 s for an all-reduce
    its neighbour had completed, then the job died). Only sources that probe are waited
    for (a sender of bare data never asks). Thread-safe; at most `keep` messages are kept."""

    def __init__(self, keep: int = 4096) -> None:
        self.keep = keep
        self._lock = threading.Lock()
        #: key -> [sender, when completed (0.0: not seen complete yet), last final answer (0.0: none)]
        self._entries: dict[MessageKey, list[Any]] = {}
        self._probers: set[Address] = set()

    def completed(self, delivered: list[Delivered], now: float) -> None:
        """Note messages that completed here at `now`."""
        with self._lock:
            for message in delivered:
                entry = self._entries.get(message.key)
                if entry is None:
                    self._add(message.key, [message.source, now, 0.0])
                elif not entry[1]:
                    entry[1] = now

    def probed(self, source: Address) -> None:
        """Note `source` as one that probes."""
        if source not in self._probers:
            with self._lock:
                self._probers.add(source)

    def replied(self, reply: bytes | memoryview, source: Address, now: float, last: bool | None = None) -> None:
        """Note an answer sent to `source` (a prober); one flagged last settles its message.
        `last`: whether the answer was flagged last (None: as `reply` is; `reply` may then be the
        probe it answered, whose header names the same message)."""
        if source not in self._probers:
            with self._lock:
                self._probers.add(source)
        if len(reply) >= HEADER_LEN and (reply[1] & _LAST if last is None else last):
            _vt, _f, job, worker, tensor, iteration, _o, _tl, _n, kind, _p, _s = HEADER_STRUCT.unpack_from(reply)
            if kind > 1:
                return
            key = MessageKey(job, worker, iteration, tensor, MsgType(kind))
            with self._lock:
                entry = self._entries.get(key)
                if entry is None:
                    self._add(key, [source, now, now])
                else:
                    entry[2] = now

    def owed(self, now: float, rtts: Mapping[Address, RttEstimator], linger: float, max_rto: float) -> str | None:
        """What a closing endpoint still owes (None: nothing): the answer to a message that
        completed less than ``max_rto + linger`` s ago (a sender's probes come at least that
        often) whose sender, a prober, has not asked yet; or, after a final answer, the time its
        sender takes to ask again should the answer be lost (two RTOs, from the endpoint's
        estimate `rtts` to it or else its largest one; at least `linger`, at most `max_rto`)."""
        with self._lock:
            entries = list(self._entries.items())
        for key, (source, completed, final) in entries:
            if not final and completed and source in self._probers and now - completed < max_rto + linger:
                return f"the final answer to {source[0]}:{source[1]} for {key} (not asked yet)"
            if final and now - final < linger:
                return f"a repeated question from {source[0]}:{source[1]} for {key}"
            if final and now - final < max_rto:
                rtt = rtts.get(source)
                rtos = [rtt.rto] if rtt is not None and rtt.srtt is not None else [
                    r.rto for r in list(rtts.values()) if r.srtt is not None]
                if now - final < min(max_rto, 2 * max(rtos, default=0.0)):
                    return f"a repeated question from {source[0]}:{source[1]} for {key}"
        return None

    def _add(self, key: MessageKey, entry: list[Any]) -> None:
        self._entries[key] = entry
        while len(self._entries) > self.keep:
            del self._entries[next(iter(self._entries))]
