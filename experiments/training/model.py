"""The model: a small MLP; its parameters as flat float32 arrays in forward order.

Tensor ids on the wire are the indices of ``model.parameters()`` (forward order: 0 is the
first layer's weight), so front layers get the low ids the DLCP policy favours.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING

import numpy as np

from experiments.errors import ExperimentError

if TYPE_CHECKING:
    import torch

DEFAULT_HIDDEN = (64,)
CLASSES = 10


def torch_module() -> ModuleType:
    """PyTorch, with one CPU thread (imported on first use: it is an optional extra)."""
    try:
        import torch
    except ImportError as exc:
        raise ExperimentError("the training job needs PyTorch (pip install -e '.[train]')") from exc
    torch.set_num_threads(1)
    return torch


def build_mlp(features: int, hidden: Sequence[int] = DEFAULT_HIDDEN, seed: int = 0) -> torch.nn.Sequential:
    """features -> hidden... -> 10, ReLU between; same seed, same initial weights everywhere."""
    torch = torch_module()
    if not hidden or any(h <= 0 for h in hidden):
        raise ExperimentError(f"hidden layer sizes must be positive, got {list(hidden)}")
    torch.manual_seed(seed)
    layers: list = []
    width = features
    for h in hidden:
        layers += [torch.nn.Linear(width, h), torch.nn.ReLU()]
        width = h
    layers.append(torch.nn.Linear(width, CLASSES))
    return torch.nn.Sequential(*layers)


def parameter_arrays(model: torch.nn.Module) -> list[np.ndarray]:
    """Copies of the parameters, flat float32, in forward order."""
    return [p.detach().cpu().numpy().reshape(-1).astype(np.float32, copy=True) for p in model.parameters()]


def gradient_arrays(model: torch.nn.Module) -> list[np.ndarray]:
    """The gradients of the last backward pass, flat float32, in forward order (0 where none)."""
    out = []
    for p in model.parameters():
        g = p.grad
        out.append(np.zeros(p.numel(), np.float32) if g is None
                   else g.detach().cpu().numpy().reshape(-1).astype(np.float32, copy=True))
    return out


def load_parameters(model: torch.nn.Module, arrays: Sequence[np.ndarray]) -> None:
    """Overwrite the parameters with `arrays` (flat, forward order)."""
    torch = torch_module()
    params = list(model.parameters())
    if len(arrays) != len(params):
        raise ExperimentError(f"{len(arrays)} arrays for a model of {len(params)} tensors")
    with torch.no_grad():
        for p, a in zip(params, arrays):
            if a.size != p.numel():
                raise ExperimentError(f"array of {a.size} elements for a tensor of {p.numel()}")
            p.copy_(torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32)).view_as(p))


def tensor_sizes(model: torch.nn.Module) -> list[int]:
    return [p.numel() for p in model.parameters()]


def accuracy(model: torch.nn.Module, x: np.ndarray, y: np.ndarray) -> float:
    """Share of correctly classified samples."""
    torch = torch_module()
    with torch.no_grad():
        predicted = model(torch.from_numpy(x)).argmax(dim=1).numpy()
    return float((predicted == y).mean())
