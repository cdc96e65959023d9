"""Fitting the alpha-beta cost model to measured all-reduce latencies (OSU micro-benchmarks)."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hosts.schedulers import AlphaBeta
from simulator.errors import SimulatorError

OSU_HEADER = ("nodes", "bytes", "avg_latency_us")


@dataclass(frozen=True)
class LatencySamples:
    """All-reduce latency (seconds) per message size (bytes) measured on ``nodes`` workers."""

    nodes: int
    nbytes: np.ndarray
    seconds: np.ndarray


@dataclass(frozen=True)
class Fit:
    """A least-squares fit ``seconds = alpha + beta * bytes`` and its quality."""

    nodes: int
    cost: AlphaBeta
    r_squared: float
    min_bytes: int
    max_bytes: int


def load_osu(path: str | Path) -> LatencySamples:
    """Read ``nodes,bytes,avg_latency_us`` rows (one node count per file)."""
    path = Path(path)
    try:
        rows = list(csv.reader(path.read_text().splitlines()))
    except OSError as exc:
        raise SimulatorError(f"cannot read latencies {path}: {exc.strerror}") from None
    if not rows or tuple(c.strip() for c in rows[0]) != OSU_HEADER:
        raise SimulatorError(f"{path}: expected the header {','.join(OSU_HEADER)}")
    try:
        data = np.array([[float(x) for x in row] for row in rows[1:] if row], dtype=float)
    except ValueError as exc:
        raise SimulatorError(f"{path}: {exc}") from None
    if data.ndim != 2 or data.shape[0] < 2 or data.shape[1] != 3:
        raise SimulatorError(f"{path}: need at least two rows of three numbers")
    nodes = np.unique(data[:, 0])
    if len(nodes) != 1:
        raise SimulatorError(f"{path}: mixes node counts {nodes.tolist()}")
    return LatencySamples(int(nodes[0]), data[:, 1], data[:, 2] * 1e-6)


def fit_alpha_beta(samples: LatencySamples, *, min_bytes: int = 0, nbytes_per_element: int = 4) -> Fit:
    """Least-squares line through the samples of at least ``min_bytes`` bytes."""
    mask = samples.nbytes >= min_bytes
    x, y = samples.nbytes[mask], samples.seconds[mask]
    if len(x) < 2 or np.ptp(x) == 0:
        raise SimulatorError(f"need two distinct message sizes of at least {min_bytes} bytes to fit")
    design = np.column_stack([np.ones_like(x), x])
    (alpha, beta), *_ = np.linalg.lstsq(design, y, rcond=None)
    residual = y - (alpha + beta * x)
    total = float(np.sum((y - y.mean()) ** 2))
    r2 = 1.0 - float(np.sum(residual**2)) / total if total > 0 else 1.0
    if beta <= 0:
        raise SimulatorError(f"fit gives a non-positive beta ({beta:.3g} s/B): latencies do not grow with size")
    return Fit(samples.nodes, AlphaBeta(max(float(alpha), 0.0), float(beta), nbytes_per_element), r2, int(x.min()), int(x.max()))


def compare_with_measured(cost: AlphaBeta, numel: np.ndarray, measured_s: np.ndarray) -> dict[str, float]:
    """How the fitted model predicts measured per-message all-reduce times.

    Messages measured as 0 (merged into a neighbour by the logging run) are left out.
    Returns the number compared, the median ratio measured/predicted and the sums of both.
    """
    mask = measured_s > 0
    predicted = cost.alpha + cost.beta * numel[mask] * cost.nbytes
    ratio = measured_s[mask] / predicted
    return {
        "messages": float(mask.sum()),
        "median_ratio": float(np.median(ratio)) if mask.any() else float("nan"),
        "measured_sum_s": float(measured_s[mask].sum()),
        "predicted_sum_s": float(predicted.sum()),
    }
