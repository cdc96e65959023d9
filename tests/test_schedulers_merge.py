"""DLCP's merge of small layers (hosts/schedulers/dlcp.py, ``merge_numel``): groups fixed from
the layer sizes, each one transfer handed out once all its layers are ready, with its
front-most layer's priority and loss policy."""

from __future__ import annotations

import pytest

from hosts.schedulers import Layer, SchedulerError, Transfer, covered_numel, create, layer_priority
from hosts.schedulers.dlcp import merge_groups

#: Sizes in forward order (layer 0 first); backward makes 6 ready first, then 5, ... 0.
SIZES = [5, 3, 100, 2, 2, 2, 50]


def layers(sizes: list[int] = SIZES) -> list[Layer]:
    return [Layer(i, f"l{i}", n, 0.001, 0.001) for i, n in enumerate(sizes)]


def drain(sched, ready: list[int]) -> list[list[Transfer]]:
    """Transfers handed out after each layer of `ready` becomes ready."""
    out = []
    for i in ready:
        sched.on_gradient_ready(i, 0.0)
        got = []
        while isinstance(d := sched.next_transfer(0.0, True), Transfer):
            got.append(d)
        out.append(got)
    return out


def test_groups_are_consecutive_small_layers_in_backward_order_up_to_the_size() -> None:
    # min 6: 6 (50) alone; 5, 4, 3 (2 + 2 + 2 = 6) one group; 2 (100) alone; 1, 0 (3 + 5) one
    assert merge_groups(layers(), 6) == {5: (5, 4, 3), 1: (1, 0)}
    # min 5: 2 + 2 = 4 < 5, so the third joins; layer 0 (5 values) is not small: it goes alone
    assert merge_groups(layers(), 5) == {5: (5, 4, 3), 1: (1,)}
    assert merge_groups(layers(), 4) == {5: (5, 4), 3: (3,), 1: (1,)}
    assert merge_groups(layers(), 0) == {}


def test_a_group_goes_when_all_its_layers_are_ready_with_its_front_layers_policy() -> None:
    sched = create("dlcp", partition_bytes=400, merge_numel=6, front_loss_bound=0.1, back_loss_bound=0.05)
    sched.start_iteration(layers(), 0.0)
    handed = drain(sched, [6, 5, 4, 3, 2, 1, 0])
    assert [[t.layer_indices for t in step] for step in handed] == [
        [(6,)], [], [], [(5, 4, 3)], [(2,)], [], [(1, 0)]]
    group = handed[3][0]
    assert group.numel == 6 and group.nbytes == 24
    assert group.priority == layer_priority(3, 7)  # its front-most layer's, not layer 5's
    # front layers are the first half (index < 3.5): layer 3's bound (0.1), not layer 5's (0.05)
    assert group.loss is not None and group.loss.loss_bound == 0.1
    front = handed[6][0]
    assert front.priority == layer_priority(0, 7) == 7 and front.loss is not None and front.loss.loss_bound == 0.1
    assert sched.next_transfer(0.0, True) is None
    assert covered_numel(t for step in handed for t in step) == dict(enumerate(SIZES))


def test_without_merging_every_layer_goes_alone() -> None:
    sched = create("dlcp", partition_bytes=400)
    sched.start_iteration(layers(), 0.0)
    handed = drain(sched, [6, 5, 4, 3, 2, 1, 0])
    assert [[t.layer_indices for t in step] for step in handed] == [[(i,)] for i in [6, 5, 4, 3, 2, 1, 0]]


def test_a_ready_group_goes_before_partitions_of_layers_behind_it() -> None:
    # Layer 6's 50 values are 4 partitions of 16 values (64 bytes); layer 0 and 1 (3 + 5 values)
    # merge. Ready together, the group (front layer 0) goes first, then layer 6's partitions.
    sched = create("dlcp", partition_bytes=64, merge_numel=8)
    sched.start_iteration(layers([5, 3, 100, 20, 20, 20, 50]), 0.0)
    for i in (6, 5, 4, 3, 2, 1, 0):
        sched.on_gradient_ready(i, 0.0)
    order = []
    while isinstance(d := sched.next_transfer(0.0, True), Transfer):
        order.append(d.layer_indices)
    assert order[0] == (1, 0) and order.count((6,)) == 4 and len(order) == 1 + 7 + 2 + 2 + 2 + 4


def test_merge_beyond_a_partition_is_refused() -> None:
    with pytest.raises(SchedulerError, match="merge_numel"):
        create("dlcp", partition_bytes=400, merge_numel=101)


def test_the_merged_configuration_merges_and_full_dlcp_does_not() -> None:
    from experiments.trace_configs import trace_config, trace_scenario
    from experiments.training.trace_worker import TraceJob, make_scheduler

    base, placement = TraceJob(), trace_scenario("lossy-0.1").jobs[0]
    merged = make_scheduler(trace_config("dlcp-merged").job(base, placement, 1))
    plain = make_scheduler(trace_config("dlcp").job(base, placement, 1))
    b = base.rule.b  # 2 MiB of the real job's gradients, divided by b, in float32 values
    assert merged.merge_numel == int(2 * 2**20 / b) // 4 > 0 and plain.merge_numel == 0
    assert merged.merge_numel <= merged.partition_numel
