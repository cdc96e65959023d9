"""DLCP's effect on the tail: bounded loss and per-packet spraying, as a link model.

Assumptions (see simulator/README.md for the discussion):

* The fabric drops each packet independently with probability ``loss_rate`` (congestion,
  incast). Messages are cut into packets of ``packet_bytes`` of payload.
* A **reliable** transport (the baselines' TCP/RDMA) finishes a message only when every
  packet has arrived; any loss costs a retransmission timeout ``rto_s``. Expected time:
  ``alpha + beta_hashed * M + rto_s * P(at least one of the n packets lost)``.
* **Bounded loss** (transfers tagged with a :class:`~hosts.schedulers.LossPolicy`):
  the message completes once ``1 - loss_bound`` of it has arrived, so it waits for a
  retransmission only when more than ``loss_bound`` of its packets are lost:
  ``alpha + beta * M + rto_s * P(Binomial(n, loss_rate) > loss_bound * n)``.
* **Paths**: there are ``paths`` equal-cost paths whose bandwidths sum to the link
  bandwidth. Per-flow hashing puts ``flows`` flows on the paths at random; a collective
  ends with its most loaded path, so its bandwidth term grows by the expected maximum load
  over the mean load (balls into bins). Per-packet spraying (DLCP; order-independent
  packets) pools the paths: no imbalance.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from hosts.schedulers import AlphaBeta, Transfer
from simulator.errors import SimulatorError

_EXACT_LIMIT = 4000


@dataclass(frozen=True)
class TailModel:
    loss_rate: float = 0.0
    rto_s: float = 0.001
    packet_bytes: int = 1024
    paths: int = 1
    flows: int | None = None

    def __post_init__(self) -> None:
        if not 0.0 <= self.loss_rate < 1.0:
            raise SimulatorError(f"loss_rate must be in [0, 1), not {self.loss_rate}")
        if self.rto_s < 0 or self.packet_bytes <= 0 or self.paths < 1:
            raise SimulatorError("rto_s >= 0, packet_bytes > 0 and paths >= 1 are required")
        if self.flows is not None and self.flows < 1:
            raise SimulatorError("flows must be at least 1")

    @property
    def hash_imbalance(self) -> float:
        """Expected (most loaded path) / (mean path load) under per-flow hashing."""
        return hash_imbalance(self.flows if self.flows is not None else self.paths, self.paths)


@lru_cache(maxsize=256)
def hash_imbalance(flows: int, paths: int, trials: int = 20000) -> float:
    """E[max bin load] / (flows / paths) for ``flows`` balls thrown into ``paths`` bins."""
    if paths == 1:
        return 1.0
    rng = np.random.default_rng(12345)
    bins = rng.integers(0, paths, size=(trials, flows))
    counts = np.zeros((trials, paths), dtype=np.int64)
    np.add.at(counts, (np.repeat(np.arange(trials), flows), bins.ravel()), 1)
    return float(counts.max(axis=1).mean()) / (flows / paths)


@lru_cache(maxsize=4096)
def prob_loss_exceeds(packets: int, loss_rate: float, bound: float) -> float:
    """P(more than ``bound * packets`` of ``packets`` independent packets are lost)."""
    if packets <= 0 or loss_rate <= 0.0:
        return 0.0
    allowed = math.floor(bound * packets)
    if allowed >= packets:
        return 0.0
    if packets <= _EXACT_LIMIT:
        k = np.arange(packets + 1)
        log_pmf = (
            np.array([math.lgamma(packets + 1) - math.lgamma(i + 1) - math.lgamma(packets - i + 1) for i in k])
            + k * math.log(loss_rate)
            + (packets - k) * math.log1p(-loss_rate)
        )
        return float(np.exp(log_pmf[allowed + 1 :]).sum())
    mean = packets * loss_rate
    sd = math.sqrt(packets * loss_rate * (1 - loss_rate))
    z = (allowed + 0.5 - mean) / sd
    return 0.5 * math.erfc(z / math.sqrt(2))


@dataclass(frozen=True)
class TailLink:
    """Transfer times under :class:`TailModel`: reliable vs bounded-loss transfers."""

    cost: AlphaBeta
    tail: TailModel

    def seconds(self, transfer: Transfer) -> float:
        packets = max(1, math.ceil(transfer.nbytes / self.tail.packet_bytes))
        if transfer.loss is not None:
            stall = prob_loss_exceeds(packets, self.tail.loss_rate, transfer.loss.loss_bound)
            return self.cost.seconds(transfer.nbytes) + self.tail.rto_s * stall
        stall = prob_loss_exceeds(packets, self.tail.loss_rate, 0.0)
        bandwidth_term = self.cost.beta * transfer.nbytes * self.tail.hash_imbalance
        return self.cost.alpha + bandwidth_term + self.tail.rto_s * stall

    def round_trip_s(self, transfer: Transfer) -> float:
        """Nothing after the link: the whole cost is charged while it holds the link."""
        return 0.0
