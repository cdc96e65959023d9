"""Layer-wise overlap (issue 28): updates applied as all-reduces complete, each forward
layer waiting only for its own parameters, so with priority the next forward starts on the
front layers while back-layer gradients are still in flight."""

from __future__ import annotations

import copy
import threading
import time
from concurrent.futures import Future

import pytest

torch = pytest.importorskip("torch")

from experiments.training.overlap import LayerwiseOverlap  # noqa: E402

TRANSFER_S = 0.05  # one gradient on the fake link: long against a tiny MLP's backward
HOLD_S = 20.0  # the longest the link holds iteration 1's last gradient for the next forward
GRADIENTS = 8  # the MLP's parameter tensors


class FakeLink:
    """One link that sends one gradient at a time, `TRANSFER_S` each: ``priority`` picks the
    lowest parameter index waiting (front layer first), ``fifo`` the oldest."""

    def __init__(self, order: str, hold: threading.Event | None = None) -> None:
        self.order = order
        self.hold = hold  # the link's GRADIENTS-th gradient waits for this event (or HOLD_S)
        self.sent = 0
        self.queue: list[tuple[int, int, object, Future]] = []
        self.cv = threading.Condition()
        self.seq = 0
        self.stop = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def allreduce(self, index: int, grad: object) -> Future:
        future: Future = Future()
        with self.cv:
            self.seq += 1
            self.queue.append((index, self.seq, grad, future))
            self.cv.notify()
        return future

    def _run(self) -> None:
        while True:
            with self.cv:
                while not self.queue and not self.stop:
                    self.cv.wait()
                if self.stop:
                    return
                key = (lambda e: e[0]) if self.order == "priority" else (lambda e: e[1])
                item = min(self.queue, key=key)
                self.queue.remove(item)
            self.sent += 1
            if self.hold is not None and self.sent == GRADIENTS:
                self.hold.wait(HOLD_S)
            time.sleep(TRANSFER_S)
            item[3].set_result(item[2])  # world of one: the mean is the gradient

    def close(self) -> None:
        with self.cv:
            self.stop = True
            self.cv.notify()
        self.thread.join(5)


def mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 8), torch.nn.ReLU(),
                               torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))


def two_iterations(order: str, hold_back: bool = False) -> tuple[float, dict[int, float], list[int]]:
    """(first forward layer's start in iteration 2, iteration 1's arrival time by parameter
    index, arrival order of iteration 1). With ``hold_back`` the link holds iteration 1's last
    gradient until the second forward's first layer has started, so what the test sees does
    not depend on how fast a loaded machine runs the threads: a forward that waits for every
    gradient starts only once the hold times out (`HOLD_S`), after that gradient arrived."""
    model = mlp()
    started = threading.Event()
    link = FakeLink(order, started if hold_back else None)
    overlap = LayerwiseOverlap(model, link.allreduce, lr=0.1)
    calls = [0]

    def first_layer_runs(module: torch.nn.Module, inputs: object) -> None:  # after the overlap's own hook
        calls[0] += 1
        if calls[0] == 2:
            started.set()

    model[0].register_forward_pre_hook(first_layer_runs)
    x, y = torch.randn(16, 6), torch.randint(0, 3, (16,))
    try:
        torch.nn.functional.cross_entropy(model(x), y).backward()
        mark = len(overlap.events)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        overlap.finish()
    finally:
        link.close()
    second = overlap.events[mark:]
    first_forward = next(t for kind, i, t in second if kind == "forward" and i == 0)
    arrivals = [(t, i) for kind, i, t in overlap.events if kind == "arrived"][:GRADIENTS]
    return first_forward, {i: t for t, i in arrivals}, [i for _, i in sorted(arrivals)]


def test_with_priority_the_first_layer_starts_before_the_last_gradient_arrives() -> None:
    first_forward, arrived, order = two_iterations("priority", hold_back=True)
    # the front layer's tensors go first, after at most the one already on the link
    # (none when the link's thread first ran after backward, on a loaded machine)
    assert {0, 1} <= set(order[:3]), order
    assert first_forward < max(arrived.values()), (first_forward, arrived, order)


def test_in_backward_order_the_first_layer_waits_for_the_last_gradient() -> None:
    first_forward, arrived, order = two_iterations("fifo")
    assert order == [7, 6, 5, 4, 3, 2, 1, 0]
    assert first_forward >= max(arrived.values()) - 1e-3, (first_forward, arrived)


def test_updates_equal_plain_sgd() -> None:
    model, reference = mlp(), mlp()
    opt = torch.optim.SGD(reference.parameters(), lr=0.1)

    def done(_i: int, grad: object) -> Future:
        f: Future = Future()
        f.set_result(grad)
        return f

    overlap = LayerwiseOverlap(model, done, lr=0.1)
    gen = torch.Generator().manual_seed(3)
    for _ in range(3):
        x, y = torch.randn(16, 6, generator=gen), torch.randint(0, 3, (16,), generator=gen)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.zero_grad()
        torch.nn.functional.cross_entropy(reference(x), y).backward()
        opt.step()
    overlap.close()
    for a, b in zip(model.parameters(), reference.parameters()):
        assert torch.allclose(a, b, atol=1e-6)
    assert copy.deepcopy(overlap.pending) == {}
