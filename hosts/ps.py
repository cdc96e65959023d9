"""Parameter server over the DLCP transport: workers push gradients, the server aggregates
them and every worker pulls the result.

Per tensor and iteration the server waits for the gradient of each of its N workers, sums
them (or averages, or applies SGD to the parameters it holds) and sends the result back to
every worker as a parameter message (stricter loss bound; a worker keeps its previous
values where packets are lost). Tensors are handled as soon as all N pushes of that tensor
are in, and their pulls go to every worker at once (several messages in flight under the
endpoint's window) while the server keeps collecting later pushes.

Membership: the server takes pushes only from worker ids ``0 .. N-1`` (or the N ids of
`workers`); anything else is counted in ``ParameterServer.ignored`` and dropped, never
aggregated. Which address may speak for which worker id is the endpoint's membership
(``Endpoint(peers=...)``, else the first address heard with data). Liveness: the server waits for
pushes as long as the workers it waits for are heard from (it sends them keep-alives);
a worker silent for `timeout` seconds ends the iteration with an error naming it.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from hosts.endpoint import Endpoint, SendReport
from hosts.errors import PeerGoneError, TransportError
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
    max_gradient_loss: float = 0.0  # the largest share lost of any one push
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
        self.members = set(self.workers) if len(self.workers) == num_workers else set(range(num_workers))
        self.ignored: Counter[str] = Counter()  # pushes not aggregated, by reason

    def serve_iteration(self, iteration: int, tensor_ids: Sequence[int], *, num_layers: int | None = None,
                        timeout: float = 30.0) -> ServerRound:
        """Collect every worker's push of `tensor_ids` for `iteration`; answer each tensor
        to every worker as soon as all its pushes are in. `timeout`: how long a worker may
        be silent (PeerGoneError) or, for a worker never heard from, how long without any
        push (TransportError)."""
        started = time.perf_counter()
        layers = num_layers or (max(tensor_ids) + 1 if tensor_ids else 1)
        wanted = set(tensor_ids)
        sums: dict[int, np.ndarray] = {}
        seen: dict[int, set[int]] = {t: set() for t in wanted}
        lost = total = 0
        result = ServerRound(iteration=iteration, tensors=len(wanted), gradient_loss=0.0)
        pulls: list[Future[SendReport]] = []
        try:
            while wanted:
                message = self._next_push(iteration, wanted, seen, timeout)
                t, w = message.key.tensor_id, message.key.worker_id
                if w not in self.members:
                    self.ignored["unknown_worker"] += 1
                    continue
                if w in seen[t]:
                    self.ignored["duplicate"] += 1
                    continue
                if t in sums and sums[t].size != message.values.size:
                    self.ignored["size_mismatch"] += 1
                    raise TransportError(f"iteration {iteration}, tensor {t}: worker {w} pushed "
                                         f"{message.values.size} elements, others {sums[t].size}")
                self.workers.setdefault(w, message.source)
                seen[t].add(w)
                lost += message.values.size - message.received
                total += message.values.size
                result.max_gradient_loss = max(result.max_gradient_loss, message.loss_rate)
                if t in sums:
                    sums[t] += message.values
                else:
                    sums[t] = message.values.copy()
                if len(seen[t]) == self.num_workers:
                    wanted.discard(t)
                    values = self._apply(t, sums.pop(t))
                    for worker in sorted(seen[t]):
                        pulls.append(self.endpoint.send_async(
                            self.workers[worker], values, kind=MsgType.PARAMETER, tensor_id=t,
                            iteration=iteration, num_layers=layers))
        finally:
            result.pulls = [p.result() for p in pulls]
        result.gradient_loss = lost / total if total else 0.0
        result.seconds = time.perf_counter() - started
        return result

    def _next_push(self, iteration: int, wanted: set[int], seen: dict[int, set[int]], timeout: float) -> Delivered:
        def match(key: MessageKey) -> bool:
            return key.kind == MsgType.GRADIENT and key.iteration == iteration and key.tensor_id in wanted

        since = time.monotonic()
        slice_s = max(0.05, min(1.0, timeout / 5))
        while True:
            try:
                return self.endpoint.receive(timeout=slice_s, match=match)
            except PeerGoneError:
                raise
            except TransportError:
                pass
            missing = sorted(w for w in self.members if any(w not in s for t, s in seen.items() if t in wanted))
            for w in missing:
                address = self.workers.get(w)
                if address is not None:
                    self.endpoint.liveness.check(address, since, f"worker {w}'s push of iteration {iteration}",
                                                 limit=timeout)
                    self.endpoint.keepalive(address, since=slice_s)
            if time.monotonic() - since > timeout:
                unknown = [w for w in missing if w not in self.workers]
                raise TransportError(
                    f"iteration {iteration}: no push for {timeout:g} s; still waiting for tensors "
                    f"{sorted(wanted)} from workers {missing}"
                    + (f" (never heard from workers {unknown})" if unknown else ""))

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

    def push_async(self, iteration: int, tensor_id: int, values: Any, **send_options: Any) -> Future[SendReport]:
        """:meth:`push` without waiting: several pushes share the endpoint's window."""
        return self.endpoint.send_async(self.server, values, kind=MsgType.GRADIENT, tensor_id=tensor_id,
                                        iteration=iteration, **send_options)

    def pull(self, iteration: int, tensor_id: int, timeout: float = 30.0) -> Delivered:
        """The server's answer for `tensor_id`; waits while the server is heard from and
        fails once it is silent for `timeout` seconds."""
        key = MessageKey(self.endpoint.job_id, self.server_id, iteration, tensor_id, MsgType.PARAMETER)
        message = self.endpoint.take(key, timeout=timeout, peer=self.server)
        self.previous[tensor_id] = message.values
        return message
