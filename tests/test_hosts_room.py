"""Window room goes to the highest-priority sender waiting for it, and wakes it only once
there is as much room as it waits for (hosts/sender.py: a whole chunk while it has others
unanswered); room short of that is kept for it, not offered to lower priorities."""

from __future__ import annotations

from hosts.endpoint import Endpoint


class _Waiter:
    def __init__(self) -> None:
        self.woken = 0

    def notify(self) -> None:
        self.woken += 1


def test_room_wakes_the_top_waiter_only_when_it_fits() -> None:
    ep = Endpoint(worker_id=0, linger=0)
    try:
        high, low = _Waiter(), _Waiter()
        with ep._cond:
            ep.window.cwnd = 20.0  # no port rate: the flight cap is the window
            assert int(ep.window.flight_cap) == 20
            ep._wait_room(high, 7, 10)  # type: ignore[arg-type]
            ep._wait_room(low, 3, 1)  # type: ignore[arg-type]
            ep.in_flight = 15  # room 5: short of the top waiter's 10
            ep._room_freed()
            assert (high.woken, low.woken) == (0, 0)
            ep.in_flight = 10  # room 10
            ep._room_freed()
            assert (high.woken, low.woken) == (1, 0)
            ep._room_freed()  # the top one left the queue: the next in priority order
            assert (high.woken, low.woken) == (1, 1)
            ep._room_freed()  # nobody waits any more
            assert (high.woken, low.woken) == (1, 1)
            ep.in_flight = 0
    finally:
        ep.close()


def test_a_waiter_keeps_its_turn_when_it_asks_again() -> None:
    ep = Endpoint(worker_id=0, linger=0)
    try:
        first, second = _Waiter(), _Waiter()
        with ep._cond:
            ep.window.cwnd = 20.0
            ep.in_flight = 20
            ep._wait_room(first, 5, 8)  # type: ignore[arg-type]
            ep._wait_room(second, 5, 8)  # type: ignore[arg-type]
            ep._wait_room(first, 5, 4)  # asks again, for less: still first in line
            ep.in_flight = 15  # room 5
            ep._room_freed()
            assert (first.woken, second.woken) == (1, 0)
            ep.in_flight = 0
    finally:
        ep.close()
