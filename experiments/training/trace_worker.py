"""One rank of a trace-driven training job: a real job's compute replaced by its H100 trace.

Compute is emulated by waiting, at the trace's per-tensor times multiplied by ``k``; the
gradients are tensors of the trace's sizes divided by ``b`` (:mod:`experiments.scaling`)
carrying values with a real model's magnitude distribution
(:mod:`experiments.training.grad_values`), all-reduced or pushed as a scheduler of
``hosts/schedulers`` decides (``fusion``: DDP's buckets; ``wfbp``; ``p3``: ByteScheduler/P3
priority with partitions and credit; ``dlcp``: priority, partitions and loss bounds).

One iteration: the forward pass walks the tensors in the order forward first uses them
(the trace's ``forward_use_us``); the backward pass makes gradients ready in the trace's
``ready_order`` at its measured gaps; each gradient goes to the scheduler, whose transfers
start at once (pipelined, several in flight). Two ways of using the results:

* ``ddp``: the iteration ends when every transfer is done, then the optimizer step (as DDP
  waits for every bucket at the end of backward);
* ``layerwise``: each tensor's update is applied when its transfer (ring) or pull (PS)
  completes; the next forward pass waits, tensor by tensor, only for the tensors it is about
  to use, so front layers start while back-layer gradients are still in flight (P3,
  ByteScheduler). Time the forward pass waited is recorded (exposed communication).

Collectives: ``ring`` over DLCP (:class:`hosts.ring.RingAllReduce`) or TCP
(:class:`~experiments.training.tcp_collectives.TcpRing`); ``ps``: rank 0 is a parameter
server (:class:`hosts.ps.ParameterServer` or ``TcpPsServer``), ranks 1.. are workers. The
job's definition, scaled trace and scheduler: :mod:`experiments.training.trace_job`.

JSON lines as :mod:`experiments.training.ddp_worker` (``listening``, then ``iteration``
records, ``done``; a TCP rank's iteration record carries ``tcp_info``, each peer socket's
``TCP_INFO`` when the iteration ended); ``--wait-go`` holds until a line arrives on stdin, and after ``done``
until another does (or stdin ends) before closing: the runner sends it once every rank of the
job is done, a close barrier without which a rank that completed its last receive closed while
its peer still waited for the final answer to that message (its goodbye then failed the peer)::

    python -m experiments.training.trace_worker --rank 0 --world 2 \
        --peers 10.0.0.1:19600,10.0.0.4:19600 --comm dlcp --scheduler dlcp --overlap layerwise
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import queue
import sys
import threading
import time
from concurrent.futures import Future
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from experiments.errors import ExperimentError
from experiments.training.accounting import TOTALED, IterationTotals, received
from experiments.training.cpu import cpu_seconds, schedstat, starvation, thread_stats, wait_per_slice, wait_share
from experiments.scaling import transport_timers
from experiments.training.trace_job import (  # noqa: F401  (re-exported: the job's definition)
    COMMODITY_DSCP, DDP_BUCKET_BYTES, DDP_FIRST_BUCKET_BYTES, MERGE_BYTES, PARTITION_BYTES,
    SHARED_TRACES, TraceJob, _marking, forward_order, make_scheduler, scaled_model)
from gradfabric.traces import ModelTrace, merge_layers, unit_of  # noqa: F401  (merge_layers, unit_of: re-exported)

#: All-reduces running at once. Priority schedulers hand transfers out in an order that
#: depends on timing, so ranks may start them in different orders; a ring step waits for its
#: neighbour's, so a bounded pool could hold only transfers the neighbour has not started
#: yet (a deadlock). Every transfer gets a thread of its own, which also sends its DLCP ring
#: steps (``inline_sends``: no hand-off to the endpoint's sender threads).
MAX_CONCURRENT = 1024


def _sleep_until(t: float) -> None:
    pause = t - time.perf_counter()
    if pause > 0.0002:
        time.sleep(pause)


@dataclass
class _Flight:
    iteration: int
    transfer: Any
    scheduler: Any
    started: float
    futures: list[Future[Any]]


class TraceRank:
    """A worker rank (module doc); ``collective`` is a ring, or a PS client with ``pull``."""

    def __init__(self, job: TraceJob, trace: ModelTrace, rank: int, collective: Any, grads: Any) -> None:
        self.job, self.trace, self.rank, self.collective = job, trace, rank, collective
        self.is_ps = hasattr(collective, "pull")
        self.grads = grads
        self.layers = trace.layers
        self.order = forward_order(trace)
        self.pending: dict[int, dict[int, int]] = {}  # iteration -> layer -> elements outstanding
        self.arrived: dict[tuple[int, int], float] = {}  # (iteration, layer) -> time its result arrived
        self.events: dict[tuple[int, int], threading.Event] = {}
        self.lock = threading.Lock()
        self.done_queue: queue.Queue[_Flight] = queue.Queue()
        self.flights: list[_Flight] = []
        self.totals: dict[int, IterationTotals] = {}
        self.errors: list[BaseException] = []
        self.origin = time.perf_counter()
        self.masks: Any = None  # experiments.trace_masks.MaskRecorder of a DLCP ring
        self.timing: Any = None  # experiments.training.trace_timing.TimingLog (GRADFABRIC_TRACE_TIMING)

    def _event(self, iteration: int, layer: int) -> threading.Event:
        with self.lock:
            return self.events.setdefault((iteration, layer), threading.Event())

    def _layer_arrived(self, iteration: int, layer: int) -> None:
        self.arrived[(iteration, layer)] = time.perf_counter() - self.origin
        self._event(iteration, layer).set()

    def _on_done(self, flight: _Flight) -> None:
        """A transfer finished (a sender thread): account, and release layers (ring)."""
        totals = self.totals.setdefault(flight.iteration, IterationTotals())
        try:
            for f in flight.futures:
                out = f.result()
                if self.is_ps:  # a push: TCP's byte count, or DLCP's report (missing: what the server zero-filled)
                    with self.lock:
                        if isinstance(out, int):
                            totals.bytes += out
                        else:
                            totals.add_send(out)
                    continue
                with self.lock:
                    totals.add_ring(out[1], min(flight.transfer.layer_indices))
            if not self.is_ps:
                for seg in flight.transfer.segments:
                    with self.lock:
                        left = self.pending[flight.iteration]
                        left[seg.layer_index] -= seg.numel
                        complete = left[seg.layer_index] == 0
                    if complete:
                        self._layer_arrived(flight.iteration, seg.layer_index)
                if self.timing is not None:
                    self.timing.transfer(flight.iteration, flight.transfer, flight.started,
                                         [f.result() for f in flight.futures])
        except BaseException as exc:  # raised in the main loop
            self.errors.append(exc)
        self.done_queue.put(flight)

    def _puller(self, iteration: int) -> None:
        """PS: pull every tensor of `iteration`, front layers first, releasing each."""
        try:
            totals = self.totals.setdefault(iteration, IterationTotals())
            for layer in self.order:
                if self.layers[layer].numel == 0:
                    self._layer_arrived(iteration, layer)
                    continue
                got = self.collective.pull(iteration, layer, timeout=self.job.timeout_s)
                if hasattr(got, "received"):
                    with self.lock:
                        lost = got.values.size - got.received
                        totals.lost += lost
                        totals.reduced += got.values.size
                        if lost:
                            totals.lost_by_tensor[layer] = totals.lost_by_tensor.get(layer, 0) + lost
                self._layer_arrived(iteration, layer)
        except BaseException as exc:
            self.errors.append(exc)
            for layer in self.order:
                self._event(iteration, layer).set()

    def _start(self, iteration: int, ordinal: dict[int, int], transfer: Any, grads: list[np.ndarray]) -> list[Future]:
        # A scheduler without loss policies (DDP buckets, P3) marks the job's bound, as the DDP hook does.
        share = transfer.loss.drop_eligible_share if transfer.loss is not None else self.job.grad_bound
        options: dict[str, Any] = {"prio_hint": transfer.priority, "num_layers": len(self.layers),
                                   "drop_eligible": share > 0, "timeout": self.job.timeout_s}
        if share > 0:
            options["eligible_share"] = share
        segments = [s for s in transfer.segments if s.numel > 0]
        if self.is_ps:
            options.pop("timeout")
            return [self.collective.push_async(iteration, s.layer_index, grads[s.layer_index][s.start:s.stop],
                                               start=s.start, tensor_len=self.layers[s.layer_index].numel, **options)
                    for s in segments]
        tid = min(s.layer_index for s in segments)
        part = ordinal.get(tid, 0)
        ordinal[tid] = part + 1
        values = np.concatenate([grads[s.layer_index][s.start:s.stop] for s in segments])
        if self.masks is not None:
            self.masks.plan(iteration, tid, part, [(s.layer_index, s.start, s.stop) for s in segments])
        return [self.collective.allreduce_async(values, iteration=iteration, tensor_id=tid, part=part,
                                                average=True, **options)]

    def _check(self) -> None:
        if self.errors:
            raise self.errors[0]

    def _drain_done(self) -> None:
        while True:
            try:
                flight = self.done_queue.get_nowait()
            except queue.Empty:
                return
            self.flights.remove(flight)
            took = max(time.perf_counter() - self.origin - flight.started, 1e-9)
            flight.scheduler.on_transfer_done(flight.transfer, time.perf_counter() - self.origin,
                                              flight.transfer.nbytes / took)

    def run_iteration(self, iteration: int) -> dict[str, Any]:
        """Forward (waiting per tensor in layerwise mode), backward with transfers; a record."""
        job, layers = self.job, self.layers
        now = lambda: time.perf_counter() - self.origin  # noqa: E731
        grads = self.grads.gradients(iteration)
        with self.lock:
            self.pending[iteration] = {l.index: l.numel for l in layers}
        for l in layers:
            if l.numel == 0:
                self._layer_arrived(iteration, l.index)
        started = now()
        waited = 0.0
        first_forward = None
        clock = time.perf_counter()
        for idx in self.order:
            if iteration > 0:
                ev = self._event(iteration - 1, idx)
                if not ev.is_set():
                    t0 = time.perf_counter()
                    while not ev.wait(0.5):
                        self._check()
                        if time.perf_counter() - t0 > job.timeout_s:
                            raise ExperimentError(f"rank {self.rank}: layer {idx} of iteration {iteration - 1} "
                                                  f"did not arrive within {job.timeout_s:.0f} s")
                    waited += time.perf_counter() - t0
                    clock = max(clock, time.perf_counter())
            if first_forward is None:
                first_forward = now()
            clock += layers[idx].forward_s
            _sleep_until(clock)
        self._check()
        scheduler = make_scheduler(job)
        b0 = time.perf_counter()
        ready_at = b0 + np.cumsum([l.backward_s for l in reversed(layers)])[::-1]
        scheduler.start_iteration(layers, b0 - self.origin)
        if self.is_ps:
            threading.Thread(target=self._puller, args=(iteration,), daemon=True).start()
        next_ready = len(layers) - 1
        ordinal: dict[int, int] = {}
        first_send: float | None = None
        from hosts.schedulers import Transfer, Wait

        while True:
            self._check()
            self._drain_done()
            t = time.perf_counter()
            while next_ready >= 0 and ready_at[next_ready] <= t:
                scheduler.on_gradient_ready(next_ready, float(ready_at[next_ready]) - self.origin)
                next_ready -= 1
            decision = scheduler.next_transfer(t - self.origin, not self.flights)
            if isinstance(decision, Transfer):
                flight = _Flight(iteration, decision, scheduler, now(), [])
                if first_send is None:
                    first_send = flight.started
                self.flights.append(flight)
                flight.futures = self._start(iteration, ordinal, decision, grads)
                remaining = [len(flight.futures)]

                def finished(_f: Future, flight: _Flight = flight, remaining: list[int] = remaining) -> None:
                    with self.lock:
                        remaining[0] -= 1
                        last = remaining[0] == 0
                    if last:
                        self._on_done(flight)

                if not flight.futures:
                    self._on_done(flight)
                for f in flight.futures:
                    f.add_done_callback(finished)
                continue
            if decision is None:
                break
            assert isinstance(decision, Wait)
            wake = min(decision.until + self.origin if decision.until is not None else float("inf"),
                       float(ready_at[next_ready]) if next_ready >= 0 else float("inf"))
            pause = min(max(0.0, wake - time.perf_counter()), 0.05)
            try:
                flight = self.done_queue.get(timeout=pause) if pause > 0 else None
                if flight is not None:
                    self.done_queue.put(flight)
            except queue.Empty:
                pass
        planned_backward = sum(l.backward_s for l in layers) + self.trace.backward_tail_s
        _sleep_until(b0 + planned_backward)
        backward_end = now()
        if job.overlap == "ddp" or iteration == job.iterations - 1:
            self.wait_all(iteration)
            _sleep_until(time.perf_counter() + self.trace.optimizer_s)
        ended = now()
        totals = self.totals.get(iteration, IterationTotals())
        return {"iteration": iteration, "rank": self.rank, "started_s": started, "forward_first_s": first_forward,
                "backward_end_s": backward_end, "ended_s": ended,
                "forward_wait_s": waited, "first_send_s": first_send,
                "backward_lag_s": backward_end - (b0 - self.origin) - planned_backward, "compute_s": sum(l.forward_s + l.backward_s for l in layers)
                + self.trace.backward_tail_s + (self.trace.optimizer_s if job.overlap == "ddp" else 0.0)}

    def last_arrival(self, iteration: int) -> float | None:
        """When the last result of `iteration` arrived (None while one is missing)."""
        times = [self.arrived.get((iteration, l.index)) for l in self.layers]
        return None if any(t is None for t in times) else max(t for t in times if t is not None)

    def wait_all(self, iteration: int) -> None:
        """Until every layer of `iteration` has its result."""
        deadline = time.perf_counter() + self.job.timeout_s
        for l in self.layers:
            ev = self._event(iteration, l.index)
            while not ev.wait(0.2):
                self._check()
                self._drain_done()
                if time.perf_counter() > deadline:
                    raise ExperimentError(f"rank {self.rank}: layer {l.index} of iteration {iteration} did not "
                                          f"arrive within {self.job.timeout_s:.0f} s")
        self._drain_done()

    def totals_of(self, iteration: int) -> dict[str, Any]:
        masks = {"lost_values": self.masks.pop(iteration)} if self.masks is not None else {}
        return {**self.totals.get(iteration, IterationTotals()).to_dict(), **masks}


def _emit(record: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(record, sort_keys=True) + "\n")
    sys.stdout.flush()


def parse_peers(text: str) -> list[tuple[str, int]]:
    out = []
    for item in text.split(","):
        host, _, port = item.strip().rpartition(":")
        if not host or not port.isdigit():
            raise ExperimentError(f"--peers wants HOST:PORT,HOST:PORT,...; got {item!r}")
        out.append((host, int(port)))
    return out


def run_rank(job: TraceJob, rank: int, peers: list[tuple[str, int]], wait_go: bool) -> None:
    """One rank (module doc): builds the collective, then trains and prints JSON lines."""
    from experiments.training.grad_values import GradientSource, load_pool

    world = len(peers)
    trace = scaled_model(job)
    ps = job.collective == "ps"
    workers = list(range(1, world)) if ps else list(range(world))
    if len(workers) < 1 or (not ps and world < 2):
        raise ExperimentError(f"a {job.collective} job needs more ranks than {world}")
    closers: list[Any] = []
    done = False
    endpoint: Any = None
    masks: Any = None
    mesh: Any = None  # a TCP job's connections: TCP_INFO at the end of each iteration
    server: Any = None
    collective: Any = None
    if job.comm == "tcp":
        from experiments.training import tcp_collectives as tc

        talks = ({0} if rank else set(workers)) if ps else {(rank + 1) % world, (rank - 1) % world}
        mesh = tc.TcpMesh(rank, peers, talks, dscp=job.dscp, congestion=job.congestion, timeout_s=job.timeout_s)
        closers.append(mesh)
        if ps:
            server = tc.TcpPsServer(mesh, workers) if rank == 0 else None
            collective = None if rank == 0 else tc.TcpPsClient(mesh)
        else:
            collective = tc.TcpRing(mesh, rank, world, concurrency=MAX_CONCURRENT)
    elif job.comm == "dlcp":
        from hosts.endpoint import Endpoint
        from hosts.pacing import Aimd
        from hosts.wire import MsgType

        from hosts.ps import PS_WORKER_ID

        wid = (PS_WORKER_ID if rank == 0 else rank - 1) if ps else rank  # a PS numbers its workers 0..N-1
        endpoint = Endpoint(worker_id=wid, job_id=job.job_id, host=peers[rank][0], port=peers[rank][1],
                            aimd=Aimd(rate=job.rate_pps, min_rate=job.rate_pps / 10, max_rate=job.max_rate_pps,
                                      increase=job.rate_pps / 10),
                            bounds={MsgType.GRADIENT: job.grad_bound, MsgType.PARAMETER: 0.0},
                            peer_timeout=job.timeout_s, marking=_marking(job), port_rate=job.port_pps,
                            **transport_timers(job.k))
        closers.append(endpoint)
        if ps:
            from hosts.ps import ParameterServer, PsClient

            if rank == 0:
                server = ParameterServer(endpoint, len(workers), update="mean",
                                         workers={w - 1: peers[w] for w in workers})
            else:
                collective = PsClient(endpoint, peers[0])
        else:
            from hosts.ring import RingAllReduce

            collective = RingAllReduce(endpoint, rank, peers, concurrency=MAX_CONCURRENT, inline_sends=True)
            from experiments.trace_masks import MaskRecorder

            masks = MaskRecorder(rank, world)
            masks.attach(endpoint)
    else:
        raise ExperimentError(f"unknown --comm {job.comm!r}: dlcp or tcp")
    if collective is not None and hasattr(collective, "close"):
        closers.insert(0, collective)
    try:
        _emit({"event": "listening", "rank": rank, "address": f"{peers[rank][0]}:{peers[rank][1]}",
               "layers": len(trace.layers), "numel": trace.numel, "scale": job.rule.to_dict()})
        if wait_go:
            sys.stdin.readline()
        cpu0, wall0, sched0, threads0 = cpu_seconds(), time.perf_counter(), schedstat(), thread_stats()
        if server is not None:
            ids = [l.index for l in trace.layers if l.numel]
            if job.comm == "tcp":
                server.serve(job.iterations, {l.index: l.numel for l in trace.layers}, timeout=job.timeout_s)
            else:
                for it in range(job.iterations):
                    server.serve_iteration(it, ids, num_layers=len(trace.layers), timeout=job.timeout_s)
            _emit({"event": "done", "role": "server", "rank": rank, "totals": received(closers) if job.comm == "tcp" else {},
                   **_cpu_figures(cpu0, wall0, sched0, threads0)})
            done = True
            return
        grads = GradientSource([l.numel for l in trace.layers], load_pool(), seed=job.seed, rank=rank)
        worker = TraceRank(job, trace, rank, collective, grads)
        worker.masks = masks
        records: list[dict[str, Any]] = []
        if job.comm == "dlcp" and not ps:
            from experiments.training.trace_timing import open_log

            worker.timing = open_log(job.job_id, rank, endpoint, worker.origin)
            if worker.timing is not None:
                worker.timing.records = records
                closers.append(worker.timing)
        for it in range(job.iterations):
            rec = worker.run_iteration(it)
            if mesh is not None:
                rec["tcp_info"] = mesh.tcp_info()
            records.append(rec)
            if it > 0:
                prev = records[it - 1]
                prev["iteration_s"] = rec["started_s"] - prev["started_s"]
                prev["last_arrival_s"] = worker.last_arrival(it - 1)
                _emit({"event": "iteration", **prev, **worker.totals_of(it - 1)})
        last = records[-1]
        last["iteration_s"] = last["ended_s"] - last["started_s"]
        last["last_arrival_s"] = worker.last_arrival(job.iterations - 1)
        _emit({"event": "iteration", **last, **worker.totals_of(job.iterations - 1)})
        totals = [worker.totals_of(i) for i in range(job.iterations)]
        _emit({"event": "done", "role": "worker", "rank": rank,
               "totals": {**{k: sum(t[k] for t in totals) for k in TOTALED}, **received(closers),
                          **({"masks_inexact": masks.inexact} if masks is not None else {})},
               **_cpu_figures(cpu0, wall0, sched0, threads0)})
        done = True
    except Exception:
        _dump_state(endpoint)
        raise
    finally:
        if done and wait_go:  # the close barrier (module doc): peers may still need this rank's answers
            sys.stdin.readline()
        for c in closers:
            c.close()


def _dump_state(endpoint: Any) -> None:
    """A failed rank leaves in its log (stderr) its DLCP endpoint's window and every thread's stack."""
    if endpoint is not None:
        w = endpoint.window
        print(f"endpoint at failure: cwnd {w.cwnd:.1f}, flight cap {w.flight_cap:.1f}, in flight "
              f"{endpoint.in_flight}, senders waiting for room {len(getattr(endpoint, '_room', ()))}, "
              f"chunks awaiting answers {len(getattr(endpoint, '_waits', {}))}", file=sys.stderr)
        r = endpoint.reassembler
        for key, asm in list(getattr(r, "_open", {}).items())[:20]:  # messages still incomplete here
            print(f"  incomplete: {key}: {asm.received} of {asm.values.size} values", file=sys.stderr)
        print(f"  receiver: {r.stats}", file=sys.stderr)
    sys.stderr.flush()
    faulthandler.dump_traceback(file=sys.stderr, all_threads=True)


def _cpu_figures(cpu0: float, wall0: float, sched0: tuple[int, int], threads0: dict[int, tuple[int, int, int]]
                 ) -> dict[str, float | None]:
    """This rank's CPU use (share of one core), its wait for a CPU over wall time, its busiest
    thread's mean wait per timeslice (ns) and the earlier summed figure
    (:mod:`experiments.training.cpu`), since the samples at the start."""
    wall = max(1e-9, time.perf_counter() - wall0)
    threads = thread_stats()
    return {"cpu_share": (cpu_seconds() - cpu0) / wall, "cpu_wait_share": wait_share(threads0, threads, wall),
            "cpu_wait_per_slice_ns": wait_per_slice(threads0, threads), "starvation": starvation(sched0, schedstat())}

def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.training.trace_worker",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--peers", required=True, help="HOST:PORT of every rank, in rank order")
    p.add_argument("--wait-go", action="store_true")
    defaults = TraceJob()
    for name, value in asdict(defaults).items():
        p.add_argument(f"--{name.replace('_', '-')}", type=type(value), default=value)
    args = p.parse_args(argv)
    faulthandler.enable()  # a crash in native code (the C data path) leaves its stack in the rank's log
    job = TraceJob(**{k: getattr(args, k) for k in asdict(defaults)})
    try:
        run_rank(job, args.rank, parse_peers(args.peers), args.wait_go)
    except ExperimentError as exc:
        print(f"trace_worker rank {args.rank}: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
