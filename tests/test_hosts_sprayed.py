"""The transport on a sprayed, congested fabric, over loopback through the impairing relay:
probes that overtake data, ECN marks echoed to the sender, receivers that close early."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from hosts.endpoint import Endpoint, SendReport
from hosts.errors import TransportError
from hosts.pacing import Aimd
from hosts.packetize import packetize
from hosts.receiver import Reassembler
from hosts.relay import Relay
from hosts.wire import Flags, Header, MsgType, pack_header, unpack_header

BOUNDS = {MsgType.GRADIENT: 0.05, MsgType.PARAMETER: 0.01}
ELEMENTS = 36_000  # 100 packets of 360 values


def tensor(n: int = ELEMENTS, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=n).astype(np.float32) + 0.5


def endpoint(worker_id: int, **kw: object) -> Endpoint:
    return Endpoint(worker_id=worker_id, bounds=BOUNDS, count=360, **kw)  # type: ignore[arg-type]


def lose_first_time(seqs: set[int]):
    def verdict(h: Header, data: bytes) -> int:
        first = h.msg_type <= MsgType.PARAMETER and not h.flags & Flags.RETRANSMIT
        return 0 if first and h.seq in seqs else 1
    return verdict


def test_probe_overtaking_data_causes_no_retransmission() -> None:
    # The probe passes 10 % of the message (twice the bound): the first bitmap shows them
    # missing although they arrive right behind it.
    values = tensor()
    with endpoint(1) as sender, endpoint(2) as receiver, Relay(receiver.address, overtake=10) as relay:
        report = sender.send(relay.address, values, iteration=1)
        got = receiver.receive(timeout=5)
    assert relay.stats.overtaken >= 10
    assert report.retransmitted == 0 and report.rounds == 0 and report.probes >= 2
    assert not [h for h in relay.stats.seen if h.flags & Flags.RETRANSMIT]
    np.testing.assert_array_equal(got.values, values)


def test_without_confirmation_the_overtaken_data_would_be_resent() -> None:
    # The same path with the confirmation turned off: what the mechanism saves.
    with endpoint(1, max_confirms=0) as sender, endpoint(2) as receiver, \
            Relay(receiver.address, overtake=10) as relay:
        report = sender.send(relay.address, tensor(), iteration=1)
        receiver.receive(timeout=5)
    assert report.retransmitted == 10 and report.rounds == 1


def test_real_loss_above_the_bound_is_still_retransmitted_and_only_it() -> None:
    values = tensor(seed=1)
    lost = set(range(0, 80, 8))  # 10 packets really lost, none of them among the overtaken ones
    with endpoint(1) as sender, endpoint(2) as receiver, \
            Relay(receiver.address, lose_first_time(lost), overtake=10) as relay:
        report = sender.send(relay.address, values, iteration=2)
        got = receiver.receive(timeout=5)
    assert report.rounds == 1 and report.retransmitted == len(lost)
    retx = sorted(h.seq for h in relay.stats.seen if h.flags & Flags.RETRANSMIT and h.msg_type == MsgType.GRADIENT)
    assert retx == sorted(lost)
    np.testing.assert_array_equal(got.values, values)


def test_reassembler_echoes_ce_once_in_the_next_bitmap() -> None:
    batch = packetize(tensor(3600), kind=MsgType.GRADIENT, job_id=1, worker_id=4, tensor_id=2,
                      iteration=0, count=360)
    probe = pack_header(Header(msg_type=MsgType.PROBE, flags=0, job_id=1, worker_id=4, tensor_id=2,
                               iteration=0, offset=0, tensor_len=3600, count=0, mag_class=0,
                               prio_hint=7, seq=len(batch)))
    r = Reassembler(job_id=1, bounds=BOUNDS)
    for i in range(len(batch)):
        r.handle(bytes(batch.packet(i)), ("127.0.0.1", 1), ce=i == 3)
    first = r.handle(probe, ("127.0.0.1", 1))[0]
    second = r.handle(probe, ("127.0.0.1", 1))[0]
    assert unpack_header(first[0]).flags == Flags.ECN_ECHO
    assert unpack_header(second[0]).flags == 0
    assert (r.stats.ce_marked, r.stats.ecn_echoes) == (1, 1)


def test_ce_marks_are_echoed_and_cut_the_sending_rate() -> None:
    aimd = Aimd(rate=40_000, increase=5_000, decrease=0.5)
    with endpoint(1, aimd=aimd) as sender, endpoint(2) as receiver, \
            Relay(receiver.address, mark_ce=lambda h: h.seq % 10 == 0 and h.iteration == 2) as relay:
        calm = sender.send(relay.address, tensor(), iteration=1)
        after_calm = aimd.rate
        marked = sender.send(relay.address, tensor(), iteration=2)
        receiver.receive(timeout=5)
        got = receiver.receive(timeout=5)
    assert calm.ecn_echoes == 0 and after_calm == 45_000  # additive increase without marks
    assert relay.stats.ce_marked == 10 and receiver.reassembler.stats.ce_marked == 10
    assert marked.ecn_echoes >= 1 and marked.retransmitted == 0
    assert aimd.rate == 22_500  # halved once for the message, not once per mark
    assert got.received == ELEMENTS  # marked packets are delivered, not lost


def _send_in_thread(sender: Endpoint, dest: tuple[str, int], values: np.ndarray) -> tuple[threading.Thread, list]:
    outcome: list[SendReport | Exception] = []

    def run() -> None:
        try:
            outcome.append(sender.send(dest, values, iteration=3))
        except TransportError as exc:
            outcome.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


@pytest.mark.parametrize("linger", [0.5, 0.0])
def test_receiver_closing_right_after_receive_still_answers_the_probe(linger: float) -> None:
    # The probe is held back 100 ms, as a congested path does, so it reaches the receiver
    # after the message completed on data and the application closed the endpoint.
    values = tensor(seed=2)
    with endpoint(1, probe_timeout=0.05, max_probes=3) as sender:
        receiver = endpoint(2, linger=linger)
        with Relay(receiver.address, control_delay=0.1) as relay:
            thread, outcome = _send_in_thread(sender, relay.address, values)
            try:
                got = receiver.receive(timeout=5)
            finally:
                receiver.close()
            thread.join(10)
    np.testing.assert_array_equal(got.values, values)
    if linger:
        assert isinstance(outcome[0], SendReport) and outcome[0].retransmitted == 0
    else:  # without lingering the sender never hears back
        assert isinstance(outcome[0], TransportError) and "no bitmap" in str(outcome[0])
