"""Senders waiting for room in an endpoint's window (used by :mod:`hosts.endpoint`).

Room that frees wakes the highest-priority, longest-waiting sender once there is as much room
as it waits for (room short of that is kept for it, not offered to lower priorities; a
wake-up it could not use cost a thread switch). When the room frees on the receive thread
(an answer taken there, :meth:`hosts.sender.MessageSender.on_answer`) and that sender sleeps,
its turn is handed to the receive thread instead, which sends its next chunk at once
(:meth:`hosts.sender.MessageSender.send_turn`): no thread wakes for it.
"""

from __future__ import annotations

import itertools
import threading
from typing import Protocol


class TurnTaker(Protocol):
    """A sender whose next chunk the receive thread may send while it sleeps."""

    def take_turn(self) -> bool: ...


class RoomWaiters:
    """Senders waiting for window room, by their condition (not thread-safe by itself: the
    endpoint's lock guards it)."""

    def __init__(self) -> None:
        #: condition -> (priority, arrival, room needed, the sender or None)
        self._waiters: dict[threading.Condition, tuple[int, int, int, TurnTaker | None]] = {}
        self._order = itertools.count()
        #: While the receive thread takes an answer: senders whose turn it took (else None).
        self.handoff: list[TurnTaker] | None = None

    def __len__(self) -> int:
        return len(self._waiters)

    def wait(self, wake: threading.Condition, prio: int, need: int = 1, taker: TurnTaker | None = None) -> None:
        """`wake` waits for `need` packets of room at priority `prio` (a sender asking again
        keeps its place in line)."""
        prior = self._waiters.get(wake)
        self._waiters[wake] = (prio, next(self._order) if prior is None else prior[1], need, taker)

    def freed(self, room: int) -> None:
        """`room` packets are free: the top waiter's turn, if they are enough for it."""
        if not self._waiters or room < 1:
            return
        wake = min(self._waiters, key=lambda c: (-self._waiters[c][0], self._waiters[c][1]))
        _prio, _order, need, taker = self._waiters[wake]
        if room >= need:
            del self._waiters[wake]
            if self.handoff is not None and taker is not None and taker.take_turn():
                self.handoff.append(taker)
            else:
                wake.notify()

    def done(self, wake: threading.Condition) -> None:
        """`wake` no longer waits for room."""
        self._waiters.pop(wake, None)
