"""The training job's gradient exchange: in-process SGD, a parameter server over the DLCP
transport on loopback, and the same with random loss on the way to the server."""

from __future__ import annotations

import numpy as np
import pytest

from experiments.metrics import summarize
from experiments.training.data import Batches, load_digits, shard
from experiments.training.loop import LocalSgd, TrainConfig, Worker, final_accuracy, time_to_accuracy
from experiments.training.loopback import run_loopback
from experiments.training.options import TransportOptions

SMALL = TrainConfig(iterations=160, batch_size=32, lr=0.5, hidden=(64, 32), eval_every=20)


@pytest.fixture(scope="module")
def digits():
    return load_digits(seed=0)


def test_shards_are_disjoint_and_cover_the_training_set(digits) -> None:
    n = len(digits.train_y)
    parts = [shard(n, r, 3) for r in range(3)]
    joined = np.sort(np.concatenate(parts))
    assert np.array_equal(joined, np.arange(n))
    a, b = Batches(digits, 0, 2, 16, seed=4), Batches(digits, 0, 2, 16, seed=4)
    assert np.array_equal(a.batch(7)[1], b.batch(7)[1])
    assert not np.array_equal(a.batch(7)[0], a.batch(8)[0])


def test_local_sgd_learns_the_digits(digits) -> None:
    worker = Worker(0, 1, SMALL, digits)
    records = worker.train(LocalSgd(worker.initial_parameters(), SMALL.lr))
    assert records[0].accuracy is None and records[19].accuracy is not None
    assert final_accuracy(records) >= 0.9
    assert records[-1].loss < records[0].loss / 3
    reached = time_to_accuracy(records, 0.8)
    assert reached is not None and reached <= records[-1].wall_s


def test_parameter_server_over_dlcp_matches_local_sgd_without_loss(digits) -> None:
    config = TrainConfig(iterations=30, batch_size=32, lr=0.5, hidden=(64, 32), eval_every=10)
    worker = Worker(0, 1, config, digits)
    local = worker.train(LocalSgd(worker.initial_parameters(), config.lr))
    job = run_loopback(config, TransportOptions(scheduler="wfbp", grad_bound=0.0, param_bound=0.0), 1, data=digits)
    remote = job.records[0]
    assert [r.loss for r in remote] == [r.loss for r in local]
    assert final_accuracy(remote) == final_accuracy(local)
    assert remote[0].packets > 0 and job.server is not None and job.server.gradient_loss == 0.0


def test_training_converges_with_bounded_random_loss(digits) -> None:
    options = TransportOptions(scheduler="dlcp", grad_bound=0.10)
    job = run_loopback(SMALL, options, 2, loss=0.05, data=digits)
    assert job.server is not None
    # Packets were really lost and some gradient values were zero-filled instead of resent.
    assert sum(r.dropped for r in job.relays) > 0
    assert 0.0 < job.server.gradient_loss <= options.grad_bound
    # The job's own count of lost packets (sent minus received, from every socket) is the relays'.
    run = summarize("lossy", job.outcome(), target=0.9)
    assert run.dropped == sum(r.dropped for r in job.relays)
    accuracies = [final_accuracy(job.records[r]) for r in range(2)]
    assert accuracies[0] == accuracies[1]  # every worker holds the server's parameters
    assert accuracies[0] >= 0.9
