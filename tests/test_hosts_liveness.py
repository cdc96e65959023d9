"""A job never aborts on congestion, and fails only when a peer is really gone.

The parameter server runs in a process of its own so that it can be stalled (SIGSTOP for
200 ms at a time, as a starved process is) and killed; the workers reach it through
relays that lose 5 % of the data and reorder it.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from hosts.endpoint import Endpoint
from hosts.errors import PeerGoneError
from hosts.messages import MessageKey
from hosts.ps import PS_WORKER_ID, ParameterServer, PsClient
from hosts.relay import Relay, random_impairment
from hosts.wire import MsgType
from tests.hosts_paths import datapath  # noqa: F401  (every test runs on both data paths)

BOUNDS = {MsgType.GRADIENT: 0.03, MsgType.PARAMETER: 0.01}
SIZES = {0: 30_000, 1: 4_000, 2: 60_000}
WORKERS = 2


def _serve(ports: mp.Queue, results: mp.Queue, iterations: int) -> None:
    with Endpoint(worker_id=PS_WORKER_ID, bounds=BOUNDS, peer_timeout=20) as endpoint:
        ports.put(endpoint.address[1])
        ps = ParameterServer(endpoint, WORKERS, update="sum")
        losses = []
        for it in range(iterations):
            served = ps.serve_iteration(it, list(SIZES), timeout=20)
            losses.append(served.max_gradient_loss)
            results.put(("pulls", [p.missing / (p.payload_bytes // 4) for p in served.pulls]))
        results.put(("done", max(losses), dict(ps.ignored)))
        endpoint.drain(quiet=1.0, limit=5)


def _gradient(worker: int, it: int, tensor: int) -> np.ndarray:
    return np.random.default_rng([worker, it, tensor]).normal(size=SIZES[tensor]).astype(np.float32) + 1.0


def _stall(pid: int, stop: threading.Event, stalls: list[float]) -> None:
    """Stop the server for 200 ms, let it run for 100 ms, again, from the start of the job
    until it ends."""
    while True:
        os.kill(pid, signal.SIGSTOP)
        time.sleep(0.2)
        os.kill(pid, signal.SIGCONT)
        stalls.append(0.2)
        if stop.wait(0.1):
            return


@pytest.mark.slow
def test_ps_job_through_loss_reordering_and_stalls_completes_within_bounds() -> None:
    ctx = mp.get_context("spawn")
    ports: mp.Queue = ctx.Queue()
    results: mp.Queue = ctx.Queue()
    iterations = 3
    server = ctx.Process(target=_serve, args=(ports, results, iterations), daemon=True)
    server.start()
    stop = threading.Event()
    stalls: list[float] = []
    endpoints = [Endpoint(worker_id=w, bounds=BOUNDS, peer_timeout=20) for w in range(WORKERS)]
    try:
        ps_address = ("127.0.0.1", ports.get(timeout=30))
        relays = [Relay(ps_address, random_impairment(loss=0.05, duplicate=0.0, seed=w), hold=6, record=False)
                  for w in range(WORKERS)]
        stall = threading.Thread(target=_stall, args=(server.pid, stop, stalls), daemon=True)
        stall.start()
        clients = [PsClient(e, r.address) for e, r in zip(endpoints, relays)]

        def work(w: int) -> list[float]:
            losses = []
            for it in range(iterations):
                pushes = [clients[w].push_async(it, t, _gradient(w, it, t), num_layers=len(SIZES)) for t in SIZES]
                for p in pushes:
                    report = p.result()
                    assert report.missing <= BOUNDS[MsgType.GRADIENT] * report.payload_bytes // 4
                for t in SIZES:
                    got = clients[w].pull(it, t, timeout=20)
                    losses.append(got.loss_rate)
                    exact = sum(_gradient(v, it, t) for v in range(WORKERS))
                    # Each value is the exact sum or misses a worker's lost gradient, unless its
                    # parameter packet was lost (then 0: no previous pull was kept here).
                    off = ~np.isclose(got.values, exact, rtol=1e-5)
                    assert off.mean() <= 2 * BOUNDS[MsgType.GRADIENT] + BOUNDS[MsgType.PARAMETER]
            return losses

        with ThreadPoolExecutor(WORKERS) as pool:
            pulled = [loss for losses in pool.map(work, range(WORKERS)) for loss in losses]
        outcome = [results.get(timeout=30) for _ in range(iterations + 1)]
    finally:
        stop.set()
        if server.is_alive():
            os.kill(server.pid, signal.SIGCONT)
        for e in endpoints:
            e.close()
        for r in locals().get("relays", []):
            r.close()
        server.join(timeout=15)
        if server.is_alive():
            server.kill()
    assert len(stalls) >= 2  # the server really was stopped, repeatedly (the job may take under a second)
    assert sum(r.stats.dropped for r in relays) > 0
    done = outcome[-1]
    # (+1e-9: a message may lose exactly its bound - the marked packets fill it - and
    # 1 - received / len is then 0.030000000000000027)
    assert done[0] == "done" and done[1] <= BOUNDS[MsgType.GRADIENT] + 1e-9 and done[2] == {}
    assert all(loss <= BOUNDS[MsgType.PARAMETER] + 1e-9 for loss in pulled)
    assert all(m <= BOUNDS[MsgType.PARAMETER] + 1e-9 for kind, *rest in outcome[:-1] for m in rest[0])
    assert server.exitcode == 0


def _receive_forever(ports: mp.Queue) -> None:
    with Endpoint(worker_id=2, bounds=BOUNDS) as endpoint:
        ports.put(endpoint.address[1])
        while True:
            endpoint.receive(timeout=60)


@pytest.mark.parametrize("wait", ["send", "take"])
def test_a_killed_peer_is_named_within_the_configured_time(wait: str) -> None:
    ctx = mp.get_context("spawn")
    ports: mp.Queue = ctx.Queue()
    peer = ctx.Process(target=_receive_forever, args=(ports,), daemon=True)
    peer.start()
    limit = 1.5
    try:
        address = ("127.0.0.1", ports.get(timeout=30))
        with Endpoint(worker_id=1, bounds=BOUNDS, peer_timeout=limit) as survivor:
            survivor.send(address, np.ones(20_000, np.float32), iteration=0)  # alive: it answers
            peer.kill()
            peer.join(5)
            killed = time.monotonic()
            with pytest.raises(PeerGoneError) as caught:
                if wait == "send":
                    survivor.send(address, np.ones(20_000, np.float32), iteration=1)
                else:  # waiting for a message the peer would have sent
                    survivor.take(MessageKey(1, 2, 0, 0, MsgType.GRADIENT), timeout=limit, peer=address)
            took = time.monotonic() - killed
    finally:
        if peer.is_alive():
            peer.kill()
    message = str(caught.value)
    assert caught.value.peer == address
    assert f"peer 127.0.0.1:{address[1]} is gone" in message and "last heard a bitmap" in message
    assert limit <= took <= limit + 1.5
