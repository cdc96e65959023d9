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
    # below one packet per burst: one packet each, 2 ms apart. Measured over three bursts from
    # the pacer's start, as an oversleep of one wait restarts the spacing from the late burst
    # (idle time earns no credit) and can only add time
    started = time.perf_counter()
    slow = Pacer(Aimd(rate=500))
    assert [slow.burst(), slow.burst(), slow.burst()] == [1, 1, 1]
    assert time.perf_counter() - started >= 0.0039


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


def test_ecn_echoes_cut_by_half_the_marked_share_as_dctcp() -> None:
    # RFC 8257: alpha starts at 1 (the first echo halves), then moves by 1/16 per round
    # trip towards the share of acknowledged packets that came back with an echo.
    w = Window(cwnd=100.0, rtt=RttEstimator())
    w.rtt.sample(0.01, now=0.0)
    assert w.on_ecn(now=1.0) and w.cwnd == 50.0
    w.on_marks(100, 0, now=2.0)  # a round trip without marks
    assert abs(w.alpha - 15 / 16) < 1e-12
    for k in range(40):
        w.on_marks(100, 10, now=3.0 + k)  # 10 % marked, round trip after round trip
    assert 0.1 < w.alpha < 0.2  # alpha = 0.1 + (15/16 - 0.1) (15/16)^40
    w.cwnd, w.ssthresh = 100.0, float("inf")
    assert w.on_ecn(now=100.0) and abs(w.cwnd - 100.0 * (1 - w.alpha / 2)) < 1e-9 and w.cwnd > 90
    assert not w.on_ecn(now=100.005)  # at most once per round trip
    assert w.on_congestion(now=101.0) and abs(w.cwnd - 100.0 * (1 - w.alpha / 2) / 2) < 1e-9  # loss: half


def test_with_a_known_port_rate_slow_answers_stretch_the_flight_not_the_rate() -> None:
    # A path whose least round trip is 2 ms, answers taking 10 ms on average (a busy
    # receiver): 40 packets of window pace at 2 x 40 / 2 ms, capped at the port's 20,000/s,
    # and up to 4 x 40 packets may wait for answers (srtt / min_rtt = 5, capped at 4).
    w = Window(cwnd=40.0, max_rate=20_000.0, port_rate=20_000.0, rtt=RttEstimator())
    w.rtt.sample(0.002, now=0.0)
    for k in range(50):
        w.rtt.sample(0.010, now=0.1 + k * 0.01)
    assert w.rtt.min_rtt == 0.002 and w.rtt.srtt is not None and w.rtt.srtt > 0.008
    assert w.rate == 20_000.0
    assert w.flight_cap == 160.0
    plain = Window(cwnd=40.0, max_rate=20_000.0, rtt=w.rtt)  # no port rate: the window as it is
    assert plain.flight_cap == 40.0 and plain.rate < 2 * 40 / 0.008
    w.cwnd = 10.0  # after cuts: the rate follows the window
    assert w.rate == 2 * 10 / 0.002 and w.flight_cap == 40.0


def test_the_least_round_trip_is_forgotten_after_its_window() -> None:
    rtt = RttEstimator(min_window=10.0)
    rtt.sample(0.001, now=0.0)
    rtt.sample(0.005, now=5.0)
    assert rtt.min_rtt == 0.001
    rtt.sample(0.004, now=10.5)  # the 1 ms sample is older than 10 s: the path may have changed
    assert rtt.min_rtt == 0.004


def test_a_cut_is_undone_only_when_no_other_came_since() -> None:
    w = Window(cwnd=100.0)
    assert w.on_congestion(now=10.0)
    token = (100.0, float("inf"), w.decreases)
    assert w.cwnd == 50.0 and w.undo(*token)
    assert (w.cwnd, w.ssthresh, w.decreases, w.undone) == (100.0, float("inf"), 0, 1)
    assert w.on_congestion(now=20.0) and w.on_congestion(now=30.0)  # a second cut came since the first
    assert not w.undo(50.0, 50.0, 1) and w.decreases == 2
    # Taken back with its factor: only the first cut's halving is multiplied back (100 -> 50
    # -> 25 is 25 -> 50), the second one stands, and so does its once-per-round-trip guard.
    assert w.undo(100.0, 50.0, 1, factor=0.5)
    assert (w.cwnd, w.ssthresh, w.decreases, w.undone) == (50.0, 50.0, 1, 2)
    assert not w.on_congestion(now=30.001)
