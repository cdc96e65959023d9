"""Cluster models: the alpha-beta cost of one collective for N workers.

A network is a per-message latency ``latency_s`` (one step of a collective) and a per-worker
link bandwidth ``bandwidth`` (bytes/s, full duplex). For a message of M bytes:

* **ring all-reduce** (reduce-scatter + all-gather): ``2(N-1)`` steps of ``M/N`` bytes:
  ``alpha = 2(N-1) * latency``, ``beta = 2(N-1) / (N * bandwidth)``.
* **parameter server** with ``S`` servers (each holds 1/S of every tensor; ``S = N`` is the
  co-located, BytePS-like layout): a push and a pull, each one step; a server's link carries
  ``N*M/S`` bytes per direction and a worker's ``M``:
  ``alpha = 2 * latency``, ``beta = 2 * max(1, N/S) / bandwidth``.

**Links** (what :mod:`simulator.engine` drives). A ring all-reduce holds the worker's link
for its whole cost. A PS transfer is two legs: the push holds the worker's uplink
(``alpha/2 + beta/2 * M``); the servers then aggregate (``aggregation_s``, waiting for the
slowest push and summing) and the pull comes back on the downlink (another
``alpha/2 + beta/2 * M``) while the uplink is free for the next push. The transfer completes,
and a scheduler's credit returns, only when the pull has arrived (:class:`PushPullLink`).

A fit measured at ``N0`` workers (alpha, beta of a ring all-reduce) is turned into a network
by inverting the ring formulas; other worker counts and the PS are derived from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from hosts.schedulers import AlphaBeta, Transfer
from simulator.errors import SimulatorError

ARCHITECTURES = ("ring", "ps")


@dataclass(frozen=True)
class Network:
    latency_s: float
    bandwidth: float  # bytes per second per worker link

    @classmethod
    def from_gbps(cls, gbps: float, latency_us: float) -> Network:
        if gbps <= 0 or latency_us < 0:
            raise SimulatorError(f"bad network: {gbps} Gbit/s, {latency_us} us")
        return cls(latency_us * 1e-6, gbps * 1e9 / 8)

    @classmethod
    def from_ring_fit(cls, cost: AlphaBeta, workers: int) -> Network:
        """The network whose ring all-reduce at ``workers`` has exactly ``cost``."""
        if workers < 2:
            raise SimulatorError("a ring fit needs at least 2 workers")
        steps = 2 * (workers - 1)
        return cls(cost.alpha / steps, steps / (workers * cost.beta))


def collective_cost(arch: str, workers: int, network: Network, *, servers: int | None = None, nbytes: int = 4) -> AlphaBeta:
    """Alpha-beta of one collective of ``arch`` on ``workers`` workers."""
    if workers < 1:
        raise SimulatorError(f"workers must be at least 1, not {workers}")
    if workers == 1:
        return AlphaBeta(0.0, 0.0, nbytes)
    if arch == "ring":
        steps = 2 * (workers - 1)
        return AlphaBeta(steps * network.latency_s, steps / (workers * network.bandwidth), nbytes)
    if arch == "ps":
        s = workers if servers is None else servers
        if s < 1:
            raise SimulatorError(f"servers must be at least 1, not {s}")
        return AlphaBeta(2 * network.latency_s, 2 * max(1.0, workers / s) / network.bandwidth, nbytes)
    raise SimulatorError(f"unknown architecture {arch!r}; choose one of {', '.join(ARCHITECTURES)}")


@dataclass(frozen=True)
class AlphaBetaLink:
    """A link whose every transfer costs ``alpha + beta * bytes``."""

    cost: AlphaBeta

    def seconds(self, transfer: Transfer) -> float:
        return self.cost.seconds(transfer.nbytes)

    def round_trip_s(self, transfer: Transfer) -> float:
        """Nothing after the link: the whole cost is charged while it holds the link."""
        return 0.0


class LegLink(Protocol):
    """One leg (push or pull) of a PS transfer; :class:`AlphaBetaLink` or a tail link."""

    def seconds(self, transfer: Transfer) -> float: ...


@dataclass(frozen=True)
class PushPullLink:
    """A parameter-server transfer: ``push`` holds the uplink; after it the servers aggregate
    for ``aggregation_s`` and ``pull`` brings the result back on the downlink, leaving the
    uplink free. Completion (credit, update) waits for the pull."""

    push: LegLink
    pull: LegLink
    aggregation_s: float = 0.0

    def seconds(self, transfer: Transfer) -> float:
        return self.push.seconds(transfer)

    def round_trip_s(self, transfer: Transfer) -> float:
        return self.aggregation_s + self.pull.seconds(transfer)


def half_cost(cost: AlphaBeta) -> AlphaBeta:
    """One leg (push or pull) of a PS collective costing ``cost`` for both."""
    return AlphaBeta(cost.alpha / 2, cost.beta / 2, cost.nbytes)
