"""Gradient values with a real model's magnitude distribution, for trace-driven workers.

The traces give tensor sizes and times, not values; magnitude classes (and so DLCP's
drop eligibility) only mean something if the values look like real gradients. The pool is
made locally with PyTorch: the experiment's digits CNN (:mod:`experiments.training.cnn`)
trained for a few Adam steps, its gradients taken at several points of training. Each real
tensor gives its root mean square (how loud the tensor is) and its values divided by that
(the shape of the distribution within a tensor, heavy-tailed). A trace tensor at relative
depth ``d`` (0 = input side) takes the RMS of the real tensor at the same relative depth,
times a per-iteration log-normal factor, and values drawn from that tensor's shape pool.

The pool is cached as ``.npz`` outside the tracked tree (default under the system's
temporary folder), so ranks load it instead of importing PyTorch.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

POOL_FILE = Path(tempfile.gettempdir()) / "gradfabric-grad-pool-v1.npz"
SNAPSHOTS = (0, 10, 40)  # Adam steps at which gradients are taken


@dataclass(frozen=True)
class GradPool:
    """Per real tensor (forward order): its RMS and its values divided by it."""

    rms: np.ndarray  # (tensors, snapshots)
    shapes: list[np.ndarray]

    def tensor_for(self, depth: float) -> int:
        return min(len(self.shapes) - 1, max(0, round(depth * (len(self.shapes) - 1))))


def make_pool(seed: int = 0) -> GradPool:
    """Gradients of the digits CNN at a few points of training (module doc); needs PyTorch."""
    from experiments.training.cnn import as_images, build_cnn
    from experiments.training.data import Batches, load_digits
    from experiments.training.model import torch_module

    torch = torch_module()
    data = load_digits(seed)
    model = build_cnn(seed)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    loss_fn = torch.nn.CrossEntropyLoss()
    batches = Batches(data, 0, 1, 32, seed)
    params = list(model.parameters())
    rms = np.zeros((len(params), len(SNAPSHOTS)))
    shapes: list[list[np.ndarray]] = [[] for _ in params]
    for step in range(max(SNAPSHOTS) + 1):
        x, y = batches.batch(step)
        opt.zero_grad()
        loss_fn(model(torch.from_numpy(as_images(x))), torch.from_numpy(y)).backward()
        if step in SNAPSHOTS:
            col = SNAPSHOTS.index(step)
            for i, p in enumerate(params):
                g = p.grad.detach().numpy().ravel().astype(np.float64)
                r = float(np.sqrt(np.mean(g * g))) or 1e-12
                rms[i, col] = r
                shapes[i].append((g / r).astype(np.float32))
        opt.step()
    return GradPool(rms=rms, shapes=[np.concatenate(s) for s in shapes])


def save_pool(pool: GradPool, path: Path = POOL_FILE) -> Path:
    tmp = path.with_suffix(".tmp.npz")
    np.savez(tmp, rms=pool.rms, **{f"shape{i}": s for i, s in enumerate(pool.shapes)})
    tmp.replace(path)
    return path


def load_pool(path: Path = POOL_FILE) -> GradPool:
    """The cached pool, made (and cached) first if missing."""
    if not path.exists():
        save_pool(make_pool(), path)
    with np.load(path) as f:
        n = f["rms"].shape[0]
        return GradPool(rms=f["rms"], shapes=[f[f"shape{i}"] for i in range(n)])


class GradientSource:
    """This rank's gradients of a model with tensors of `numels` (forward order), per iteration.

    Base values are drawn once per tensor (seeded by `seed` and `rank`); each iteration
    multiplies a tensor by a log-normal factor (sigma 0.3) and a random sign, so magnitudes
    vary between iterations as real gradients do without redrawing a million values (a
    million random draws per iteration would cost more than a layer's emulated compute)."""

    def __init__(self, numels: list[int], pool: GradPool, *, seed: int, rank: int) -> None:
        self.rng = np.random.default_rng([seed, rank])
        n = len(numels)
        self.base: list[np.ndarray] = []
        for i, size in enumerate(numels):
            real = pool.tensor_for(i / max(1, n - 1))
            shape = pool.shapes[real]
            scale = float(pool.rms[real, self.rng.integers(pool.rms.shape[1])])
            self.base.append((shape[self.rng.integers(0, shape.size, size)] * scale).astype(np.float32))

    def gradients(self, iteration: int) -> list[np.ndarray]:
        rng = np.random.default_rng([iteration, int(self.rng.integers(1 << 30))])
        factors = np.exp(rng.normal(0.0, 0.3, len(self.base))) * np.where(rng.random(len(self.base)) < 0.5, -1, 1)
        return [base * np.float32(f) for base, f in zip(self.base, factors)]
