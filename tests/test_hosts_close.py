"""A receiver that closes right after its last message completes stays until the message's
sender knows it (hosts.inbox.Finals): a sender ends a message only on an answer saying it
completed, so a receiver gone before the sender's last probe arrived left that sender
re-probing a closed port until its peer timeout (a trace job's all-reduce waited 120 s for a
neighbour that had already completed it, and the job died)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from hosts.endpoint import Endpoint
from hosts.errors import PeerGoneError
from hosts.inbox import Finals
from hosts.messages import Delivered, MessageKey
from hosts.pacing import RttEstimator
from hosts.relay import Relay
from hosts.ring import RingAllReduce
from hosts.wire import HEADER_STRUCT, VERSION, Flags, Header, MsgType
from tests.hosts_paths import datapath  # noqa: F401  (both data paths)

RELIABLE = {MsgType.GRADIENT: 0.0, MsgType.PARAMETER: 0.0}


def test_a_sender_whose_last_probes_were_lost_completes_after_the_receiver_was_told_to_close() -> None:
    """Every probe of the second message is lost for its first 0.6 s, longer than the quiet
    time a receiver used to linger: the receiver completes it on data, hands it over and is
    closed at once; the sender's next probe must still be answered (before, the send failed
    with PeerGoneError after its peer timeout: checked on the code before this test)."""
    drop_until = [0.0]
    lost: list[float] = []

    def verdict(header: Header, data: bytes) -> int:
        if header.msg_type == MsgType.PROBE and header.iteration == 2 and time.monotonic() < drop_until[0]:
            lost.append(time.monotonic())
            return 0
        return 1

    values = np.arange(1000, dtype=np.float32)  # 3 packets: one chunk, one probe
    with Endpoint(worker_id=1, bounds=RELIABLE, peer_timeout=10, max_rto=0.5) as sender:
        receiver = Endpoint(worker_id=2, bounds=RELIABLE, max_rto=4.0)
        try:
            with Relay(receiver.address, verdict) as relay:
                first = sender.send(relay.address, values, tensor_id=3, iteration=1)
                assert first.missing == 0
                receiver.take(MessageKey(1, 1, 1, 3, MsgType.GRADIENT), timeout=30)
                drop_until[0] = time.monotonic() + 0.6
                future = sender.send_async(relay.address, values, tensor_id=3, iteration=2)
                got = receiver.take(MessageKey(1, 1, 2, 3, MsgType.GRADIENT), timeout=30)
                receiver.close()
                report = future.result(timeout=30)
        finally:
            receiver.close()
    np.testing.assert_array_equal(got.values, values)
    assert lost, "the relay lost no probe: the case was not made"
    assert report.missing == 0 and report.unconfirmed == 0
    assert report.probes > len(lost)  # a probe after the losses was answered


def test_a_sender_still_waiting_for_a_receiver_that_closed_is_told_so_at_once() -> None:
    """Every probe of the message is lost: the receiver completes it on data, waits for the
    sender's question as long as it may (max_rto + linger), then closes and says goodbye. The
    sender fails at its next probe timer, naming the peer that closed, instead of after its
    peer timeout (60 s here) of silence."""

    def verdict(header: Header, data: bytes) -> int:
        return 0 if header.msg_type == MsgType.PROBE and header.iteration == 2 else 1

    values = np.arange(1000, dtype=np.float32)
    with Endpoint(worker_id=1, bounds=RELIABLE, peer_timeout=60, max_rto=0.5) as sender:
        receiver = Endpoint(worker_id=2, bounds=RELIABLE, max_rto=0.5)
        try:
            with Relay(receiver.address, verdict) as relay:
                where = relay.address
                sender.send(where, values, tensor_id=3, iteration=1)
                future = sender.send_async(where, values, tensor_id=3, iteration=2)
                receiver.take(MessageKey(1, 1, 2, 3, MsgType.GRADIENT), timeout=30)
                receiver.close()
                with pytest.raises(PeerGoneError) as caught:
                    future.result(timeout=30)
        finally:
            receiver.close()
    assert caught.value.peer == where
    assert "closed its endpoint" in str(caught.value) and "iteration 2" in str(caught.value)


def test_a_two_rank_ring_whose_neighbour_closes_at_once_completes() -> None:
    """The trace job's case: rank 0 completes its all-reduce when rank 1's all-gather chunk
    arrives and closes at once, while the probes of that chunk are lost for 0.6 s (rank 1's
    inline send waits for their answer). Rank 1's all-reduce completes with the exact sum
    (before, it waited for a closed port until its peer timeout)."""
    first_seen: list[float] = []

    def verdict(header: Header, data: bytes) -> int:
        if header.msg_type == MsgType.PROBE and header.iteration == 1:  # step 1: the all-gather chunk
            first_seen.append(time.monotonic())
            return 0 if time.monotonic() < first_seen[0] + 0.6 else 1
        return 1

    rank0 = Endpoint(worker_id=0, bounds=RELIABLE, max_rto=4.0)
    rank1 = Endpoint(worker_id=1, bounds=RELIABLE, peer_timeout=10, max_rto=0.5)
    values = [np.random.default_rng(r).normal(size=5_000).astype(np.float32) for r in (0, 1)]
    try:
        with Relay(rank0.address, verdict) as relay:
            rings = [RingAllReduce(rank0, 0, [rank0.address, rank1.address], inline_sends=True),
                     RingAllReduce(rank1, 1, [relay.address, rank1.address], inline_sends=True)]
            later = rings[1].allreduce_async(values[1], iteration=0, timeout=10)
            mine, _ = rings[0].allreduce(values[0], iteration=0, timeout=10)
            rank0.close()
            theirs, report = later.result(timeout=30)
            rings[1].close()
    finally:
        rank0.close()
        rank1.close()
    assert len(first_seen) > 1, "rank 1's all-gather chunk was not probed again: the case was not made"
    np.testing.assert_allclose(theirs, values[0] + values[1], rtol=1e-6)
    np.testing.assert_array_equal(theirs, mine)
    assert all(s.missing == 0 for s in report.sends)


def _final(key: MessageKey) -> bytes:
    return HEADER_STRUCT.pack((VERSION << 4) | MsgType.BITMAP, Flags.LAST, key.job_id, key.worker_id, key.tensor_id,
                              key.iteration, 0, 100, 1, int(key.kind), 7, 5) + b"\x01"


def _delivered(key: MessageKey, source: tuple[str, int]) -> Delivered:
    return Delivered(key=key, values=np.zeros(100, dtype=np.float32), received=100, source=source)


def test_what_a_closing_endpoint_owes_and_for_how_long() -> None:
    peer, bare = ("10.0.0.2", 19600), ("10.0.0.3", 19600)
    a, b = MessageKey(1, 2, 7, 1, MsgType.GRADIENT), MessageKey(1, 3, 7, 1, MsgType.GRADIENT)
    finals = Finals()
    rtts: dict[tuple[str, int], RttEstimator] = {}
    # a sender of bare data (it never probed) is not waited for
    finals.completed([_delivered(b, bare)], now=100.0)
    assert finals.owed(100.1, rtts, linger=0.25, max_rto=2.0) is None
    # a prober's message completed on data: owed until it asks, for at most max_rto + linger
    finals.replied(HEADER_STRUCT.pack((VERSION << 4) | MsgType.BITMAP, 0, 1, 2, 1, 6, 0, 100, 1, 0, 7, 4) + b"\x01",
                   peer, now=100.0)
    finals.completed([_delivered(a, peer)], now=100.0)
    assert "not asked yet" in (finals.owed(102.0, rtts, linger=0.25, max_rto=2.0) or "")
    assert finals.owed(102.3, rtts, linger=0.25, max_rto=2.0) is None
    # answered (final): owed while its sender could ask again, at least linger
    finals.replied(_final(a), peer, now=110.0)
    assert finals.owed(110.2, rtts, linger=0.25, max_rto=2.0) is not None
    assert finals.owed(110.3, rtts, linger=0.25, max_rto=2.0) is None
    # ... two RTOs of the endpoint's estimate to that sender (capped at max_rto)
    rtt = rtts[peer] = RttEstimator()
    rtt.sample(0.4)  # rto = 0.4 + 4 x 0.2 = 1.2 s
    assert finals.owed(110.3, rtts, linger=0.25, max_rto=2.0) is not None
    assert finals.owed(111.9, rtts, linger=0.25, max_rto=2.0) is not None
    assert finals.owed(112.1, rtts, linger=0.25, max_rto=2.0) is None
    # a completion answered at once (a last-flagged probe completed it) owes no first answer
    c = MessageKey(1, 2, 8, 1, MsgType.GRADIENT)
    finals.replied(_final(c), peer, now=120.0)
    finals.completed([_delivered(c, peer)], now=120.0)
    del rtts[peer]
    assert finals.owed(120.3, rtts, linger=0.25, max_rto=2.0) is None
