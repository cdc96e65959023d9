"""Congestion control of the bounded-loss sender: round-trip estimation, the congestion
window and the packet pacer.

* :class:`RttEstimator` keeps the smoothed round-trip time and its variance from
  probe/bitmap exchanges exactly as TCP does (RFC 6298: alpha 1/8, beta 1/4, RTO =
  SRTT + max(G, 4 RTTVAR)), clamped to ``[min_rto, max_rto]``; a probe that goes unanswered
  is re-sent after the RTO doubled per attempt (back-off), never after more than ``max_rto``.
* :class:`Window` is the congestion window in packets shared by every message an endpoint
  has in flight: slow start (one packet more per packet acknowledged) up to ``ssthresh``,
  then additive increase (one packet per window), and a multiplicative decrease on
  loss beyond a message's bound (by half; taken back when it was reordering, and once the
  path was seen to reorder, only when confirmed: ``REORDER_PERSIST``) or on an ECN echo (by ``alpha / 2``,
  ``alpha`` the share of packets marked, as DCTCP), at most once per round trip. The floor
  (``min_cwnd``) still lets a message finish: a chunk of one packet can always be sent.
  Loss within the bound is not a congestion signal by itself.
* :class:`Pacer` spaces packets at the window's rate (``gain * cwnd / srtt``: 2 in slow
  start, 1.25 after), capped by ``max_rate`` (the known port rate, when given). With a known
  port rate (``Window.port_rate``) the window counts what the network holds: the rate is
  ``gain * cwnd / min_rtt`` and answers slower than the path (a busy receiver) may keep up
  to ``STRETCH_MAX`` times the window unanswered (``Window.flight_cap``).

:class:`Aimd` is the older rate-only controller, kept as a way to name a rate ceiling:
an endpoint given ``aimd=Aimd(rate=r)`` never paces faster than ``r`` packets/s.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass


#: Most a window is stretched for answers slower than the path (``Window.flight_cap``).
STRETCH_MAX = 4.0
#: Loss episodes whose cut waits for a confirmation after reordering was last seen (as
#: Linux keeps RACK's reordering window for 16 recoveries after a DSACK).
REORDER_PERSIST = 16


@dataclass
class Aimd:
    """A sending rate in packets per second with its limits and steps (rate-only AIMD)."""

    rate: float = 50_000.0
    min_rate: float = 500.0
    max_rate: float = 1_000_000.0
    increase: float = 5_000.0
    decrease: float = 0.5

    def on_success(self) -> None:
        self.rate = min(self.max_rate, self.rate + self.increase)

    def on_congestion(self) -> None:
        self.rate = max(self.min_rate, self.rate * self.decrease)


@dataclass
class RttEstimator:
    """Smoothed RTT, RTT variance and the retransmission (probe) timeout, per RFC 6298."""

    initial_rto: float = 0.2
    min_rto: float = 0.01
    max_rto: float = 2.0
    granularity: float = 0.001
    #: The least sample is kept this long (s), then the next sample replaces it (a path that
    #: changed shows within this time).
    min_window: float = 10.0
    srtt: float | None = None
    rttvar: float = 0.0
    samples: int = 0
    min_rtt: float | None = None
    _min_at: float = -math.inf

    def sample(self, rtt: float, now: float | None = None) -> None:
        """Feed one round-trip measurement (Karn: never from a probe that was re-sent)."""
        rtt = max(rtt, 1e-6)
        now = time.monotonic() if now is None else now
        if self.min_rtt is None or rtt <= self.min_rtt or now - self._min_at > self.min_window:
            self.min_rtt, self._min_at = rtt, now
        if self.srtt is None:
            self.srtt, self.rttvar = rtt, rtt / 2
        else:
            self.rttvar = 0.75 * self.rttvar + 0.25 * abs(self.srtt - rtt)
            self.srtt = 0.875 * self.srtt + 0.125 * rtt
        self.samples += 1

    @property
    def rto(self) -> float:
        if self.srtt is None:
            return min(self.max_rto, max(self.min_rto, self.initial_rto))
        return min(self.max_rto, max(self.min_rto, self.srtt + max(self.granularity, 4 * self.rttvar)))

    def backed_off(self, attempts: int) -> float:
        """The timeout of a probe sent for the `attempts`-th time (1 = first), doubled per
        earlier attempt and capped at ``max_rto``."""
        return min(self.max_rto, self.rto * (2 ** max(0, attempts - 1)))


@dataclass
class Window:
    """Congestion window in packets (see the module doc); not thread-safe by itself."""

    cwnd: float = 10.0  # initial window (RFC 6928)
    ssthresh: float = math.inf
    min_cwnd: float = 1.0
    max_cwnd: float = 65_536.0
    beta: float = 0.5
    max_rate: float = 1_000_000.0  # packets/s ceiling of the pacer
    min_rate: float = 200.0
    initial_rate: float | None = None  # pacing before the first RTT sample (default max_rate)
    #: The known rate of the path's slowest port (packets/s), when given: the window then
    #: counts the packets the network holds, the pacing rate is ``gain * cwnd / min_rtt``
    #: and up to ``cwnd * srtt / min_rtt`` packets may be unacknowledged, so that answers
    #: delayed by a busy receiver (not by the network) do not throttle the sender.
    port_rate: float | None = None
    rtt: RttEstimator | None = None
    #: DCTCP (RFC 8257): ``alpha`` estimates the share of packets CE-marked, updated once per
    #: round trip with gain ``ecn_gain``; an ECN echo cuts the window by ``alpha / 2``.
    ecn_gain: float = 1.0 / 16
    alpha: float = 1.0
    decreases: int = 0
    undone: int = 0  # cuts taken back (the loss was reordering)
    #: Loss episodes left whose cut waits for a confirmation (``REORDER_PERSIST`` once packets
    #: shown missing arrived without a resend; one less per episode confirmed as loss).
    reorder_credit: int = 0
    deferred: int = 0  # loss episodes whose cut waited for a confirmation (reordering seen)
    _last_decrease: float = -math.inf
    _acked: int = 0
    _marked: int = 0
    _alpha_at: float = -math.inf

    def __post_init__(self) -> None:
        if self.rtt is None:
            self.rtt = RttEstimator()

    @property
    def flight_cap(self) -> float:
        """Most data packets unacknowledged at once: the window, stretched by how much
        longer answers take than the path's least round trip when the port rate is known."""
        assert self.rtt is not None
        srtt, least = self.rtt.srtt, self.rtt.min_rtt
        if self.port_rate is None or srtt is None or least is None or srtt <= least:
            return self.cwnd
        return min(self.max_cwnd, self.cwnd * min(srtt / least, STRETCH_MAX))

    @property
    def slow_start(self) -> bool:
        return self.cwnd < self.ssthresh

    def on_ack(self, packets: int) -> None:
        """`packets` data packets were acknowledged as received."""
        if packets <= 0:
            return
        if self.slow_start:
            self.cwnd = min(self.max_cwnd, self.cwnd + packets)
        else:
            self.cwnd = min(self.max_cwnd, self.cwnd + packets / self.cwnd)

    def on_marks(self, packets: int, marked: int, now: float | None = None) -> None:
        """`packets` acknowledged, `marked` of them answered with an ECN echo: once per
        round trip, ``alpha`` moves towards the share marked since the last update."""
        now = time.monotonic() if now is None else now
        self._acked += max(0, packets)
        self._marked += max(0, marked)
        assert self.rtt is not None
        rtt = self.rtt.srtt if self.rtt.srtt is not None else self.rtt.rto
        if now - self._alpha_at >= rtt and self._acked:
            share = min(1.0, self._marked / self._acked)
            self.alpha = (1 - self.ecn_gain) * self.alpha + self.ecn_gain * share
            self._acked = self._marked = 0
            self._alpha_at = now

    def on_ecn(self, now: float | None = None) -> bool:
        """An ECN echo: cut the window by ``alpha / 2`` (DCTCP), at most once per round trip."""
        return self.on_congestion(now, beta=1.0 - self.alpha / 2)

    def on_congestion(self, now: float | None = None, beta: float | None = None) -> bool:
        """Cut the window (loss beyond the bound: by ``beta``); False when a cut already
        happened within the last smoothed round trip."""
        now = time.monotonic() if now is None else now
        assert self.rtt is not None
        rtt = self.rtt.srtt if self.rtt.srtt is not None else self.rtt.rto
        if now - self._last_decrease < rtt:
            return False
        self._last_decrease = now
        self.ssthresh = max(self.min_cwnd * 2, self.cwnd * (self.beta if beta is None else beta))
        self.cwnd = max(self.min_cwnd, self.ssthresh)
        self.decreases += 1
        return True

    def undo(self, cwnd: float, ssthresh: float, decreases: int, factor: float | None = None) -> bool:
        """Take back the cut that left `decreases` cuts (the window was `cwnd`, `ssthresh`
        before it), when the loss behind it proved to be reordering. When other cuts came
        since, only this cut's `factor` is multiplied back (theirs stand); without a factor
        that case is refused (False)."""
        if self.decreases == decreases:
            self.cwnd = max(self.cwnd, cwnd)
            self.ssthresh = ssthresh
            self._last_decrease = -math.inf
        elif factor is not None and 0 < factor < 1:
            self.cwnd = min(self.max_cwnd, self.cwnd / factor)
            if math.isfinite(self.ssthresh):
                self.ssthresh = self.ssthresh / factor
        else:
            return False
        self.decreases -= 1
        self.undone += 1
        return True

    def saw_reordering(self) -> None:
        """Packets an answer showed missing arrived without a resend: the path reorders, so
        the next ``REORDER_PERSIST`` losses over a bound cut only once confirmed."""
        self.reorder_credit = REORDER_PERSIST

    def defer_cut(self) -> bool:
        """Whether loss shown over a bound waits for its confirmation before cutting (the
        path was seen to reorder); counts the episode in ``deferred``."""
        if self.reorder_credit <= 0:
            return False
        self.deferred += 1
        return True

    def loss_confirmed(self) -> None:
        """A loss over a bound was confirmed: one reordering credit less."""
        self.reorder_credit = max(0, self.reorder_credit - 1)

    @property
    def rate(self) -> float:
        """Pacing rate in packets/s."""
        assert self.rtt is not None
        if self.rtt.srtt is None:
            return self.initial_rate if self.initial_rate is not None else self.max_rate
        gain = 2.0 if self.slow_start else 1.25
        rtt = self.rtt.srtt if self.port_rate is None or self.rtt.min_rtt is None else self.rtt.min_rtt
        return min(self.max_rate, max(self.min_rate, gain * self.cwnd / max(rtt, 1e-4)))


class Pacer:
    """Spaces packets at a controller's ``rate`` (an :class:`Aimd` or a :class:`Window`),
    in bursts of about `burst_interval` seconds."""

    def __init__(self, aimd: Aimd | Window, burst_interval: float = 0.001) -> None:
        self.aimd = aimd
        self.burst_interval = burst_interval
        self._next = time.perf_counter()

    def ready(self, packets: int) -> bool:
        """Whether a burst of `packets` may leave now without waiting (``burst`` would not sleep
        and grants them all)."""
        return time.perf_counter() >= self._next and max(1, int(self.aimd.rate * self.burst_interval)) >= packets

    def burst(self, wanted: int | None = None) -> int:
        """Wait until the next burst is due; return how many packets it may carry (at most
        `wanted`). Only the packets granted take up pacing time."""
        now = time.perf_counter()
        if now < self._next:
            time.sleep(self._next - now)
        elif now - self._next > self.burst_interval:
            self._next = now  # idle time earns no credit
        rate = self.aimd.rate
        allowed = max(1, int(rate * self.burst_interval))
        if wanted is not None:
            allowed = max(1, min(allowed, wanted))
        self._next += allowed / rate
        return allowed
