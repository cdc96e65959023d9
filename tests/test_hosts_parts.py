"""A tensor sent in parts (a worker's push of a layer's partitions) always completes at the
receiver, however late its data: a part ends only when an answer says the tensor is complete,
or when the receiver holds every packet of the part and a last-flagged probe was answered
since; a part whose last-flagged probes cannot complete the tensor resends what it misses.
Through hosts.relay on loopback: data held back longer than any reorder allowance, probes
that overtake data, loss within and over a part's bound."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future

import numpy as np

from hosts.endpoint import Endpoint
from hosts.relay import Relay
from hosts.send_state import SendReport
from hosts.wire import Flags, Header, MsgType
from tests.hosts_paths import datapath  # noqa: F401  (every test runs on both data paths)

COUNT = 360  # values per packet
ELEMENTS = 36_000  # 100 packets: part A is packets 0-49, part B 50-99
HALF = ELEMENTS // 2
SENDER_BOUNDS = {MsgType.GRADIENT: 0.05, MsgType.PARAMETER: 0.0}  # 900 values (2.5 packets) per part
LOST = {5, 6}  # part A's packets lost in their first transmission: within its bound
HELD_BACK = 1.5  # seconds; any reorder allowance here is 5 ms .. one SRTT on loopback


def _data(h: Header) -> bool:
    return h.msg_type <= MsgType.PARAMETER


def _lose_first(h: Header, data: bytes) -> int:
    return 0 if _data(h) and h.seq in LOST and not h.flags & Flags.RETRANSMIT else 1


def _late(seqs: set[int]) -> Callable[[Header], float]:
    def late(h: Header) -> float:
        return HELD_BACK if _data(h) and h.seq in seqs and not h.flags & Flags.RETRANSMIT else 0.0
    return late


def _values() -> np.ndarray:
    return np.random.default_rng(11).normal(size=ELEMENTS).astype(np.float32) + 0.5


def test_parts_a_receiver_cannot_complete_within_the_bound_resend_until_it_is_whole() -> None:
    """Every last-flagged probe finds the tensor open (the receiver keeps no bound: as when
    the rest of the tensor is still on its way). The old rule ended each part within its own
    bound, the tensor stayed open for ever and `receive` timed out."""
    values = _values()
    with Endpoint(worker_id=1, bounds=SENDER_BOUNDS, count=COUNT) as sender, \
            Endpoint(worker_id=2, bounds={MsgType.GRADIENT: 0.0, MsgType.PARAMETER: 0.0}, count=COUNT) as receiver, \
            Relay(receiver.address, _lose_first, overtake=2, late=_late({60, 61})) as relay:
        reports = [sender.send(relay.address, values[s:s + HALF], tensor_id=7, iteration=1, start=s,
                               tensor_len=ELEMENTS) for s in (0, HALF)]
        got = receiver.receive(timeout=30)
    assert got.key.tensor_id == 7 and got.received == ELEMENTS
    np.testing.assert_array_equal(got.values, values)
    a, b = reports
    assert a.missing == 0 and a.unconfirmed == 0
    assert a.retransmitted == len(LOST)  # what it missed, resent once, nothing else
    assert b.missing == 0 and b.unconfirmed == 0
    assert b.retransmitted <= 2  # the held-back packets at most (they are within its bound)
    assert relay.stats.overtaken > 0


def test_parts_at_once_with_held_back_data_and_loss_complete_and_report_exactly() -> None:
    """Both parts in flight at once; part A loses two packets (within its bound), part B's
    packets 60-64 are held back 1.5 s (over its bound: confirmed, then what exceeds the bound
    is resent) while probes overtake data. The tensor completes, every value it holds is the
    sent one, and the reports' `missing` add up to exactly what the receiver zero-filled."""
    values = _values()
    with Endpoint(worker_id=1, bounds=SENDER_BOUNDS, count=COUNT) as sender, \
            Endpoint(worker_id=2, bounds=SENDER_BOUNDS, count=COUNT) as receiver, \
            Relay(receiver.address, _lose_first, overtake=2, late=_late({60, 61, 62, 63, 64})) as relay:
        futures: list[Future[SendReport]] = [
            sender.send_async(relay.address, values[s:s + HALF], tensor_id=7, iteration=1, start=s,
                              tensor_len=ELEMENTS) for s in (0, HALF)]
        got = receiver.receive(timeout=30)
        reports = [f.result(timeout=30) for f in futures]
    assert got.key.tensor_id == 7
    zero_filled = ELEMENTS - got.received
    assert zero_filled <= 0.05 * ELEMENTS
    assert sum(r.missing for r in reports) == zero_filled
    assert all(r.unconfirmed == 0 for r in reports)
    held = got.values != 0  # values are N(0.5, 1) draws: none is exactly 0
    np.testing.assert_array_equal(got.values[held], values[held])
    assert int((~held).sum()) == zero_filled
    # Each part misses only what the path took from it: A its first-time losses, B its
    # held-back packets. B's loss over its own bound is resent down to that bound, unless the
    # tensor completes first within the receiver's bound for the whole tensor (36,000 values,
    # bound 1,800, asserted above), which ends both parts there: with all 5 of B's held-back
    # packets missing when A had resent its loss, or 3 of them beside A's 2 when, on a loaded
    # machine, A's resend came after.
    a, b = reports
    assert a.missing % COUNT == 0 and a.missing <= len(LOST) * COUNT
    assert b.missing % COUNT == 0 and b.missing <= 5 * COUNT
    assert relay.stats.overtaken > 0


def test_a_whole_message_the_receiver_does_not_complete_within_the_bound_is_resent() -> None:
    """The same rule for a message that is not a part: after `FINALS` last-flagged answers
    that do not complete it, the sender resends what it misses instead of ending (the old
    rule ended after three, leaving the message open at the receiver)."""
    values = _values()
    with Endpoint(worker_id=1, bounds=SENDER_BOUNDS, count=COUNT) as sender, \
            Endpoint(worker_id=2, bounds={MsgType.GRADIENT: 0.0, MsgType.PARAMETER: 0.0}, count=COUNT) as receiver, \
            Relay(receiver.address, _lose_first) as relay:
        report = sender.send(relay.address, values, tensor_id=4, iteration=2)
        got = receiver.receive(timeout=30)
    assert got.received == ELEMENTS
    np.testing.assert_array_equal(got.values, values)
    assert report.missing == 0 and report.unconfirmed == 0 and report.retransmitted == len(LOST)
    assert relay.stats.dropped == len(LOST)
