"""A parameter server's pushes in the trace experiment are parts of a layer (the DLCP
scheduler's partitions). On the sprayed fabric an incast stalled: the server held 72,904 of a
layer's 80,846 values (within the bound) and every part's sender had ended, so no last probe
came to complete it. The first test: a layer in parts completes through probes that overtake
data and a loss within the bound (it passes with the old rule too: the relay cannot hold one
part's data back behind another's probe). The second tests the rule that changed: a part
still missing packets gives them its reorder allowance and a final probe before it ends
(fails with the old rule)."""

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
        for start in (0, half):  # as a worker pushes a layer's partitions
            sender.send(relay.address, values[start:start + half], tensor_id=7, iteration=1, start=start,
                        tensor_len=ELEMENTS)
        got = receiver.receive(timeout=10)  # the old rule: TransportError, the layer never completed
    assert relay.stats.overtaken >= 2
    assert got.key.tensor_id == 7 and got.values.size == ELEMENTS
    # what the receiver holds: everything but the two packets the relay dropped, zero-filled
    lost = np.zeros(ELEMENTS, dtype=bool)
    dropped = [h for h in relay.stats.seen if h.msg_type <= MsgType.PARAMETER and h.seq in LOST
               and not h.flags & Flags.RETRANSMIT]
    assert len(dropped) == 2
    for h in dropped:
        lost[h.offset:h.offset + h.count] = True
    assert got.received == ELEMENTS - lost.sum()
    np.testing.assert_array_equal(got.values[~lost], values[~lost])
    assert not got.values[lost].any()


def test_a_part_missing_packets_waits_for_them_before_trusting_a_later_part() -> None:
    """The rule itself (hosts.sender.MessageSender._decide): a part whose last probe was
    answered with its last two packets missing (within its bound; on a sprayed fabric they may
    still be on their way) does not end at once: it waits its reorder allowance and asks again
    with a last-flagged probe; after that answer it may end. A part the receiver holds whole
    ends at once. The old rule ended the first case at once."""
    from hosts.messages import MessageKey
    from hosts.packetize import packetize
    from hosts.sender import MessageSender

    values = np.ones(ELEMENTS // 2, dtype=np.float32)
    with Endpoint(worker_id=1, bounds=BOUNDS, count=COUNT, reorder_grace=0.01) as ep:
        key = MessageKey(ep.job_id, 1, 1, 7, MsgType.GRADIENT)
        batch = packetize(values, kind=MsgType.GRADIENT, job_id=ep.job_id, worker_id=1, tensor_id=7, iteration=1,
                          count=COUNT, start=0, tensor_len=ELEMENTS)
        part = MessageSender(ep, ("127.0.0.1", 9), batch, key, seq_base=0, tensor_len=ELEMENTS,
                             bound=BOUNDS[MsgType.GRADIENT], elements=values.size, is_part=True, prio=0)
        assert part.n == 50
        part.pending.clear()
        part.received[:-2] = True  # 720 values missing, within the part's bound of 900
        part.last_answered = True
        assert part._decide() is False and part.finals == 1 and part.chunks[-1].last
        part._release_all()  # the final probe was answered
        part.last_answered = True  # the final probe's answer: the two packets are really lost
        assert part._decide() is True
        whole = MessageSender(ep, ("127.0.0.1", 9), batch, key, seq_base=0, tensor_len=ELEMENTS,
                              bound=BOUNDS[MsgType.GRADIENT], elements=values.size, is_part=True, prio=0)
        whole.pending.clear()
        whole.received[:] = True
        whole.last_answered = True
        assert whole._decide() is True and whole.finals == 0
