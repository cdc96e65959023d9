"""Figures of one training run: iteration times, time to accuracy, packets lost and resent."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from experiments.training.processes import JobOutcome


#: Iterations left out of the iteration-time figures (first-call costs of the libraries).
WARM_UP = 1


@dataclass
class RunMetrics:
    name: str
    iterations: int
    wall_s: float  # worker 0: first iteration start to last iteration end
    iteration_p50_s: float
    iteration_p99_s: float
    time_to_target_s: float | None  # None: the target accuracy was never reached
    target_accuracy: float
    final_accuracy: float
    packets_sent: int  # DLCP data packets, first transmissions (pushes and pulls)
    retransmitted: int  # DLCP data packets sent again
    dropped: int  # DLCP data packets sent that no receiver got
    gradient_loss: float  # mean share of gradient values lost and zero-filled at the server
    accuracy_curve: list[tuple[float, float]] = field(default_factory=list)  # (wall s, test accuracy)
    iteration_times: list[float] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _received(receive: dict[str, Any]) -> int:
    return int(receive.get("data_packets", 0)) + int(receive.get("drops", {}).get("late", 0))


def summarize(name: str, outcome: JobOutcome, target: float) -> RunMetrics:
    """Worker 0's curve and iteration times (after the warm-up); packets over every role of the job."""
    records = outcome.records.get(0, [])
    times = [float(r["iteration_s"]) for r in records[WARM_UP:]]
    curve = [(float(r["wall_s"]), float(r["accuracy"])) for r in records if r.get("accuracy") is not None]
    reached = next((t for t, a in curve if a >= target), None)
    server = outcome.server.get("server", {})
    sent = sum(int(r["packets"]) for recs in outcome.records.values() for r in recs) + int(server.get("pull_packets", 0))
    resent = (sum(int(r["retransmitted"]) for recs in outcome.records.values() for r in recs)
              + int(server.get("pull_retransmitted", 0)))
    received = _received(outcome.server.get("receive", {})) + sum(_received(r) for r in outcome.worker_receive.values())
    return RunMetrics(
        name=name, iterations=len(records), wall_s=float(records[-1]["wall_s"]) if records else 0.0,
        iteration_p50_s=float(np.percentile(times, 50)) if times else float("nan"),
        iteration_p99_s=float(np.percentile(times, 99)) if times else float("nan"),
        time_to_target_s=reached, target_accuracy=target,
        final_accuracy=curve[-1][1] if curve else float("nan"),
        packets_sent=sent, retransmitted=resent, dropped=max(0, sent + resent - received),
        gradient_loss=float(server.get("gradient_loss", 0.0)), accuracy_curve=curve, iteration_times=times,
    )
