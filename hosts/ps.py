"""Parameter server over the DLCP transport: workers push gradients, the server aggregates
them and every worker pulls the result.

Per tensor and iteration the server waits for the gradient of each of its N workers, sums
them (or averages, or applies SGD to the parameters it holds) and sends the result back to
every worker as a parameter message (stricter loss bound; a worker keeps its previous
values where packets are lost). Tensors are handled as soon as all N pushes of that tensor
are in, so layers flow back while later layers are still being pushed.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from hosts.endpoint import Endpoint, SendReport
from hosts.errors import TransportError
from hosts.messages import Delivered, MessageKey
from hosts.receiver import Address
from hosts.wire import MsgType

#: worker_id the parameter server uses on the wire.
PS_WORKER_ID = 0xFFFF

Update = Literal["sum", "mean", "sgd"]


@dataclass
class ServerRound:
    """What one iteration cost the server."""

    iteration: int
    tensors: int
    gradient_loss: float  # share of pushed elements lost (zero-filled)
    pulls: list[SendReport] = field(default_factory=list)
    seconds: float = 0.0


class ParameterServer:
    """Aggregates the pushes of `num_workers` workers; see the module doc."""

    def __init__(
        self,
        endpoint: Endpoint,
        num_workers: int,
        *,
        update: Update = "sum",
        lr: float = 0.1,
        initial: Mapping[int, np.ndarray] | None = None,
        workers: Mapping[int, Address] | None = None,
    ) -> None:
        """`workers` fixes where each worker's pulls go; others are answered where their
        pushes came from."""
        if num_workers < 1:
            raise TransportError("a parameter server needs at least one worker")
        self.endpoint = endpoint
        self.num_workers = num_workers
        self.update = update
        self.lr = lr
        self.params: dict[int, np.ndarray] = {
            t: np.array(v, np.float32).reshape(-1) for t, v in (initial or {}).items()}
        self.workers: dict[int, Address] = dict(workers or {})

    def serve_iteration(self, iteration: int, tensor_ids: Sequence[int], *, num_layers: int | None = None,
                        timeout: float = 30.0) -> ServerRound:
        """Collect every worker's push of `tensor_ids` for `iteration`; answer each tensor."""
        started = time.perf_counter()
        layers = num_layers or (max(tensor_ids) + 1 if tensor_ids else 1)
        wanted = set(tensor_ids)
        sums: dict[int, np.ndarray] = {}
        seen: dict[int, set[int]] = {t: set() for t in wanted}
        lost = total = 0
        result = ServerRound(iteration=iteration, tensors=len(wanted), gradient_loss=0.0)
        deadline = time.monotonic() + timeout
        while wanted:
            message = self._next_push(iteration, wanted, deadline)
            t, w = message.key.tensor_id, message.key.worker_id
            if w in seen[t]:
                continue
            self.workers.setdefault(w, message.source)
            seen[t].add(w)
            lost += message.values.size - message.received
            total += message.values.size
            if t in sums:
                if sums[t].size != message.values.size:
                    raise TransportError(f"tensor {t}: worker {w} pushed {message.values.size} elements, "
                                         f"others {sums[t].size}")
                sums[t] += message.values
            else:
                sums[t] = message.values.copy()
            if len(seen[t]) == self.num_workers:
                wanted.discard(t)
                values = self._apply(t, sums.pop(t))
                for worker in sorted(seen[t]):
                    result.pulls.append(self.endpoint.send(
                        self.workers[worker], values, kind=MsgType.PARAMETER, tensor_id=t,
                        iteration=iteration, num_layers=layers))
        result.gradient_loss = lost / total if total else 0.0
        result.seconds = time.perf_counter() - started
        return result

    def _next_push(self, iteration: int, wanted: set[int], deadline: float) -> Delivered:
        def match(key: MessageKey) -> bool:
            return key.kind == MsgType.GRADIENT and key.iteration == iteration and key.tensor_id in wanted

        try:
            return self.endpoint.receive(timeout=max(0.0, deadline - time.monotonic()), match=match)
        except TransportError:
            raise TransportError(f"iteration {iteration}: still waiting for tensors {sorted(wanted)} "
                                 f"from some of {self.num_workers} workers") from None

    def _apply(self, tensor_id: int, aggregate: np.ndarray) -> np.ndarray:
        if self.update == "sum":
            result = aggregate
        elif self.update == "mean":
            result = aggregate / self.num_workers
        else:
            params = self.params.setdefault(tensor_id, np.zeros_like(aggregate))
            params -= self.lr * aggregate / self.num_workers
            result = params
        return result


class PsClient:
    """A worker's side of the parameter server: push gradients, pull results."""

    def __init__(self, endpoint: Endpoint, server: Address, *, server_id: int = PS_WORKER_ID) -> None:
        self.endpoint = endpoint
        self.server = server
        self.server_id = server_id
        self.previous: dict[int, np.ndarray] = {}
        endpoint.reassembler.prior = self._prior

    def _prior(self, key: MessageKey) -> np.ndarray | None:
        return self.previous.get(key.tensor_id) if key.worker_id == self.server_id else None

    def push(self, iteration: int, tensor_id: int, values: Any, **send_options: Any) -> SendReport:
        return self.endpoint.send(self.server, values, kind=MsgType.GRADIENT, tensor_id=tensor_id,
                                  iteration=iteration, **send_options)

    def pull(self, iteration: int, tensor_id: int, timeout: float = 30.0) -> Delivered:
        key = MessageKey(self.endpoint.job_id, self.server_id, iteration, tensor_id, MsgType.PARAMETER)
        message = self.endpoint.take(key, timeout=timeout)
        self.previous[tensor_id] = message.values
        return message
