"""A PyTorch DDP communication hook that all-reduces gradient buckets over the DLCP transport.

For users who train with ``torch.nn.parallel.DistributedDataParallel`` on a real cluster:
each gradient bucket DDP hands to the hook is all-reduced by a ring of DLCP endpoints
(:class:`hosts.ring.RingAllReduce`, UDP), so its packets carry the DLCP tags the switches
act on:

* ``tensor_id``: the forward-order index of the bucket's front-most parameter (0 = the
  input-side layer), so the fabric's layer-priority table ranks buckets like layers;
* ``prio_hint``: the layer priority of that index (front layers most urgent);
* ``mag_class`` per packet (from the values it carries) and, when a gradient loss bound is
  set, the drop-eligible flag on the smallest-magnitude packets within that bound.

The process group (e.g. gloo) is used once, to exchange the endpoints' addresses::

    state = connect(model, host=my_ip)
    ddp.register_comm_hook(state, dlcp_allreduce_hook)
    ...
    state.close()

The hook is synchronous: it returns a completed future once the bucket is reduced. (No
``from __future__ import annotations`` here: DDP checks the hook's annotations at run time.)
"""

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from experiments.errors import ExperimentError
from hosts.endpoint import Endpoint, SendReport
from hosts.pacing import Aimd
from hosts.ring import MAX_PARTS, RingAllReduce
from hosts.schedulers import layer_priority
from hosts.wire import MsgType


@dataclass
class DlcpHookState:
    """The ring a rank's buckets travel on, and what they cost."""

    ring: RingAllReduce
    parameter_index: dict[int, int]  # id(parameter) -> forward-order index
    num_layers: int
    grad_bound: float = 0.0
    timeout_s: float = 30.0
    step: int = 0  # completed iterations (advanced after the last bucket)
    sends: list[SendReport] = field(default_factory=list)
    tensor_ids: list[int] = field(default_factory=list)  # tag of each bucket reduced, in order
    lost_elements: int = 0

    @property
    def endpoint(self) -> Endpoint:
        return self.ring.endpoint

    def close(self) -> None:
        self.endpoint.close()

    def bucket_tag(self, parameters: list[Any]) -> int:
        ids = [self.parameter_index[id(p)] for p in parameters if id(p) in self.parameter_index]
        if not ids:
            raise ExperimentError("a DDP bucket holds none of the model's parameters (was connect() "
                                  "given the model DDP wraps?)")
        return min(ids)


def connect(model: torch.nn.Module, *, host: str = "127.0.0.1", port: int = 0, job_id: int = 1, grad_bound: float = 0.0,
            param_bound: float = 0.0, rate_pps: float = 50_000.0, timeout_s: float = 30.0,
            process_group: Any = None) -> DlcpHookState:
    """Open this rank's DLCP endpoint and learn every rank's (collective over the process group).

    `grad_bound` is the share of a bucket's values the reduce-scatter may lose (zero-filled);
    0 makes the transport reliable. `param_bound` does the same for the all-gather."""
    if not dist.is_initialized():
        raise ExperimentError("connect() needs torch.distributed.init_process_group() first")
    rank, world = dist.get_rank(process_group), dist.get_world_size(process_group)
    endpoint = Endpoint(worker_id=rank, job_id=job_id, host=host, port=port, aimd=Aimd(rate=rate_pps),
                        bounds={MsgType.GRADIENT: grad_bound, MsgType.PARAMETER: param_bound})
    try:
        addresses: list[Any] = [None] * world
        dist.all_gather_object(addresses, endpoint.address, group=process_group)
        ring = RingAllReduce(endpoint, rank, [tuple(a) for a in addresses])
    except BaseException:
        endpoint.close()
        raise
    index = {id(p): i for i, p in enumerate(model.parameters())}
    return DlcpHookState(ring=ring, parameter_index=index, num_layers=len(index), grad_bound=grad_bound,
                         timeout_s=timeout_s)


def dlcp_allreduce_hook(state: DlcpHookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP communication hook: the bucket's mean over all ranks, through the DLCP ring."""
    buffer = bucket.buffer()
    tensor_id = state.bucket_tag(list(bucket.parameters()))
    if bucket.index() >= MAX_PARTS:
        raise ExperimentError(f"DDP bucket {bucket.index()} exceeds the ring's {MAX_PARTS} parts per iteration")
    options: dict[str, Any] = {"prio_hint": layer_priority(tensor_id, state.num_layers),
                               "drop_eligible": state.grad_bound > 0}
    if state.grad_bound > 0:
        options["eligible_share"] = state.grad_bound
    values = buffer.detach().cpu().numpy().astype(np.float32, copy=False)
    reduced, report = state.ring.allreduce(values, iteration=state.step, tensor_id=tensor_id, part=bucket.index(),
                                           num_layers=state.num_layers, average=True, timeout=state.timeout_s,
                                           **options)
    state.sends += report.sends
    state.tensor_ids.append(tensor_id)
    state.lost_elements += report.lost_elements
    if bucket.is_last():
        state.step += 1
    buffer.copy_(torch.from_numpy(reduced).view_as(buffer))
    future: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    future.set_result(buffer)
    return future
