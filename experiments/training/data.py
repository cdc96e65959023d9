"""The digits data set (bundled with scikit-learn, no download): split, scale, shard."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from experiments.errors import ExperimentError


@dataclass(frozen=True)
class Digits:
    """Train and test splits; features scaled to [0, 1], labels 0..9."""

    train_x: np.ndarray
    train_y: np.ndarray
    test_x: np.ndarray
    test_y: np.ndarray

    @property
    def features(self) -> int:
        return int(self.train_x.shape[1])


def load_digits(seed: int = 0, test_share: float = 0.2) -> Digits:
    """8x8 digit images as 64 features, split reproducibly from `seed`."""
    try:
        from sklearn.datasets import load_digits as sklearn_digits
    except ImportError as exc:
        raise ExperimentError("the training job needs scikit-learn (pip install -e '.[train]')") from exc
    bunch = sklearn_digits()
    x = (bunch.data / 16.0).astype(np.float32)
    y = bunch.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(y))
    n_test = int(round(len(y) * test_share))
    test, train = order[:n_test], order[n_test:]
    return Digits(train_x=x[train], train_y=y[train], test_x=x[test], test_y=y[test])


def shard(n: int, rank: int, world: int) -> np.ndarray:
    """Indices of worker `rank`'s share of `n` samples (interleaved, so every shard sees all classes)."""
    if not 0 <= rank < world:
        raise ExperimentError(f"rank {rank} is not in a job of {world} workers")
    return np.arange(rank, n, world)


class Batches:
    """Reproducible minibatches from one shard: batch `i` depends only on (seed, rank, i)."""

    def __init__(self, data: Digits, rank: int, world: int, batch_size: int, seed: int) -> None:
        self.x = data.train_x[shard(len(data.train_y), rank, world)]
        self.y = data.train_y[shard(len(data.train_y), rank, world)]
        self.batch_size = min(batch_size, len(self.y))
        self.seed = seed
        self.rank = rank

    def batch(self, iteration: int) -> tuple[np.ndarray, np.ndarray]:
        rng = np.random.default_rng([self.seed, self.rank, iteration])
        pick = rng.choice(len(self.y), size=self.batch_size, replace=False)
        return self.x[pick], self.y[pick]
