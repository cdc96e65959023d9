"""Layer-wise overlap for data-parallel PyTorch: why priority scheduling can pay off.

DDP waits for every gradient bucket at the end of backward, so sending front layers first
changes nothing. Here each parameter's gradient is handed to an all-reduce (or PS
push/pull) as soon as backward accumulates it (``register_post_accumulate_grad_hook``),
its SGD update is applied when that all-reduce completes, and each module's forward waits
(a forward pre-hook) only for its own parameters: the next iteration's forward starts on
the front layers while back-layer gradients are still in flight, as in P3 and ByteScheduler.

``allreduce(index, gradient)`` is any function returning a ``concurrent.futures.Future`` of
the averaged gradient (index = the parameter's forward-order index, 0 = input side, the
tag priority schedulers order by)::

    overlap = LayerwiseOverlap(model, allreduce, lr=0.1)
    for x, y in batches:
        loss_fn(model(x), y).backward()   # gradients leave as they are ready
    overlap.finish()                      # apply what is still in flight
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from experiments.errors import ExperimentError


class LayerwiseOverlap:
    """See the module doc. ``events`` records ``(kind, index, seconds)`` with kind
    ``forward`` (a module's forward started; index of its first parameter), ``ready`` (a
    gradient left) and ``arrived`` (its all-reduce completed), for tests and plots."""

    def __init__(self, model: Any, allreduce: Callable[[int, Any], Future[Any]], *, lr: float,
                 timeout_s: float = 60.0) -> None:
        self.model = model
        self.allreduce = allreduce
        self.lr = lr
        self.timeout_s = timeout_s
        self.params = list(model.parameters())
        if not self.params:
            raise ExperimentError("layer-wise overlap: the model has no parameters")
        self.index = {id(p): i for i, p in enumerate(self.params)}
        self.pending: dict[int, Future[Any]] = {}
        self.events: list[tuple[str, int, float]] = []
        self._lock = threading.Lock()
        self._origin = time.perf_counter()
        self._handles = [p.register_post_accumulate_grad_hook(self._on_grad) for p in self.params]
        for module in model.modules():
            if any(True for _ in module.parameters(recurse=False)):
                self._handles.append(module.register_forward_pre_hook(self._before_forward))

    def _note(self, kind: str, index: int) -> None:
        with self._lock:
            self.events.append((kind, index, time.perf_counter() - self._origin))

    def _on_grad(self, param: Any) -> None:
        i = self.index[id(param)]
        if i in self.pending:
            raise ExperimentError(f"parameter {i}: a new gradient before the previous one was applied "
                                  "(call forward, or finish(), between backward passes)")
        grad = param.grad.detach().clone()
        param.grad = None
        self._note("ready", i)
        future = self.allreduce(i, grad)
        future.add_done_callback(lambda _f, i=i: self._note("arrived", i))
        self.pending[i] = future

    def _apply(self, i: int) -> None:
        future = self.pending.pop(i, None)
        if future is None:
            return
        mean = future.result(timeout=self.timeout_s)
        import torch

        with torch.no_grad():
            self.params[i].sub_(self.lr * mean.view_as(self.params[i]))

    def _before_forward(self, module: Any, _inputs: Any) -> None:
        ids = [self.index[id(p)] for p in module.parameters(recurse=False)]
        for i in ids:
            self._apply(i)
        self._note("forward", min(ids))  # the module's forward runs now, its parameters updated

    def finish(self) -> None:
        """Apply every update still in flight (after the last backward)."""
        for i in sorted(self.pending):
            self._apply(i)

    def close(self) -> None:
        self.finish()
        for h in self._handles:
            h.remove()
