"""An answer to a sleeping sender's chunk is taken on the receive thread (hosts/sender.py,
``MessageSender.on_answer``): its credit returns, the window grows and what arrived is noted
there, and the sender's thread is woken only when it must act (packets shown missing, resends
queued), not for every chunk. An awake sender, or one woken anyway (every chunk answered, its
message complete), takes its answers itself, as before. Room freed there for a sleeping sender is its turn: the
receive thread sends its next chunk (``send_turn``) when the pacer lets it leave at once,
and wakes the sender's thread otherwise. Both only with ``Endpoint(answers_on_receive=True)``:
off, every answer wakes its sender, as before."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest

from hosts.endpoint import Endpoint
from hosts.messages import MessageKey
from hosts.pacing import Window
from hosts.packetize import packetize
from hosts.sender import MessageSender
from hosts.wire import HEADER_STRUCT, VERSION, MsgType, pack_bitmap

COUNT = 361
PACKETS = 22  # two chunks of 11 in a window of 22


class _Counting(threading.Condition):
    def __init__(self, lock: threading.RLock) -> None:
        super().__init__(lock)
        self.notified = 0

    def notify(self, n: int = 1) -> None:
        self.notified += 1
        super().notify(n)


Rig = tuple[Endpoint, MessageSender, _Counting, tuple[str, int]]


@pytest.fixture
def rig() -> Iterator[Rig]:
    yield from _rig(PACKETS)


@pytest.fixture
def rig38() -> Iterator[Rig]:
    yield from _rig(38)  # two chunks of 11 out, 16 packets pending


def _rig(packets: int) -> Iterator[Rig]:
    sink = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)  # the peer: nobody answers, we do
    sink.bind(("127.0.0.1", 0))
    ep = Endpoint(worker_id=1, linger=0, window=Window(cwnd=22.0, max_cwnd=200.0), answers_on_receive=True)
    dest = sink.getsockname()
    values = np.linspace(-1.0, 1.0, packets * COUNT, dtype=np.float32)
    key = MessageKey(1, 1, 0, 5, MsgType.GRADIENT)
    batch = packetize(values, kind=MsgType.GRADIENT, job_id=1, worker_id=1, tensor_id=5, iteration=0,
                      count=COUNT, prio_hint=3)
    sender = MessageSender(ep, dest, batch, key, seq_base=0, tensor_len=values.size, bound=0.1,
                           elements=values.size, is_part=False, prio=3)
    wake = _Counting(ep._lock)
    sender._wake = wake
    try:
        sender._fill()
        yield ep, sender, wake, dest
    finally:
        sender._release_all()
        ep.close()
        sink.close()


def _answer(ep: Endpoint, sender: MessageSender, index: int, arrived: np.ndarray, dest: tuple[str, int]) -> None:
    chunk = sender.chunks[index]
    nonce = next(iter(chunk.sent))
    key = sender.key
    header = HEADER_STRUCT.pack((VERSION << 4) | MsgType.BITMAP, 0, key.job_id, key.worker_id, key.tensor_id,
                                key.iteration, chunk.first, sender.tensor_len, chunk.nbits, int(key.kind), 7, nonce)
    ep._on_bitmap(memoryview(header + pack_bitmap(arrived)), dest, time.monotonic())


def test_two_chunks_of_eleven_are_in_flight(rig: Rig) -> None:
    ep, sender, _wake, _dest = rig
    assert [(c.first, c.nbits) for c in sender.chunks] == [(0, 11), (11, 11)]
    assert ep.in_flight == 22 and not sender.pending


def test_a_sleeping_senders_answer_is_taken_on_the_receive_thread_without_waking_it(
        rig: Rig) -> None:
    ep, sender, wake, dest = rig
    with ep._cond:
        sender.parked = True
    _answer(ep, sender, 0, np.ones(11, dtype=bool), dest)
    assert wake.notified == 0  # another chunk is unanswered and nothing is left to send: sleep on
    assert [c.first for c in sender.chunks] == [11]
    assert ep.in_flight == 11  # the first chunk's credit is back
    assert sender.received[:11].all() and not sender.received[11:].any()
    assert ep.window.cwnd == 33.0  # slow start: +11 for 11 packets acknowledged
    assert sender.timing.inline_answers == 1
    _answer(ep, sender, 0, np.ones(11, dtype=bool), dest)
    assert wake.notified == 1  # every chunk answered: the sender decides what comes next...
    assert [c.first for c in sender.chunks] == [11] and ep.in_flight == 11  # ...and collects it itself
    assert sender.timing.inline_answers == 1


def test_packets_shown_missing_wake_the_sleeping_sender(
        rig: Rig) -> None:
    ep, sender, wake, dest = rig
    with ep._cond:
        sender.parked = True
    arrived = np.ones(11, dtype=bool)
    arrived[[3, 7]] = False
    _answer(ep, sender, 0, arrived, dest)
    assert wake.notified == 1
    assert sorted(sender.suspects) == [3, 7]
    assert sender.shown_missing[[3, 7]].all() and sender.shown_missing.sum() == 2


def test_an_awake_sender_takes_its_answer_itself(
        rig: Rig) -> None:
    ep, sender, wake, dest = rig
    _answer(ep, sender, 0, np.ones(11, dtype=bool), dest)
    assert wake.notified == 1
    assert len(sender.chunks) == 2 and sender.chunks[0].wait.answered > 0
    assert ep.in_flight == 22 and not sender.received.any()  # untouched until its thread collects
    sender._collect()
    assert ep.in_flight == 11 and sender.received[:11].all()
    assert sender.timing.inline_answers == 0


def _sleep_waiting_for_room(ep: Endpoint, sender: MessageSender) -> None:
    with ep._cond:  # as MessageSender._sleep leaves it: in line for a whole chunk of room, asleep
        ep._wait_room(sender._wake, sender.prio, 11, sender)
        sender.parked = True


def test_room_freed_for_a_sleeping_sender_sends_its_next_chunk_on_the_receive_thread(rig38: Rig) -> None:
    ep, sender, wake, dest = rig38
    assert len(sender.pending) == 16 and ep.in_flight == 22
    _sleep_waiting_for_room(ep, sender)
    # The answer's round-trip sample sets the pacing rate (2 x cwnd / srtt): an answer 4 ms late, as
    # on a loaded machine, would leave less than a 16-packet burst per ms, and the turn would wake
    # the sender instead (the next test). Here the pacer lets the chunk leave at once, however late.
    ep.window.min_rate = ep.window.max_rate
    time.sleep(0.01)
    _answer(ep, sender, 0, np.ones(11, dtype=bool), dest)
    # The window grew to 33 (slow start): room 22, a chunk is half of it, 16 packets: all that was left.
    assert [(c.first, c.nbits) for c in sender.chunks] == [(11, 11), (22, 16)]
    assert not sender.pending and ep.in_flight == 11 + 16
    assert sender.sent_once[:38].all()
    assert wake.notified == 0  # nothing woke the sender's thread
    assert sender.timing.inline_chunks == 1 and not sender.busy
    assert len(ep._room) == 0


def test_a_turn_the_pacer_would_delay_wakes_the_sender_instead(rig38: Rig) -> None:
    ep, sender, wake, dest = rig38
    _sleep_waiting_for_room(ep, sender)
    ep.pacer._next = time.perf_counter() + 60.0  # the next burst is not due: the receive thread never waits
    _answer(ep, sender, 0, np.ones(11, dtype=bool), dest)
    assert wake.notified == 1
    assert [c.first for c in sender.chunks] == [11] and len(sender.pending) == 16 and ep.in_flight == 11
    assert sender.timing.inline_chunks == 0 and not sender.busy


def test_an_awake_sender_gets_its_room_as_a_wake_up(rig38: Rig) -> None:
    ep, sender, wake, dest = rig38
    with ep._cond:
        ep._wait_room(sender._wake, sender.prio, 11, sender)  # in line, but its thread is not asleep
    _answer(ep, sender, 0, np.ones(11, dtype=bool), dest)
    assert wake.notified == 1  # the answer; the room is taken when the thread collects it
    sender._collect()
    assert wake.notified == 2  # the room its answer freed: its own turn, as a wake-up
    assert sender.timing.inline_chunks == 0 and len(sender.pending) == 16


@pytest.mark.parametrize("nbits", [1, 8, 11, 42, 1000])
def test_an_answer_showing_every_packet_is_read_as_all_arrived(nbits: int) -> None:
    from hosts.send_state import ChunkWait

    full = ChunkWait(5, nbits)
    assert full.fill(5, nbits, memoryview(pack_bitmap(np.ones(nbits, dtype=bool))), 0, 1, 1.0)
    assert full.full and full.bits is not None and full.bits.tolist() == [True] * nbits
    if nbits > 1:
        arrived = np.ones(nbits, dtype=bool)
        arrived[nbits // 2] = False
        gap = ChunkWait(5, nbits)
        assert gap.fill(5, nbits, memoryview(pack_bitmap(arrived)), 0, 1, 1.0)
        assert not gap.full and gap.bits is not None and gap.bits.tolist() == arrived.tolist()


def test_off_by_default_every_answer_wakes_its_sender() -> None:
    sink = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sink.bind(("127.0.0.1", 0))
    ep = Endpoint(worker_id=1, linger=0, window=Window(cwnd=22.0, max_cwnd=200.0))
    dest = sink.getsockname()
    values = np.linspace(-1.0, 1.0, 38 * COUNT, dtype=np.float32)
    key = MessageKey(1, 1, 0, 5, MsgType.GRADIENT)
    batch = packetize(values, kind=MsgType.GRADIENT, job_id=1, worker_id=1, tensor_id=5, iteration=0,
                      count=COUNT, prio_hint=3)
    sender = MessageSender(ep, dest, batch, key, seq_base=0, tensor_len=values.size, bound=0.1,
                           elements=values.size, is_part=False, prio=3)
    sender._wake = wake = _Counting(ep._lock)
    try:
        sender._fill()
        _sleep_waiting_for_room(ep, sender)
        _answer(ep, sender, 0, np.ones(11, dtype=bool), dest)
        assert wake.notified == 1 and len(sender.chunks) == 2 and ep.in_flight == 22
        assert sender.timing.inline_answers == 0 and sender.timing.inline_chunks == 0
    finally:
        sender._release_all()
        ep.close()
        sink.close()
