"""`sim validate`: the background TCP flows' ACKs among the packets the software switches
forward, on hand-worked figures."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from simulator.fabric_runs import DELAYED_ACK_SEGMENTS, Run
from simulator.run_model import predict_run
from tests.sim_validate_helpers import ONE_LAYER, one_run, ring_record

RR = {"protocol": "rr", "goodput_mbps": 0.5, "fct_s": [0.01]}


@pytest.mark.parametrize(("second", "acks"), [
    # 11.584 Mbit/s of TCP = 1,000 segments of 1,448 B a second, 500 ACKs; a UDP flow's 500
    # packets a second are answered by none; a second TCP flow's 500 by 250 more.
    ({"protocol": "udp", "goodput_mbps": 5.792}, 500.0),
    ({"protocol": "tcp", "goodput_mbps": 5.792}, 750.0),
])
def test_a_run_counts_its_background_in_packets_and_an_ack_per_two_tcp_segments(
        tmp_path: Path, second: dict[str, object], acks: float) -> None:
    run = one_run(tmp_path, ring_record("tcp", "gloo", port_pps=20000.0,
                                        background=[{"protocol": "tcp", "goodput_mbps": 11.584}, second, RR]))
    assert DELAYED_ACK_SEGMENTS == 2
    assert run.background_pps == pytest.approx(1500.0)  # rr is not a long flow
    assert run.background_ack_pps == pytest.approx(acks)
    assert run.rr_s == 0.01


def test_the_acks_come_off_the_switches_budget_and_can_be_left_out() -> None:
    # 1 ms a packet with the whole CPU: 1,000 packets/s. 200 data packets and 100 ACKs a second
    # leave 700; without the ACKs 800; without the background 1,000. The ring of two handles 4
    # packets at its busiest host: 4/700, 4/800 and 4/1,000 s on top of the same wire time.
    run = Run("s", "r", "tcp", "qos", 1000.0, 32, [0.01], background_pps=200.0, background_ack_pps=100.0)
    full = predict_run(run, ONE_LAYER, 1e-3, draws=10).draws
    no_acks = predict_run(run, ONE_LAYER, 1e-3, draws=10, without=frozenset({"background-acks"})).draws
    none = predict_run(run, ONE_LAYER, 1e-3, draws=10, without=frozenset({"background"})).draws
    assert full - no_acks == pytest.approx(np.full(10, 4 / 700 - 4 / 800))
    assert no_acks - none == pytest.approx(np.full(10, 4 / 800 - 4 / 1000))
    # Max-min still leaves the job half: 450 data packets and 225 ACKs would leave 325, so 500.
    busy = Run("s", "r", "tcp", "qos", 1000.0, 32, [0.01], background_pps=450.0, background_ack_pps=225.0)
    assert predict_run(busy, ONE_LAYER, 1e-3, draws=10).draws - none == pytest.approx(np.full(10, 4 / 500 - 4 / 1000))
