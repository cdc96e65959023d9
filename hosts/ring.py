"""Ring all-reduce over the DLCP transport.

N ranks in a ring; each tensor is cut into N chunks. Reduce-scatter: in N-1 steps each rank
sends one chunk to its right neighbour and adds the chunk arriving from its left one;
all-gather: in N-1 more steps the fully reduced chunks travel round the ring. Reduce-scatter
chunks are gradient messages (zero-filled where lost); all-gather chunks are parameter
messages (stricter bound; lost values keep the previous all-reduce's result).

Received chunks go straight into the rank's tensor: a reduce-scatter chunk is added into it
as its packets arrive (each value once; a lost one contributes nothing, as a zero would), an
all-gather chunk is placed there (:meth:`hosts.receiver.Reassembler.expect`), so no chunk is
copied or added a second time, unless its first packet came before the all-reduce began.

Each step is a message of its own: the header's ``iteration`` field carries
``(iteration * MAX_PARTS + part) * 2 * (N - 1) + step`` (``part`` numbers the all-reduces of
one iteration that share a tensor id) so that no two chunks share a message identity (the
switch does not look at this field).

Overlap: within a step the chunk to the right is sent while the chunk from the left is
awaited, and all-reduces of different tensors (or parts) may run at once
(:meth:`RingAllReduce.allreduce_async`, or ``allreduce`` from several threads): their
steps interleave under the endpoint's one congestion window. A rank waits for its left
neighbour as long as it is heard from (keep-alives) and fails once it is silent for
`timeout` seconds, naming it.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hosts.endpoint import Endpoint, SendReport
from hosts.errors import TransportError
from hosts.messages import MessageKey
from hosts.packetize import as_float32
from hosts.receiver import Address
from hosts.wire import MsgType

#: All-reduces per iteration and tensor id that the wire numbering keeps apart.
MAX_PARTS = 1024


@dataclass
class RingReport:
    """What one all-reduce took. `lost_elements` / `received_elements` are of the reduce
    stage (gradient values: what a loss share of the gradients is made of); the all-gather
    stage (parameter messages, a stricter bound) is counted apart in `gather_*`."""

    sends: list[SendReport] = field(default_factory=list)
    lost_elements: int = 0  # reduce stage: gradient values zero-filled
    received_elements: int = 0  # reduce stage: gradient values this rank received
    gather_lost: int = 0  # all-gather stage: values kept from before (lost)
    gather_received: int = 0  # all-gather stage: values this rank received
    seconds: float = 0.0


class RingAllReduce:
    """One rank of a ring; ranks are the workers' ids (0..N-1), `peers[r]` their addresses.

    `inline_sends`: each step's chunk is sent by the all-reduce's own thread, then the
    neighbour's chunk taken (the endpoint's receive thread completes it meanwhile), instead of
    handing the send to the endpoint's sender threads: one thread per all-reduce, and messages
    never queue for a sender thread in FIFO order (room in the window goes by priority)."""

    def __init__(self, endpoint: Endpoint, rank: int, peers: list[Address], *, concurrency: int = 8,
                 inline_sends: bool = False) -> None:
        if not 0 <= rank < len(peers):
            raise TransportError(f"rank {rank} is not in a ring of {len(peers)}")
        if endpoint.worker_id != rank:
            raise TransportError(f"the endpoint's worker id {endpoint.worker_id} must be the rank {rank}")
        self.endpoint = endpoint
        self.rank = rank
        self.size = len(peers)
        self.right = peers[(rank + 1) % self.size]
        self.left_rank = (rank - 1) % self.size
        self.left = peers[self.left_rank]
        self.concurrency = concurrency
        self.inline_sends = inline_sends
        self._executor: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self._failed: BaseException | None = None  # the first all-reduce of allreduce_async that failed
        self.steps = 2 * (self.size - 1)
        self.previous: dict[tuple[int, int], np.ndarray] = {}  # (tensor id, part) -> last result
        endpoint.reassembler.prior = self._prior

    def _chunks(self, n: int) -> list[int]:
        return [round(i * n / self.size) for i in range(self.size + 1)]

    def _prior(self, key: MessageKey) -> np.ndarray | None:
        part = (key.iteration // self.steps) % MAX_PARTS
        previous = self.previous.get((key.tensor_id, part))
        if previous is None or key.kind != MsgType.PARAMETER:
            return None
        step = key.iteration % self.steps - (self.size - 1)
        c = (self.left_rank + 1 - step) % self.size
        b = self._chunks(previous.size)
        return previous[b[c]:b[c + 1]]

    def allreduce(self, values: Any, *, iteration: int, tensor_id: int = 0, part: int = 0,
                  num_layers: int = 1, average: bool = False, timeout: float = 30.0, inplace: bool = False,
                  **send_options: Any) -> tuple[np.ndarray, RingReport]:
        """The element-wise sum (or mean) of `values` over all ranks (`send_options` go to
        :meth:`Endpoint.send`, e.g. ``prio_hint`` or ``eligible_share``). `inplace`: reduce
        in `values` itself (a contiguous float32 array, as gloo does with a bucket): chunks
        are sent from it without a copy, and the result is `values`."""
        started = time.perf_counter()
        if inplace:
            if not (isinstance(values, np.ndarray) and values.dtype == np.float32 and values.flags.c_contiguous):
                raise TransportError("an in-place all-reduce needs a contiguous float32 numpy array, not "
                                     f"{type(values).__name__} {getattr(values, 'dtype', '')}")
            buf = values.reshape(-1)
        else:
            buf = as_float32(values).copy()
        report = RingReport()
        if self.size == 1:
            return buf, report
        if not 0 <= part < MAX_PARTS:
            raise TransportError(f"ring all-reduce part {part} is not in 0..{MAX_PARTS - 1}")
        b = self._chunks(buf.size)
        base = (iteration * MAX_PARTS + part) * self.steps
        if base + self.steps > 0xFFFFFFFF:
            raise TransportError(f"iteration {iteration} is too large for the ring's message numbering")
        sends: list[Future[SendReport]] = []
        job = self.endpoint.job_id
        reassembler = self.endpoint.reassembler
        expected = []
        for step in range(self.steps):  # reduce chunks are added into buf, all-gather chunks placed there
            gather = step >= self.size - 1
            s = step - (self.size - 1) if gather else step
            recv_c = (self.rank - s) % self.size if gather else (self.rank - s - 1) % self.size
            if b[recv_c + 1] > b[recv_c]:
                key = MessageKey(job, self.left_rank, base + step, tensor_id,
                                 MsgType.PARAMETER if gather else MsgType.GRADIENT)
                # A reduce chunk is sent (at the next step) only once its sum is complete.
                reassembler.expect(key, buf[b[recv_c]:b[recv_c + 1]], add=not gather)
                expected.append(key)
        try:
            for step in range(self.steps):
                gather = step >= self.size - 1
                s = step - (self.size - 1) if gather else step
                kind = MsgType.PARAMETER if gather else MsgType.GRADIENT
                send_c = (self.rank + 1 - s) % self.size if gather else (self.rank - s) % self.size
                recv_c = (self.rank - s) % self.size if gather else (self.rank - s - 1) % self.size
                if b[send_c + 1] > b[send_c]:
                    # No copy: a chunk changes only once the neighbour holds it (what it then
                    # still receives is dropped as late, never placed).
                    chunk = buf[b[send_c]:b[send_c + 1]]
                    if self.inline_sends:  # in this thread: the take below finds it in the inbox
                        sent: Future[SendReport] = Future()
                        sent.set_result(self.endpoint.send(self.right, chunk, kind=kind, tensor_id=tensor_id,
                                                           iteration=base + step, num_layers=num_layers,
                                                           **send_options))
                        sends.append(sent)
                    else:
                        sends.append(self.endpoint.send_async(
                            self.right, chunk, copy=False, kind=kind, tensor_id=tensor_id,
                            iteration=base + step, num_layers=num_layers, **send_options))
                if b[recv_c + 1] > b[recv_c]:
                    key = MessageKey(self.endpoint.job_id, self.left_rank, base + step, tensor_id, kind)
                    got = self.endpoint.take(key, timeout=timeout, peer=self.left)
                    if gather:
                        report.gather_lost += got.values.size - got.received
                        report.gather_received += got.values.size
                        if not np.shares_memory(got.values, buf):  # its first packet came before expect()
                            buf[b[recv_c]:b[recv_c + 1]] = got.values
                    else:
                        report.lost_elements += got.values.size - got.received
                        report.received_elements += got.values.size
                        if not np.shares_memory(got.values, buf):  # else it was added as it arrived
                            buf[b[recv_c]:b[recv_c + 1]] += got.values
                        if average and step == self.size - 2:  # this rank's chunk is complete: its
                            buf[b[recv_c]:b[recv_c + 1]] /= self.size  # mean is what the gather sends
        finally:
            reassembler.unexpect(expected)  # met, or (when a step failed) never to be met
            report.sends = [f.result() for f in sends]
        if self.endpoint.bounds.get(MsgType.PARAMETER, 0.0) > 0:  # lost values then keep these
            self.previous[(tensor_id, part)] = buf.copy()
        report.seconds = time.perf_counter() - started
        return buf, report

    def allreduce_async(self, values: Any, **options: Any) -> Future[tuple[np.ndarray, RingReport]]:
        """:meth:`allreduce` in the ring's threads (at most `concurrency` at once), so that
        all-reduces of different tensors overlap; `values` is copied first."""
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(self.concurrency, thread_name_prefix=f"ring-{self.rank}")
        future = self._executor.submit(self.allreduce, as_float32(values).copy(), **options)
        future.add_done_callback(self._note_failure)
        return future

    def _note_failure(self, future: Future[tuple[np.ndarray, RingReport]]) -> None:
        if not future.cancelled() and future.exception() is not None and self._failed is None:
            self._failed = future.exception()

    def close(self) -> None:
        """Wait for the all-reduces still running and stop the ring's threads. When one of
        them failed, the endpoint is aborted first (:meth:`Endpoint.abort`), so the others
        fail at once instead of waiting for ever for a neighbour that is still alive."""
        if self._executor is not None:
            if self._failed is not None:
                self.endpoint.abort(f"an all-reduce failed: {type(self._failed).__name__}: {self._failed}")
            self._executor.shutdown(wait=True)
