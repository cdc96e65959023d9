"""A parameter server's pushes in the trace experiment are parts of a layer (the DLCP
scheduler's partitions). On the sprayed fabric an incast stalled: the server held 72,904 of a
layer's 80,846 values (within the bound) and every part's sender had ended, so no last probe
came to complete it. The first test: a layer in parts completes through probes that overtake
data and a loss within the bound. The second tests the rule that ends a part (tests/test_hosts_parts.py
tests it through the relay): a part ends only held whole or with the tensor complete, and
resends what it misses after its final probes."""

from __future__ import annotations

import numpy as np

from hosts.endpoint import Endpoint
from hosts.relay import Relay
from hosts.wire import Flags, Header, MsgType
from tests.hosts_paths import datapath  # noqa: F401  (every test runs on both data paths)

COUNT = 360  # values per packet
ELEMENTS = 36_000  # 100 packets; two parts of 50
BOUNDS = {MsgType.GRADIENT: 0.05, MsgType.PARAMETER: 0.0}
LOST = {5, 6}  # part 1's packets lost for good: 720 values, within both parts' bound (900)


def _lose_first_part_packets(h: Header, data: bytes) -> int:
    first = h.msg_type <= MsgType.PARAMETER and not h.flags & Flags.RETRANSMIT
    return 0 if first and h.seq in LOST else 1


def test_a_layer_sent_in_parts_completes_when_the_last_probe_overtakes_its_data() -> None:
    values = np.random.default_rng(3).normal(size=ELEMENTS).astype(np.float32) + 0.5
    half = ELEMENTS // 2
    with Endpoint(worker_id=1, bounds=BOUNDS, count=COUNT) as sender, \
            Endpoint(worker_id=2, bounds=BOUNDS, count=COUNT) as receiver, \
            Relay(receiver.address, _lose_first_part_packets, overtake=2) as relay:
        reports = [sender.send(relay.address, values[start:start + half], tensor_id=7, iteration=1, start=start,
                               tensor_len=ELEMENTS) for start in (0, half)]  # as a worker pushes partitions
        got = receiver.receive(timeout=10)  # the rule before b9d014c: TransportError, never completed
    assert relay.stats.overtaken >= 2
    assert got.key.tensor_id == 7 and got.values.size == ELEMENTS
    dropped = [h for h in relay.stats.seen if h.msg_type <= MsgType.PARAMETER and h.seq in LOST
               and not h.flags & Flags.RETRANSMIT]
    assert len(dropped) == 2
    # The first part ends before the second is sent: its last-flagged probes cannot complete
    # the tensor, so it resends its two lost packets (and only them); the receiver holds all.
    assert [r.retransmitted for r in reports] == [2, 0]
    assert [r.missing for r in reports] == [0, 0]
    assert got.received == ELEMENTS
    np.testing.assert_array_equal(got.values, values)


def test_a_part_ends_only_held_whole_or_complete_and_resends_after_its_final_probes() -> None:
    """The rule itself (hosts.sender.MessageSender._decide): a part whose answers show its
    last two packets missing (within its bound; on a sprayed fabric they may still be on their
    way) asks with a last-flagged probe after its reorder allowance, `FINALS` times; when no
    answer said the tensor is complete, it resends the two packets (no window cut) instead of
    ending, so the tensor cannot stay open for ever. A part the receiver holds whole ends once
    a last-flagged probe was answered. The rule of b9d014c ended the first after one probe."""
    from hosts.messages import MessageKey
    from hosts.packetize import packetize
    from hosts.sender import FINALS, MessageSender

    values = np.ones(ELEMENTS // 2, dtype=np.float32)
    with Endpoint(worker_id=1, bounds=BOUNDS, count=COUNT, reorder_grace=0.01) as ep:
        key = MessageKey(ep.job_id, 1, 1, 7, MsgType.GRADIENT)
        batch = packetize(values, kind=MsgType.GRADIENT, job_id=ep.job_id, worker_id=1, tensor_id=7, iteration=1,
                          count=COUNT, start=0, tensor_len=ELEMENTS)

        def part() -> MessageSender:
            return MessageSender(ep, ("127.0.0.1", 9), batch, key, seq_base=0, tensor_len=ELEMENTS,
                                 bound=BOUNDS[MsgType.GRADIENT], elements=values.size, is_part=True, prio=0)

        lacking = part()
        assert lacking.n == 50 and FINALS == 2
        lacking.pending.clear()
        lacking.received[:-2] = True  # 720 values missing, within the part's bound of 900
        cwnd = ep.window.cwnd
        for asked in range(1, FINALS + 1):
            assert lacking._decide() is False and lacking.finals == asked and lacking.chunks[-1].last
            lacking._release_all()  # the final probe was answered: not complete
        assert lacking._decide() is False  # resends instead of ending
        assert sorted(lacking.pending.pop(len(lacking.pending)).tolist()) == [48, 49]
        assert lacking.rounds == 1 and lacking.finals == 0 and ep.window.cwnd == cwnd
        whole = part()
        whole.pending.clear()
        whole.received[:] = True
        assert whole._decide() is False and whole.finals == 1 and whole.chunks[-1].last
        whole._release_all()
        assert whole._decide() is True
