"""The DLCP transport's CPU per message and its runs' per-process CPU share, figures by hand."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from hosts.schedulers import Transfer
from simulator.fabric_model import CollectiveLink, PortModel
from simulator.fabric_runs import Run
from simulator.host_model import run_available
from simulator.run_model import DLCP_MESSAGE_CPU_S, cost_family, predict_run
from tests.sim_validate_helpers import ONE_LAYER

#: 1,000 frames a second of 1,000 bytes, nothing queued, no hops: 1 ms a packet on the wire.
PORT = PortModel(port_pps=1000.0, share=1.0, queued_packets=0.0, loss_rate=0.0, hops=0, payload_bytes=1000)
GSO, PORT_RATE = "2026-11-26 15:00:00 UTC", "2026-11-26 12:00:00 UTC"
TRACE_JOB = {"model": "m", "precision": "fp32", "b": 1.0, "k": 1.0}


def test_a_collective_holds_the_link_for_its_messages_at_the_busiest_host() -> None:
    message = Transfer(segments=(), nbytes=2000)
    # Ring of 2: 2 steps of 1,000 B, 2 ms on the wire; 2 packets sent and 2 received at
    # 1,000/s, 4 ms; a message sent and one received per step at 10 ms for both ends, 20 ms.
    ring = CollectiveLink(PORT, 2, "ring", host_pps=1000.0, message_s=0.010)
    assert ring.host_messages() == 2
    assert ring.seconds(message) == pytest.approx(0.002 + 0.004 + 0.020)
    # Star of a server and 4 workers: 4 pushes received and 4 pulls sent, 4 messages both ends.
    star = CollectiveLink(PORT, 5, "star", message_s=0.010)
    assert star.host_messages() == 4
    assert star.seconds(message) == pytest.approx(8 * 0.002 + 0.040)  # 8 x 2,000 B on the server's port
    # Without a cost per message (kernel TCP, or the term left out): the wire and the packets alone.
    assert CollectiveLink(PORT, 2, "ring", host_pps=1000.0).seconds(message) == pytest.approx(0.006)
    assert math.isinf(CollectiveLink(PORT, 2).host_pps)


def _trace_run(config: str, started: str, **extra: object) -> Run:
    return Run("s", "r", "tcp", config, 1000.0, 32, [0.01], job=dict(TRACE_JOB), started=started, **extra)


def test_the_gso_transports_messages_cost_their_measured_cpu_at_the_runs_share() -> None:
    def gap(run: Run) -> float:
        full = predict_run(run, ONE_LAYER, 0.0, draws=10).draws
        bare = predict_run(run, ONE_LAYER, 0.0, draws=10, without=frozenset({"message-cost"})).draws
        assert np.ptp(full - bare) == pytest.approx(0.0)
        return float((full - bare)[0])

    # One layer, the job one class above the background (no loss): a ring of 2 sends one
    # message of 2 steps, nothing overlaps it, so the iteration grows by 2 x 0.9 ms.
    assert DLCP_MESSAGE_CPU_S == pytest.approx(0.9e-3)
    assert gap(_trace_run("transport-qos", GSO)) == pytest.approx(0.0018)
    # At half a CPU (a recorded starvation of 0.5, no load), twice as long.
    assert gap(_trace_run("transport-qos", GSO, starvation=0.5)) == pytest.approx(0.0036)
    # Not measured on the earlier transports, and kernel TCP has no such term.
    assert gap(_trace_run("transport-qos", PORT_RATE)) == 0.0
    assert gap(_trace_run("ddp-tcp-qos", GSO)) == 0.0


def test_the_dlcp_transports_runs_take_their_per_process_share_and_a_family_of_their_own() -> None:
    record = {"starvation": 0.9, "load": 4.0, "cpu_use": 0.2, "cpu_wait": 0.2, "switch_cpu": {"s1": (0.3, 0.1)}}
    dlcp, tcp = _trace_run("dlcp", GSO, **record), _trace_run("ddp-tcp", GSO, **record)
    # DLCP: rank 0.2 / 0.4 = 0.5, switches 0.75: the slower, per process, calibrated apart.
    assert run_available(dlcp, "dlcp-recorded") == (pytest.approx(0.5), "per process")
    assert cost_family(dlcp, "dlcp-recorded") == "trace/dlcp+ecn (gso) [per process]"
    # Kernel TCP (packet work in softirq, charged to no process): the summed 0.9 leaves 0.1,
    # below the load's 2 / 4 = 0.5, in the family every sweep shares.
    assert run_available(tcp, "dlcp-recorded") == (pytest.approx(0.1), "summed")
    assert cost_family(tcp, "dlcp-recorded") == "trace/tcp"
    # Every run per process where recorded, calibrated apart; without the record, the summed figure.
    assert cost_family(tcp, "recorded-apart") == "trace/tcp [per process]"
    bare = _trace_run("dlcp", GSO, starvation=0.9, load=4.0)
    assert run_available(bare, "dlcp-recorded") == (pytest.approx(0.1), "summed")
    assert cost_family(bare, "dlcp-recorded") == "trace/dlcp+ecn (gso)"
    assert cost_family(dlcp, "summed") == "trace/dlcp+ecn (gso)"


def test_a_p3_rings_kernel_tcp_is_calibrated_in_a_family_of_its_own() -> None:
    record = {"starvation": 0.85, "load": 4.0, "cpu_use": 0.2, "cpu_wait": 0.05, "switch_cpu": {"s1": (0.3, 0.1)}}
    p3 = _trace_run("p3-tcp", GSO, **record)
    # On a ring (tcp's scenario), read on the summed figure: 0.15 left, below the load's 0.5.
    assert run_available(p3, "dlcp-recorded") == (pytest.approx(0.15), "summed")
    assert cost_family(p3, "dlcp-recorded") == "trace/tcp (p3 ring)"
    assert cost_family(p3, "dlcp-recorded", frozenset({"p3-threads"})) == "trace/tcp"
    # A star's P3 (incast: the server's figure) and DDP's buckets stay with kernel TCP; read per
    # process (0.2 / 0.25 = 0.8) it is calibrated apart already.
    assert cost_family(replace(p3, scenario="incast"), "dlcp-recorded") == "trace/tcp"
    assert cost_family(_trace_run("ddp-tcp", GSO, **record), "dlcp-recorded") == "trace/tcp"
    assert cost_family(p3, "recorded-apart") == "trace/tcp [per process]"
