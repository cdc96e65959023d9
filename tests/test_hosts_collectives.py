"""Parameter server with 4 workers and ring all-reduce over the DLCP transport (loopback)."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest

from hosts.endpoint import Endpoint
from hosts.ps import PS_WORKER_ID, ParameterServer, PsClient
from hosts.relay import Relay, RelayStats
from hosts.ring import RingAllReduce
from hosts.wire import MAX_COUNT_MTU_1500, Flags, Header, MsgType
from tests.hosts_paths import datapath  # noqa: F401  (every test runs on both data paths)

SIZES = {0: 5_000, 1: 123, 2: 40_000}
#: Loss bounds of zero for the exact-sum tests: with the default bounds a message may end
#: within its bound when a loaded host drops UDP on loopback.
RELIABLE = {MsgType.GRADIENT: 0.0, MsgType.PARAMETER: 0.0}


def grads(worker: int, iteration: int) -> dict[int, np.ndarray]:
    rng = np.random.default_rng(100 * worker + iteration)
    return {t: rng.normal(size=n).astype(np.float32) for t, n in SIZES.items()}


def test_ps_round_with_four_workers_sums_exactly() -> None:
    n = 4
    server = Endpoint(worker_id=PS_WORKER_ID, bounds=RELIABLE)
    workers = [Endpoint(worker_id=w, bounds=RELIABLE) for w in range(n)]
    try:
        ps = ParameterServer(server, n, update="sum")
        clients = [PsClient(e, server.address) for e in workers]

        def worker_round(w: int, it: int) -> dict[int, np.ndarray]:
            for t in sorted(SIZES, reverse=True):  # backward order: back layers first
                clients[w].push(it, t, grads(w, it)[t], num_layers=len(SIZES))
            return {t: clients[w].pull(it, t).values for t in SIZES}

        with ThreadPoolExecutor(n + 1) as pool:
            for it in range(2):
                served = pool.submit(ps.serve_iteration, it, list(SIZES))
                results = [f.result(timeout=30) for f in [pool.submit(worker_round, w, it) for w in range(n)]]
                round_ = served.result(timeout=30)
                assert round_.gradient_loss == 0 and len(round_.pulls) == n * len(SIZES)
                for t in SIZES:
                    expected = np.sum([grads(w, it)[t] for w in range(n)], axis=0, dtype=np.float64)
                    for got in results:
                        np.testing.assert_allclose(got[t], expected, rtol=1e-5, atol=1e-5)
                        np.testing.assert_array_equal(got[t], results[0][t])  # everyone sees the same
    finally:
        for e in [server, *workers]:
            e.close()


def test_ps_sgd_update_and_lost_pull_keeps_previous_parameters() -> None:
    server = Endpoint(worker_id=PS_WORKER_ID, bounds={MsgType.GRADIENT: 0.01, MsgType.PARAMETER: 0.05})
    worker = Endpoint(worker_id=0, bounds={MsgType.GRADIENT: 0.01, MsgType.PARAMETER: 0.05})
    initial = np.ones(36_000, np.float32)

    def lose_in_second_pull(h: Header, data: bytes) -> int:
        return 0 if h.msg_type == MsgType.PARAMETER and h.iteration == 1 and h.seq == 3 \
            and not h.flags & Flags.RETRANSMIT else 1

    try:
        with Relay(worker.address, lose_in_second_pull) as relay:
            ps = ParameterServer(server, 1, update="sgd", lr=0.5, initial={0: initial},
                                 workers={0: relay.address})
            client = PsClient(worker, server.address)
            g = np.full(36_000, 2.0, np.float32)
            pulled = []
            with ThreadPoolExecutor(1) as pool:
                for it in range(2):
                    served = pool.submit(ps.serve_iteration, it, [0])
                    client.push(it, 0, g)
                    assert served.result(timeout=10).pulls[0].rounds == 0
                    pulled.append(client.pull(it, 0).values)
        assert relay.stats.dropped == 1
        first, second = pulled
        np.testing.assert_array_equal(first, initial - 0.5 * g)
        lost = np.zeros(36_000, bool)
        lost[3 * MAX_COUNT_MTU_1500:4 * MAX_COUNT_MTU_1500] = True
        np.testing.assert_array_equal(second[~lost], (initial - 2 * 0.5 * g)[~lost])
        np.testing.assert_array_equal(second[lost], first[lost])  # kept from the previous pull
    finally:
        server.close()
        worker.close()


def test_ring_allreduce_four_ranks_sums_exactly() -> None:
    n = 4
    endpoints = [Endpoint(worker_id=r, bounds=RELIABLE) for r in range(n)]
    try:
        peers = [e.address for e in endpoints]
        rings = [RingAllReduce(e, r, peers) for r, e in enumerate(endpoints)]
        data = [np.random.default_rng(r).normal(size=10_001).astype(np.float32) for r in range(n)]
        with ThreadPoolExecutor(n) as pool:
            for it in range(2):
                futures = [pool.submit(rings[r].allreduce, data[r] * (it + 1), iteration=it, tensor_id=3)
                           for r in range(n)]
                results = [f.result(timeout=30) for f in futures]
                expected = np.sum(data, axis=0, dtype=np.float64) * (it + 1)
                for values, report in results:
                    np.testing.assert_allclose(values, expected, rtol=1e-5, atol=1e-5)
                    assert report.lost_elements == 0 and len(report.sends) == 2 * (n - 1)
                    np.testing.assert_array_equal(values, results[0][0])
    finally:
        for e in endpoints:
            e.close()


def test_ring_handles_tensors_smaller_than_the_ring() -> None:
    endpoints = [Endpoint(worker_id=r) for r in range(3)]
    try:
        peers = [e.address for e in endpoints]
        rings = [RingAllReduce(e, r, peers) for r, e in enumerate(endpoints)]
        with ThreadPoolExecutor(3) as pool:
            futures = [pool.submit(rings[r].allreduce, np.array([r + 1.0, 10.0]), iteration=0, average=True)
                       for r in range(3)]
            for f in futures:
                np.testing.assert_allclose(f.result(timeout=30)[0], [2.0, 10.0])
    finally:
        for e in endpoints:
            e.close()


def ring_through_relay(bounds: dict[MsgType, float], keep: Callable[[Header, bytes], int],
                       runs: list[tuple[list[np.ndarray], dict[str, Any]]]) -> tuple[list[list[Any]], RelayStats]:
    """A 3-rank ring whose traffic to rank 1 passes a relay with the filter `keep` (copies to
    forward: 0 loses, 2 duplicates); runs the all-reduces of `runs` (each rank's values, the
    options) one after another and returns each run's (values, report) per rank and what the
    relay saw."""
    endpoints = [Endpoint(worker_id=r, bounds=bounds) for r in range(3)]
    try:
        with Relay(endpoints[1].address, keep) as relay:
            peers = [e.address for e in endpoints]
            rings = [RingAllReduce(e, r, [peers[0], relay.address, peers[2]] if r == 0 else peers)
                     for r, e in enumerate(endpoints)]
            results = []
            with ThreadPoolExecutor(3) as pool:
                for values, options in runs:
                    futures = [pool.submit(rings[r].allreduce, values[r], **options) for r in range(3)]
                    results.append([f.result(timeout=30) for f in futures])
        return results, relay.stats
    finally:
        for e in endpoints:
            e.close()


@pytest.mark.parametrize("average", [False, True])
def test_ring_all_gather_loss_keeps_the_previous_result(average: bool) -> None:
    # With average=True a lost value keeps the previous mean as it was (divided once).
    bounds = {MsgType.GRADIENT: 0.01, MsgType.PARAMETER: 0.05}
    steps = 2 * (3 - 1)

    def lose_one_gather_packet(h: Header, data: bytes) -> int:
        gather = h.iteration % steps == 2  # the first all-gather step
        second_iteration = h.iteration // steps // 1024 == 1
        return 0 if (h.msg_type == MsgType.PARAMETER and gather and second_iteration and h.seq == 2
                     and not h.flags & Flags.RETRANSMIT) else 1

    data = [np.random.default_rng(r).normal(size=30_000).astype(np.float32) for r in range(3)]
    (first, second), stats = ring_through_relay(bounds, lose_one_gather_packet, [
        (data, {"iteration": 0, "average": average}), ([d * 2 for d in data], {"iteration": 1, "average": average})])
    first = [values for values, _report in first]
    assert stats.dropped == 1
    # the lost packet's size (a packet may be cut so that the drop-eligible values fill the budget)
    size = next(h.count for h in stats.seen if lose_one_gather_packet(h, b"") == 0)
    exact = np.sum(data, axis=0, dtype=np.float64) * 2 / (3 if average else 1)
    np.testing.assert_allclose(second[0][0], exact, rtol=1e-5, atol=1e-5)
    values, report = second[1]
    # The lost packet was of the all-gather stage: counted there, not as gradient loss.
    assert report.gather_lost == size and report.lost_elements == 0
    assert report.received_elements == 20_000 == report.gather_received  # two chunks of 10,000 per stage
    stale = ~np.isclose(values, exact, rtol=1e-5, atol=1e-5)
    assert stale.sum() == size
    np.testing.assert_array_equal(values[stale], first[1][stale])  # the previous all-reduce's values
    # rank 1 forwards that chunk to rank 2 in the next all-gather step, stale values included
    np.testing.assert_array_equal(second[2][0], values)


def test_ring_reduce_adds_each_value_once_and_a_lost_one_not_at_all() -> None:
    # Reduce-scatter chunks are added into the rank's tensor as their packets arrive: every
    # reduce packet from rank 0 reaches rank 1 twice, and one is lost within the bound.
    bounds = {MsgType.GRADIENT: 0.05, MsgType.PARAMETER: 0.0}
    steps = 2 * (3 - 1)

    def twice_but_lose_one(h: Header, data: bytes) -> int:
        if h.msg_type != MsgType.GRADIENT:
            return 1
        return 0 if (h.iteration % steps == 0 and h.seq == 2 and not h.flags & Flags.RETRANSMIT) else 2

    data = [np.random.default_rng(r).normal(size=30_000).astype(np.float32) for r in range(3)]
    (results,), stats = ring_through_relay(bounds, twice_but_lose_one, [(data, {"iteration": 0})])
    assert stats.dropped == 1 and stats.duplicated > 0
    gone = next(h for h in stats.seen if twice_but_lose_one(h, b"") == 0)
    # rank 0's first step carries its chunk 0 (elements 0..9,999) to rank 1, which adds it to
    # its own; rank 2 adds its own to that sum: the lost values lack rank 0's share only
    lost = np.zeros(30_000, bool)
    lost[gone.offset:gone.offset + gone.count] = True
    expected = np.sum(data, axis=0, dtype=np.float64)
    expected[lost] -= data[0][lost]
    assert results[1][1].lost_elements == gone.count
    for values, _report in results:
        np.testing.assert_allclose(values, expected, rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(values, results[0][0])


def test_a_failed_all_reduce_makes_close_end_the_others_at_once() -> None:
    # Rank 1 is alive (its endpoint answers keep-alives) but never takes part, so rank 0's
    # all-reduce of tensor 1 waits for its chunk for as long as rank 1 lives. A second
    # all-reduce fails (an option the ring sets itself, given twice); closing the ring aborts the
    # endpoint and the waiting all-reduce fails within seconds, naming the failure.
    import time

    import pytest

    from hosts.errors import TransportError

    a, b = Endpoint(worker_id=0, bounds=RELIABLE), Endpoint(worker_id=1, bounds=RELIABLE)
    try:
        ring = RingAllReduce(a, 0, [a.address, b.address])
        waiting = ring.allreduce_async(np.ones(1000, np.float32), iteration=0, tensor_id=1, timeout=60.0)
        failing = ring.allreduce_async(np.ones(1000, np.float32), iteration=0, tensor_id=2, copy=True)
        with pytest.raises(TypeError):
            failing.result(timeout=30)
        time.sleep(0.5)
        assert not waiting.done()  # a live neighbour: it would wait for ever
        started = time.monotonic()
        ring.close()
        assert time.monotonic() - started < 10.0
        with pytest.raises(TransportError, match="aborted .*an all-reduce failed: TypeError"):
            waiting.result(timeout=1)
    finally:
        a.close()
        b.close()
