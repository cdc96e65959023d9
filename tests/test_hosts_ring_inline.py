"""A ring whose all-reduces send their own steps (``RingAllReduce(inline_sends=True)``, as
the trace workers use it): the sums are exact with many all-reduces at once, started in a
different order on each rank, and no send is handed to the endpoint's sender threads."""

from __future__ import annotations

import numpy as np

from hosts.endpoint import Endpoint
from hosts.ring import RingAllReduce
from hosts.wire import MsgType

RELIABLE = {MsgType.GRADIENT: 0.0, MsgType.PARAMETER: 0.0}


def test_inline_ring_sums_many_all_reduces_started_in_different_orders() -> None:
    n, tensors = 3, 8
    endpoints = [Endpoint(worker_id=r, bounds=RELIABLE) for r in range(n)]
    try:
        peers = [e.address for e in endpoints]
        rings = [RingAllReduce(e, r, peers, concurrency=64, inline_sends=True) for r, e in enumerate(endpoints)]
        sizes = [1 + 3_001 * t for t in range(tensors)]  # 1 value (smaller than the ring) to ~21,000
        data = {(r, t): np.random.default_rng(100 * r + t).normal(size=sizes[t]).astype(np.float32)
                for r in range(n) for t in range(tensors)}
        futures = {}
        for r in range(n):
            order = list(range(tensors)) if r % 2 == 0 else list(reversed(range(tensors)))
            for t in order:
                futures[(r, t)] = rings[r].allreduce_async(data[(r, t)], iteration=2, tensor_id=t, average=True)
        for t in range(tensors):
            expected = np.mean([data[(r, t)].astype(np.float64) for r in range(n)], axis=0)
            results = [futures[(r, t)].result(timeout=60) for r in range(n)]
            for values, report in results:
                np.testing.assert_allclose(values, expected, rtol=1e-5, atol=1e-6)
                assert report.lost_elements == 0 and report.gather_lost == 0
                assert all(s.missing == 0 for s in report.sends)
            np.testing.assert_array_equal(results[0][0], results[1][0])
        # every step was sent by its all-reduce's thread: the endpoints' sender pools never started
        assert all(e._executor is None for e in endpoints)
        for ring in rings:
            ring.close()
    finally:
        for e in endpoints:
            e.close()
