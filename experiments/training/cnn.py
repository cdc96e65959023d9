"""The experiment's model: a small CNN on the 8x8 digits, ten parameter tensors of ten sizes.

``conv 1->16, conv 16->32, pool, conv 32->48, pool, fc 192->64, fc 64->10`` (3x3 kernels,
padding 1, ReLU): weights and biases of 144, 16, 4,608, 32, 13,824, 48, 12,288, 64, 640
and 10 values (31,674 in all). Parameter index = forward order, so index 0 is the input-side
layer the DLCP policy ranks first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from experiments.training.model import torch_module

if TYPE_CHECKING:
    import torch

CHANNELS = (16, 32, 48)
HIDDEN = 64
CLASSES = 10


def build_cnn(seed: int = 0) -> torch.nn.Sequential:
    """The CNN (module doc); the same `seed` gives the same initial weights everywhere."""
    torch = torch_module()
    nn = torch.nn
    torch.manual_seed(seed)
    c1, c2, c3 = CHANNELS
    return nn.Sequential(
        nn.Conv2d(1, c1, 3, padding=1), nn.ReLU(),
        nn.Conv2d(c1, c2, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(c2, c3, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(c3 * 2 * 2, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, CLASSES),
    )


def as_images(x: np.ndarray) -> np.ndarray:
    """Flat 64-feature digits as (n, 1, 8, 8) float32 images."""
    return np.ascontiguousarray(x.reshape(-1, 1, 8, 8), dtype=np.float32)
