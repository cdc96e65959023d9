"""Thread wake-ups of an endpoint's waits: a ``take`` for one message is woken by that
message only, not by every delivery (a trace rank has up to 68 all-reduces waiting at once;
waking them all per message cost a thread switch and a GIL hand-off each)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest

from hosts.endpoint import Endpoint
from hosts.errors import TransportError
from hosts.messages import Delivered, MessageKey
from hosts.wire import MsgType

WAITERS = 16
OTHERS = 150


def _switches(tid: int) -> int:
    for line in Path(f"/proc/self/task/{tid}/status").read_text().splitlines():
        if line.startswith("voluntary_ctxt_switches:"):
            return int(line.split()[1])
    raise AssertionError(f"no voluntary_ctxt_switches for thread {tid}")


def _state(tid: int) -> str:
    return Path(f"/proc/self/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def _key(tensor: int) -> MessageKey:
    return MessageKey(1, 1, 0, tensor, MsgType.GRADIENT)


def _message(tensor: int) -> Delivered:
    return Delivered(_key(tensor), np.full(4, float(tensor), dtype=np.float32), 4, ("127.0.0.1", 1))


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs Linux /proc per-thread counters")
def test_a_take_is_woken_by_its_own_message_only() -> None:
    ep = Endpoint(worker_id=0, linger=0)
    tids: dict[int, int] = {}
    got: dict[int, Delivered] = {}

    def wait(i: int) -> None:
        tids[i] = threading.get_native_id()
        got[i] = ep.take(_key(i), timeout=120)

    threads = [threading.Thread(target=wait, args=(i,), daemon=True) for i in range(WAITERS)]
    try:
        for t in threads:
            t.start()
        deadline = time.monotonic() + 30
        while len(tids) < WAITERS or any(_state(tid) != "S" for tid in tids.values()):
            assert time.monotonic() < deadline, "the waiting threads did not go to sleep within 30 s"
            time.sleep(0.05)
        time.sleep(0.5)  # every waiter is in its wait, not on its way to it
        before = {i: _switches(tid) for i, tid in tids.items()}
        for n in range(OTHERS):  # messages nobody waits for (yet): each one a delivery
            ep._deliver([_message(1000 + n)])
            time.sleep(0.001)  # a woken waiter gets to run and wait again
        woken = sum(_switches(tid) - before[i] for i, tid in tids.items())
        # Each waiter woken by every delivery gives WAITERS x OTHERS (2,400) switches; woken
        # by its own message only, none. A spurious wake-up now and then stays far below.
        assert woken <= 3 * WAITERS, f"{woken} thread switches of {WAITERS} waiters over {OTHERS} others' messages"
        assert not got
        for i in range(WAITERS):
            ep._deliver([_message(i)])
        for t in threads:
            t.join(timeout=30)
        assert sorted(got) == list(range(WAITERS))
        assert all(float(got[i].values[0]) == i for i in got)
        # the other messages are still there for whoever takes them
        assert float(ep.take(_key(1000 + OTHERS - 1), timeout=1).values[0]) == 1000 + OTHERS - 1
    finally:
        ep.close()


def test_abort_wakes_a_take_waiting_for_its_message() -> None:
    ep = Endpoint(worker_id=0, linger=0)
    failed: list[BaseException] = []

    def wait() -> None:
        try:
            ep.take(_key(7), timeout=120)
        except TransportError as exc:
            failed.append(exc)

    t = threading.Thread(target=wait, daemon=True)
    try:
        t.start()
        time.sleep(0.3)
        ep.abort("the job ended elsewhere")
        t.join(timeout=30)
        assert not t.is_alive(), "a take() waiting for one message was not woken by abort()"
        assert failed and "the job ended elsewhere" in str(failed[0])
    finally:
        ep.close()


def test_two_takes_of_one_key_then_a_receive_are_each_served() -> None:
    ep = Endpoint(worker_id=0, linger=0)
    out: list[float] = []

    def take() -> None:
        out.append(float(ep.take(_key(3), timeout=60).values[0]))

    def receive() -> None:
        out.append(float(ep.receive(timeout=60).values[0]))

    def until(n: int) -> None:
        deadline = time.monotonic() + 30
        while len(out) < n:
            assert time.monotonic() < deadline, f"{len(out)} of {n} waits served within 30 s"
            time.sleep(0.01)

    try:
        takes = [threading.Thread(target=take, daemon=True) for _ in range(2)]
        for t in takes:
            t.start()
        time.sleep(0.3)
        ep._deliver([_message(3)])
        until(1)  # one of the two takes has it; the other still waits on the same key
        ep._deliver([_message(3)])
        until(2)
        later = threading.Thread(target=receive, daemon=True)
        later.start()
        time.sleep(0.3)
        ep._deliver([_message(5)])
        until(3)
        assert out == [3.0, 3.0, 5.0]
    finally:
        ep.close()
