"""A message completed within its bound ends at the answer that completed it: that answer
shows what the receiver completed with, so no further round trip asks again (it cost every
message with loss one round trip on its ring step's path, experiments/README.md)."""

from __future__ import annotations

import numpy as np

from hosts.endpoint import Endpoint
from hosts.relay import Relay
from hosts.wire import Flags, Header, MsgType
from tests.hosts_paths import datapath  # noqa: F401  (every test runs on both data paths)

BOUNDS = {MsgType.GRADIENT: 0.05, MsgType.PARAMETER: 0.0}


def lose_first_time(seqs: set[int]):
    def verdict(h: Header, data: bytes) -> int:
        first = h.msg_type <= MsgType.PARAMETER and not h.flags & Flags.RETRANSMIT
        return 0 if first and h.seq in seqs else 1
    return verdict


def test_loss_within_the_bound_ends_at_the_completing_answer_and_is_reported_exactly() -> None:
    values = np.random.default_rng(3).normal(size=36_000).astype(np.float32) + 0.5  # 100 packets of 360
    lost = {3, 20, 47}
    with Endpoint(worker_id=1, bounds=BOUNDS, count=360) as sender, \
            Endpoint(worker_id=2, bounds=BOUNDS, count=360) as receiver, \
            Relay(receiver.address, lose_first_time(lost)) as relay:
        report = sender.send(relay.address, values, iteration=1)
        got = receiver.receive(timeout=10)
    assert relay.stats.dropped == len(lost)
    zero_filled = int(np.sum(got.values != values))
    assert report.retransmitted == 0 and report.unconfirmed == 0
    assert zero_filled == len(lost) * 360 == report.missing
    # Last-flagged probes, by the range they ask about (a probe re-sent after its timeout asks
    # the same): one over the whole message, whose answer completed it. Before, a second one
    # over the missing packets (3..47) asked what the first answer had already shown.
    last = {(h.offset, h.seq) for h in relay.stats.seen if h.msg_type == MsgType.PROBE and h.flags & Flags.LAST}
    assert last == {(0, 100)}
    assert report.timing is not None and report.timing.finals == 1
