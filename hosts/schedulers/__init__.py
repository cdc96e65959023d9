"""Gradient schedulers shared by the worker agent (real time) and the simulator.

Use them by name::

    from hosts.schedulers import AlphaBeta, Layer, create
    sched = create("mgwfbp", cost=AlphaBeta(alpha=9.08e-4, beta=7.4e-10))
    sched.start_iteration(layers, now)          # backward pass begins
    sched.on_gradient_ready(layer_index, now)    # a layer's gradient is computed
    decision = sched.next_transfer(now, link_idle)  # Transfer | Wait | None; repeat until not Transfer
    sched.on_transfer_done(transfer, now, achieved_bytes_per_s)

The protocol, the data types and their exact meaning are documented in
:mod:`hosts.schedulers.base`. Names: ``wfbp``, ``synceasgd``, ``fusion``, ``mgwfbp``, ``p3``,
``prophet``, ``dlcp``.
"""

from hosts.schedulers.base import (
    MAX_PRIORITY,
    AlphaBeta,
    Decision,
    Layer,
    LossPolicy,
    Scheduler,
    SchedulerError,
    Segment,
    Transfer,
    Wait,
    covered_numel,
    layer_priority,
)
from hosts.schedulers.registry import available, create, register, scheduler_class

# Importing the modules registers their schedulers.
from hosts.schedulers import dlcp, fusion, mgwfbp, p3, prophet, synceasgd, wfbp  # noqa: E402,F401  isort: skip

__all__ = [
    "MAX_PRIORITY",
    "AlphaBeta",
    "Decision",
    "Layer",
    "LossPolicy",
    "Scheduler",
    "SchedulerError",
    "Segment",
    "Transfer",
    "Wait",
    "available",
    "covered_numel",
    "create",
    "layer_priority",
    "register",
    "scheduler_class",
]
