"""A trace rank's per-iteration totals (experiments.training.accounting)."""

from __future__ import annotations

from types import SimpleNamespace

from experiments.training.accounting import IterationTotals
from hosts.messages import MessageKey
from hosts.send_state import SendReport
from hosts.wire import MsgType


def _report(missing: int, lost_by_class: dict[int, int]) -> SendReport:
    return SendReport(key=MessageKey(1, 2, 3, 0, MsgType.GRADIENT), packets=10, payload_bytes=14_440, retransmitted=2, rounds=1,
                      probes=3, missing=missing, eligible=4, seconds=0.1, lost_by_class=lost_by_class,
                      eligible_elements=1_444, reordered=1, unconfirmed=0)


def test_sends_of_a_ring_and_a_push_add_up_the_same_way() -> None:
    ring, push = IterationTotals(), IterationTotals()
    ring.add_ring(SimpleNamespace(lost_elements=0, received_elements=3_610,
                                  sends=[_report(361, {120: 361}), _report(0, {})]), tensor_id=5)
    push.add_send(_report(361, {120: 361}))
    push.add_send(_report(0, {}))
    for totals in (ring, push):
        assert (totals.packets, totals.retransmitted, totals.bytes) == (20, 4, 28_880)
        assert (totals.eligible, totals.eligible_elements, totals.missing) == (8, 2_888, 361)
        assert totals.missing_by_class == {120: 361} and totals.reordered == 2
    assert ring.reduced == 3_610 and push.reduced == 0
