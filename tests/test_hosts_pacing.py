"""AIMD steps and the pacer's rate."""

from __future__ import annotations

import time

from hosts.pacing import Aimd, Pacer, RttEstimator, Window


def test_aimd_adds_and_halves_within_limits() -> None:
    aimd = Aimd(rate=10_000, min_rate=1_000, max_rate=12_000, increase=1_500, decrease=0.5)
    aimd.on_success()
    assert aimd.rate == 11_500
    aimd.on_success()
    assert aimd.rate == 12_000
    for _ in range(5):
        aimd.on_congestion()
    assert aimd.rate == 1_000


def test_pacer_keeps_to_the_rate() -> None:
    pacer = Pacer(Aimd(rate=20_000))
    sent = 0
    started = time.perf_counter()
    while sent < 4_000:
        sent += pacer.burst()
    seconds = time.perf_counter() - started
    # 4 000 packets at 20 000/s take at least 0.2 s; no upper bound: a loaded machine
    # oversleeps each 1 ms burst (a run under a load of 16 took 5.6 s)
    assert seconds >= 0.17
    slow = Pacer(Aimd(rate=500))
    assert slow.burst() == 1 and slow.burst() == 1  # below one packet per burst: one, then a wait
    started = time.perf_counter()
    slow.burst()
    assert time.perf_counter() - started >= 0.0015


def test_rtt_estimator_follows_rfc_6298_and_backs_off_to_the_cap() -> None:
    rtt = RttEstimator(initial_rto=0.2, min_rto=0.01, max_rto=1.0)
    assert rtt.rto == 0.2  # no sample yet
    rtt.sample(0.1)
    assert (rtt.srtt, rtt.rttvar) == (0.1, 0.05) and abs(rtt.rto - 0.3) < 1e-12  # SRTT + 4 RTTVAR
    rtt.sample(0.02)
    assert abs(rtt.rttvar - (0.75 * 0.05 + 0.25 * 0.08)) < 1e-12
    assert abs(rtt.srtt - (0.875 * 0.1 + 0.125 * 0.02)) < 1e-12
    assert [round(rtt.backed_off(a) / rtt.rto) for a in (1, 2)] == [1, 2]  # doubled per attempt
    assert rtt.backed_off(3) == rtt.backed_off(10) == 1.0  # 4 x 0.32 s: capped


def test_window_slow_start_then_additive_increase_and_one_cut_per_round_trip() -> None:
    window = Window(cwnd=10, rtt=RttEstimator())
    window.rtt.sample(0.01)  # type: ignore[union-attr]
    window.on_ack(10)
    assert window.cwnd == 20 and window.slow_start
    assert window.on_congestion(now=100.0) and window.cwnd == 10 and window.ssthresh == 10
    assert not window.on_congestion(now=100.005)  # within one SRTT of the last cut
    assert window.on_congestion(now=100.02) and window.cwnd == 5
    window.on_ack(5)
    assert window.cwnd == 6 and not window.slow_start  # one packet per window
    for second in range(20):
        window.on_congestion(now=200.0 + second)
    assert window.cwnd == window.min_cwnd * 2  # the floor: a chunk of one packet can always go
    assert window.rate <= window.max_rate


def test_a_cut_is_undone_only_when_no_other_came_since() -> None:
    w = Window(cwnd=100.0)
    assert w.on_congestion(now=10.0)
    token = (100.0, float("inf"), w.decreases)
    assert w.cwnd == 50.0 and w.undo(*token)
    assert (w.cwnd, w.ssthresh, w.decreases, w.undone) == (100.0, float("inf"), 0, 1)
    assert w.on_congestion(now=20.0) and w.on_congestion(now=30.0)  # a second cut came since the first
    assert not w.undo(50.0, 50.0, 1) and w.decreases == 2
