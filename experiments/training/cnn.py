"""The experiment's model: a small CNN on the 8x8 digits, ten parameter tensors of ten sizes.

``conv 1->8, conv 8->16, pool, conv 16->24, pool, fc 96->32, fc 32->10`` (3x3 kernels,
padding 1, ReLU): weights and biases of 72, 8, 1,152, 16, 3,456, 24, 3,072, 32, 320 and 10
values (8,162 in all, 32.6 kB). Parameter index = forward order, so index 0 is the input-side
layer the DLCP policy ranks first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from experiments.training.model import torch_module

if TYPE_CHECKING:
    import torch

CHANNELS = (8, 16, 24)
HIDDEN = 32
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
