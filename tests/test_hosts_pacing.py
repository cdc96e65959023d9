"""AIMD steps and the pacer's rate."""

from __future__ import annotations

import time

from hosts.pacing import Aimd, Pacer


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
    assert 0.17 <= seconds <= 2.0  # 4 000 packets at 20 000/s take 0.2 s (slack for a busy machine)
    slow = Pacer(Aimd(rate=500))
    assert slow.burst() == 1 and slow.burst() == 1  # below one packet per burst: one, then a wait
    started = time.perf_counter()
    slow.burst()
    assert time.perf_counter() - started >= 0.0015
