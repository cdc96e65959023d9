"""`sim validate` for the quarter port rate on hand-worked figures: a kernel-TCP ring's own
ACKs among its port's packets, the lossy-link control (loss 0) and the error per port rate."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.errors import SimulatorError
from simulator.fabric_model import port_model, with_own_acks
from simulator.fabric_runs import Run
from simulator.run_model import predict_run
from simulator.validate_report import HEADER, by_port
from tests.sim_validate_helpers import ONE_LAYER


def test_delayed_acks_leave_the_data_two_thirds_of_the_port() -> None:
    port = port_model(port_pps=5000, queue_packets=51, background="none", job_above_background=False,
                      payload_bytes=1448)
    acked = with_own_acks(port, 2)
    assert acked.share == pytest.approx(2 / 3)
    assert acked.bytes_per_s == pytest.approx(5000 * 1448 * 2 / 3)  # 4,826,667 B/s of data
    assert with_own_acks(port, 1).share == pytest.approx(0.5)  # an ACK per segment: half
    with pytest.raises(SimulatorError, match="at least one segment"):
        with_own_acks(port, 0)


def test_a_tcp_ring_waits_for_its_acks_and_the_dlcp_transport_does_not() -> None:
    # The one-layer job's 2,888 bytes, a ring of two: 2,888 bytes through the busiest port.
    # gloo: 2,888 / 1,448 = 1.9945 segments at 1,000 packets/s take 1.9945 ms of the port;
    # with an ACK per two of them 1.5 times as long: 0.9972 ms more.
    tcp = Run("s", "r", "lossy-0", "gloo", 1000.0, 32, [0.01])
    full = predict_run(tcp, ONE_LAYER, 0.0, draws=10).draws
    plain = predict_run(tcp, ONE_LAYER, 0.0, draws=10, without=frozenset({"tcp-acks"})).draws
    assert full - plain == pytest.approx(np.full(10, 2888 / 1448 / 1000 * 0.5))
    # The DLCP transport (qos): no such term.
    dlcp = Run("s", "r", "lossy-0", "qos", 1000.0, 32, [0.01])
    assert predict_run(dlcp, ONE_LAYER, 0.0, draws=10).draws == pytest.approx(
        predict_run(dlcp, ONE_LAYER, 0.0, draws=10, without=frozenset({"tcp-acks"})).draws)


def test_the_loss_free_control_is_the_lossy_scenario_without_its_loss() -> None:
    # lossy-0: no background, a ring; by hand for the DLCP transport at 1,000 packets/s:
    # 2,888 bytes at 1,444 B a packet hold the port 2 ms; two ring steps of 3 hops, 3 ms each;
    # forward 1 ms + backward 1 ms + 8 ms of all-reduce after it = 10 ms, no loss to wait for.
    run = Run("s", "r", "lossy-0", "qos", 1000.0, 32, [0.01])
    assert predict_run(run, ONE_LAYER, 0.0, draws=10).draws == pytest.approx(np.full(10, 0.010))


def test_the_table_gives_the_median_error_per_port_rate() -> None:
    def row(port: str, error: str) -> list[str]:
        cells = ["-"] * len(HEADER)
        cells[HEADER.index("port (pkt/s)")], cells[HEADER.index("p50 error")] = port, error
        return cells

    # 5,000: |+10%|, |-20%|, |+4%| -> 10%; 20,000: |-3%|, |+5%| -> 4%; out of reach left out.
    rows = [row("5,000", "+10%"), row("20,000", "-3%"), row("5,000", "-20%"), row("20,000", "+5%"),
            row("5,000", "+4%"), row("1,000", "out of reach")]
    assert by_port(rows) == "By port rate: 5,000 pkt/s 10% over 3, 20,000 pkt/s 4% over 2."
    assert by_port([]) == ""
