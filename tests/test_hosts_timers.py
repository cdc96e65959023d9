"""The endpoint's default timers are named once (hosts.endpoint) and experiments/scaling.py scales those."""

from __future__ import annotations

from experiments import scaling
from hosts import endpoint


def test_the_endpoint_defaults_are_the_named_timers_and_scaling_starts_from_them() -> None:
    assert (endpoint.PROBE_TIMEOUT, endpoint.REORDER_GRACE) == (0.2, 0.005)  # as hosts/README.md documents
    with endpoint.Endpoint(worker_id=1, fast=False) as ep:
        assert (ep.probe_timeout, ep.reorder_grace) == (endpoint.PROBE_TIMEOUT, endpoint.REORDER_GRACE)
    assert scaling.transport_timers(scaling.REFERENCE_K) == {"probe_timeout": endpoint.PROBE_TIMEOUT,
                                                            "reorder_grace": endpoint.REORDER_GRACE}
    doubled = scaling.transport_timers(2 * scaling.REFERENCE_K)
    assert doubled == {"probe_timeout": 2 * endpoint.PROBE_TIMEOUT, "reorder_grace": 2 * endpoint.REORDER_GRACE}
