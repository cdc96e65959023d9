"""Traces from a PyTorch model profiled on this machine (optional dependency).

Writes the pytorch format the H100 traces use (see :mod:`gradfabric.traces`): one row per
parameter tensor, in the order its gradient becomes ready, with ``grad_ready_us`` (a
post-accumulate-grad hook, after backward starts) and ``forward_use_us`` (a forward
pre-hook on the module that owns it, after forward starts), plus a passes file with the
whole forward, backward and optimizer-step (SGD with momentum) times. Medians over
``repeats`` iterations after one warm-up. Times are multiplied by ``time_scale`` to stand
for a target accelerator (e.g. 0.05 for one 20 times faster than this CPU).
"""

from __future__ import annotations

import importlib
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from simulator.errors import SimulatorError
from simulator.traces import Passes, TensorTiming


def require_torch() -> Any:
    """Import torch or explain how to get it."""
    try:
        return importlib.import_module("torch")
    except ImportError:
        raise SimulatorError(
            "profiling needs PyTorch, which is not installed: pip install 'gradfabric[train]' "
            "(or pip install torch), or use a trace file instead"
        ) from None


@dataclass(frozen=True)
class Profile:
    """One model's measurement: its tensors and whole-pass times, already scaled."""

    tensors: tuple[TensorTiming, ...]
    passes: Passes


def summarize(name: str, precision: str, batch: int, params: Sequence[tuple[str, int]],
              runs: Sequence[tuple[Sequence[float], Sequence[float], float, float, float]],
              time_scale: float) -> Profile:
    """Medians over ``runs`` (each: per-tensor grad-ready and forward-use seconds, forward,
    backward and optimizer seconds), scaled by ``time_scale``."""
    if time_scale <= 0:
        raise SimulatorError(f"time_scale must be positive, not {time_scale}")
    if not params:
        raise SimulatorError(f"{name}: no parameter to profile")
    if not runs:
        raise SimulatorError(f"{name}: no timed iteration")

    def median(values: Any) -> float:
        return statistics.median(values) * time_scale

    tensors = tuple(
        TensorTiming(p, numel, median(r[0][i] for r in runs), median(r[1][i] for r in runs))
        for i, (p, numel) in enumerate(params)
    )
    passes = Passes(name, precision, batch, median(r[2] for r in runs), median(r[3] for r in runs),
                    median(r[4] for r in runs), sum(n for _, n in params))
    return Profile(tensors, passes)


def profile_model(model: Any, example_input: Any, *, name: str = "model", repeats: int = 5,
                  time_scale: float = 1.0, loss_fn: Callable[[Any], Any] | None = None) -> Profile:
    """Profile ``model`` on ``example_input`` (a batch) in fp32; see the module docstring."""
    torch = require_torch()
    if repeats < 1:
        raise SimulatorError("repeats must be at least 1")
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    index = {id(p): i for i, (_, p) in enumerate(params)}
    ready = [float("nan")] * len(params)
    first_use = [float("nan")] * len(params)
    handles = []
    for module in model.modules():
        owned = [index[id(p)] for p in module.parameters(recurse=False) if id(p) in index]
        if owned:
            def before_forward(_m: Any, _i: Any, owned: list[int] = owned) -> None:
                now = time.perf_counter()
                for i in owned:
                    if first_use[i] != first_use[i]:
                        first_use[i] = now

            handles.append(module.register_forward_pre_hook(before_forward))
    for i, (_, p) in enumerate(params):
        def grad_ready(_p: Any, i: int = i) -> None:
            ready[i] = time.perf_counter()

        handles.append(p.register_post_accumulate_grad_hook(grad_ready))
    optimizer = torch.optim.SGD([p for _, p in params], lr=1e-3, momentum=0.9)
    loss_fn = loss_fn or (lambda out: out.float().pow(2).mean())
    runs = []
    try:
        for run in range(repeats + 1):
            ready[:] = [float("nan")] * len(params)
            first_use[:] = [float("nan")] * len(params)
            optimizer.zero_grad(set_to_none=True)
            t0 = time.perf_counter()
            loss = loss_fn(model(example_input))
            t1 = time.perf_counter()
            loss.backward()
            t2 = time.perf_counter()
            optimizer.step()
            t3 = time.perf_counter()
            if run == 0:
                continue
            missing = [params[i][0] for i in range(len(params)) if ready[i] != ready[i]]
            if missing:
                raise SimulatorError(f"{name}: no gradient reached {', '.join(missing[:5])}")
            runs.append(([r - t1 for r in ready], [u - t0 for u in first_use], t1 - t0, t2 - t1, t3 - t2))
    finally:
        for h in handles:
            h.remove()
    batch = int(example_input.shape[0]) if hasattr(example_input, "shape") else 1
    return summarize(name, "fp32", batch, [(n, int(p.numel())) for n, p in params], runs, time_scale)


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
