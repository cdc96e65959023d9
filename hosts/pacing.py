"""AIMD rate control and a packet pacer for the bounded-loss sender.

The rate (packets per second) grows additively after each message that completed within its
loss bound at the first try, and is cut multiplicatively at every retransmission round:
loss above the bound is the congestion signal; random loss within the bound is tolerated
by design and must not throttle the sender.
"""

from __future__ import annotations

import time
from dataclasses import dataclass


@dataclass
class Aimd:
    """Sending rate in packets per second, with its limits and steps."""

    rate: float = 50_000.0
    min_rate: float = 500.0
    max_rate: float = 1_000_000.0
    increase: float = 5_000.0
    decrease: float = 0.5

    def on_success(self) -> None:
        self.rate = min(self.max_rate, self.rate + self.increase)

    def on_congestion(self) -> None:
        self.rate = max(self.min_rate, self.rate * self.decrease)


class Pacer:
    """Spaces packets at the AIMD rate, in bursts of about `burst_interval` seconds."""

    def __init__(self, aimd: Aimd, burst_interval: float = 0.001) -> None:
        self.aimd = aimd
        self.burst_interval = burst_interval
        self._next = time.perf_counter()

    def burst(self) -> int:
        """Wait until the next burst is due; return how many packets it may carry."""
        now = time.perf_counter()
        if now < self._next:
            time.sleep(self._next - now)
        elif now - self._next > self.burst_interval:
            self._next = now  # idle time earns no credit
        rate = self.aimd.rate
        allowed = max(1, int(rate * self.burst_interval))
        self._next += allowed / rate
        return allowed
