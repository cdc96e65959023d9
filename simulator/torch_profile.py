"""Traces from a PyTorch model profiled on this machine's CPU (optional dependency).

For each leaf module that owns parameters (a *layer*, in the order forward first reaches
it): its element count, its forward time (from the end of the previous layer's forward to
the end of its own, so parameter-free modules in between are counted) and the time its
gradient becomes ready during backward (post-accumulate-grad hooks on its parameters).
A layer's ``backward_s`` is the time from the previous gradient arrival (or the start of
backward) to its own, so the simulator reproduces the measured arrival pattern. Medians
over ``repeats`` runs after one warm-up run. CPU times are multiplied by ``time_scale`` to
stand for a target accelerator (e.g. 0.05 for one 20 times faster than this CPU).
"""

from __future__ import annotations

import importlib
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from hosts.schedulers import Layer
from simulator.errors import SimulatorError
from simulator.traces import ModelTrace


def require_torch() -> Any:
    """Import torch or explain how to get it."""
    try:
        return importlib.import_module("torch")
    except ImportError:
        raise SimulatorError(
            "profiling needs PyTorch, which is not installed: pip install 'gradfabric[train]' "
            "(or pip install torch), or use a trace file instead"
        ) from None


def arrival_deltas(ready_times: Sequence[float], start: float) -> list[float]:
    """Per-layer backward time: the gap from the previous arrival (in time order) to each."""
    order = sorted(range(len(ready_times)), key=lambda i: ready_times[i])
    deltas = [0.0] * len(ready_times)
    previous = start
    for i in order:
        deltas[i] = max(0.0, ready_times[i] - previous)
        previous = max(previous, ready_times[i])
    return deltas


def build_trace(name: str, names: Sequence[str], numels: Sequence[int], forward_s: Sequence[Sequence[float]],
                backward_s: Sequence[Sequence[float]], time_scale: float, batch_size: int) -> ModelTrace:
    """A trace from per-run measurements (medians taken, times scaled by ``time_scale``)."""
    if time_scale <= 0:
        raise SimulatorError(f"time_scale must be positive, not {time_scale}")
    if not names:
        raise SimulatorError(f"{name}: no layer with parameters to profile")
    layers = tuple(
        Layer(i, names[i], int(numels[i]),
              statistics.median(run[i] for run in forward_s) * time_scale,
              statistics.median(run[i] for run in backward_s) * time_scale)
        for i in range(len(names))
    )
    return ModelTrace(name, layers, batch_size=batch_size, source="torch profile")


def profile_model(model: Any, example_input: Any, *, name: str = "model", repeats: int = 5,
                  time_scale: float = 1.0, loss_fn: Callable[[Any], Any] | None = None) -> ModelTrace:
    """Profile ``model`` on ``example_input`` (a batch); see the module docstring."""
    require_torch()
    if repeats < 1:
        raise SimulatorError("repeats must be at least 1")
    leaves = [(n, m) for n, m in model.named_modules()
              if not list(m.children()) and any(True for _ in m.parameters(recurse=False))]
    stamps: dict[int, float] = {}
    order: list[int] = []
    ready: dict[int, float] = {}
    handles = []
    for idx, (_, module) in enumerate(leaves):
        def after_forward(_m: Any, _i: Any, _o: Any, idx: int = idx) -> None:
            stamps[idx] = time.perf_counter()
            if idx not in order:
                order.append(idx)

        handles.append(module.register_forward_hook(after_forward))
        for p in module.parameters(recurse=False):
            if p.requires_grad:
                def grad_ready(_p: Any, idx: int = idx) -> None:
                    ready[idx] = max(ready.get(idx, 0.0), time.perf_counter())

                handles.append(p.register_post_accumulate_grad_hook(grad_ready))
    loss_fn = loss_fn or (lambda out: out.float().pow(2).mean())
    fwd_runs: list[list[float]] = []
    bwd_runs: list[list[float]] = []
    try:
        for run in range(repeats + 1):
            stamps.clear()
            ready.clear()
            model.zero_grad(set_to_none=True)
            t0 = time.perf_counter()
            loss = loss_fn(model(example_input))
            t1 = time.perf_counter()
            loss.backward()
            if run == 0:
                continue
            if len(stamps) != len(leaves) or len(ready) != len(leaves):
                raise SimulatorError(f"{name}: some layers were not used by forward or got no gradient")
            seq = sorted(range(len(leaves)), key=lambda i: stamps[i])
            fwd = [0.0] * len(leaves)
            prev = t0
            for i in seq:
                fwd[i] = stamps[i] - prev
                prev = stamps[i]
            fwd_runs.append([fwd[i] for i in seq])
            deltas = arrival_deltas([ready[i] for i in range(len(leaves))], t1)
            bwd_runs.append([deltas[i] for i in seq])
    finally:
        for h in handles:
            h.remove()
    seq = sorted(range(len(leaves)), key=lambda i: stamps[i])
    names = [leaves[i][0] for i in seq]
    numels = [sum(p.numel() for p in leaves[i][1].parameters(recurse=False)) for i in seq]
    batch = int(example_input.shape[0]) if hasattr(example_input, "shape") else 1
    return build_trace(name, names, numels, fwd_runs, bwd_runs, time_scale, batch)


def builtin_model(name: str) -> tuple[Any, Callable[[int], Any]]:
    """Small models that need only torch: ``mlp`` and ``convnet`` (CIFAR-sized input).

    Returns the model and a function making an input batch of a given size.
    """
    torch = require_torch()
    nn = torch.nn
    if name == "mlp":
        model = nn.Sequential(nn.Flatten(), nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                              nn.Linear(1024, 10))
        return model, lambda b: torch.randn(b, 1, 28, 28)
    if name == "convnet":
        model = nn.Sequential(
            nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(64, 128, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
            nn.Linear(128 * 8 * 8, 256), nn.ReLU(), nn.Linear(256, 10),
        )
        return model, lambda b: torch.randn(b, 3, 32, 32)
    raise SimulatorError(f"unknown built-in model {name!r}; choose mlp or convnet")
