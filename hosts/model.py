"""Models and gradient sources for the agents.

A model is a sequence of :class:`~hosts.schedulers.Layer` (forward order): read from a trace
CSV (every format :mod:`gradfabric.traces` knows: ours, pytorch, the Caffe blob logs, ASTRA-sim) or
made from a list of layer sizes. A gradient source gives each iteration's gradients: seeded
random values (`random`), arrays from an ``.npz`` file (one array per layer, in layer order),
or any callable returning numpy arrays or torch tensors.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from gradfabric.traces import Layer, load_trace  # the one trace reader, shared with the simulator
from hosts.errors import ModelError
from hosts.packetize import as_float32

GradientSource = Callable[[int], Sequence[Any]]


def load_model(path: str | Path) -> tuple[Layer, ...]:
    """Layers of a trace CSV."""
    layers = load_trace(path).layers
    if len(layers) > 0xFFFF:
        raise ModelError(f"{path}: {len(layers)} layers do not fit the 16-bit tensor id")
    return layers


def model_from_sizes(sizes: Sequence[int], *, backward_s: float = 0.001, forward_s: float = 0.0) -> tuple[Layer, ...]:
    """Layers of the given element counts, each with the same compute times."""
    if not sizes or any(n <= 0 for n in sizes):
        raise ModelError(f"layer sizes must be positive element counts, got {list(sizes)}")
    return tuple(Layer(i, f"layer{i}", int(n), forward_s, backward_s) for i, n in enumerate(sizes))


def random_source(layers: Sequence[Layer], *, seed: int, rank: int) -> GradientSource:
    """Normal gradients, reproducible from (seed, rank, iteration)."""

    def gradients(iteration: int) -> list[np.ndarray]:
        rng = np.random.default_rng([seed, rank, iteration])
        return [rng.standard_normal(layer.numel, dtype=np.float32) * 1e-2 for layer in layers]

    return gradients


def npz_source(path: str | Path, layers: Sequence[Layer]) -> GradientSource:
    """The same gradients every iteration, from an .npz with one array per layer."""
    try:
        with np.load(path) as data:
            arrays = [as_float32(data[name]) for name in data.files]
    except (OSError, ValueError) as exc:
        raise ModelError(f"cannot read gradients from {path}: {exc}") from None
    if [a.size for a in arrays] != [l.numel for l in layers]:
        raise ModelError(f"{path}: array sizes {[a.size for a in arrays]} do not match the model's "
                         f"layers {[l.numel for l in layers]}")
    return lambda iteration: arrays
