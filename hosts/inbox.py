"""Completed messages not taken yet, and the threads waiting for them (used by :mod:`hosts.endpoint`).

A wait for one message (:meth:`Endpoint.take`) is woken by that message alone; a wait for any
(:meth:`Endpoint.receive`) by every delivery. With one condition notified for each completed
message, every waiting all-reduce of a rank (68 on the trace job) woke per delivery: a thread
switch and a GIL hand-off each, about a third of a DLCP rank's CPU (experiments/README.md).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable

from hosts.messages import Delivered, MessageKey


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
