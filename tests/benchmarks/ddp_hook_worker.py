"""One rank of the DDP hook benchmark (started by torchrun from bench_ddp_hook.py).

Plain DDP (gloo's all-reduce) and DDP with the DLCP hook (bound 0) train the same MLP of
``--mb`` MB of float32 gradients, in pairs of one iteration each whose order alternates (gloo
then hook, hook then gloo, ...), so a busy machine weighs on both alike and ``times[side][i]``
of the two sides form pair i; rank 0 writes as JSON each side's iteration times, the CPU
time its process used per iteration (s, all threads), every rank's times and CPU, and the
address every rank's endpoint advertised. ``--check`` (after the timed iterations): the
gradients of one more iteration of each against each other, and one all-reduce of
integer-valued float32 through the hook against gloo's (sums and the mean exact in
float32, so bound 0 must give equal values). ``--port`` binds the hook's endpoint to a
port (the DLCP port on a fabric), ``--port-rate`` gives it the ports' packets/s.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from experiments.ddp_hook import DlcpHookState, connect, dlcp_allreduce_hook
from hosts.pacing import Aimd


def _model(mb: float) -> torch.nn.Module:
    width = int((mb * 2**20 / 4 / 3) ** 0.5)  # three width x width layers
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Linear(width, width),
                               torch.nn.ReLU(), torch.nn.Linear(width, width))


def _step(model: torch.nn.Module, x: torch.Tensor) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the whole process: every thread) of one iteration."""
    started, cpu = time.perf_counter(), time.process_time()
    model.zero_grad(set_to_none=True)
    model(x).square().mean().backward()  # DDP's all-reduce finishes inside backward()
    return time.perf_counter() - started, time.process_time() - cpu


def _check(gloo: DDP, hooked: DDP, state: DlcpHookState, x: torch.Tensor) -> list[dict]:
    """The hook against gloo, one iteration and one integer-valued all-reduce (module doc);
    every rank's outcome, by rank."""
    for model in (gloo, hooked):
        _step(model, x)
    diff = max(float((a.grad - b.grad).abs().max()) for a, b in zip(gloo.parameters(), hooked.parameters()))
    scale = max(float(a.grad.abs().max()) for a in gloo.parameters())
    world = dist.get_world_size()
    ints = np.random.default_rng(dist.get_rank()).integers(-2**20, 2**20, size=100_003).astype(np.float32)
    mean = state.allreduce(ints.copy(), iteration=state.step, tensor_id=0, part=0)
    ref = torch.from_numpy(ints.copy())
    dist.all_reduce(ref)
    ref /= world
    mine = {"grad_max_abs_diff": diff, "grad_max_abs": scale, "ints_equal": bool(np.array_equal(mean, ref.numpy())),
            "ints_max_abs_diff": float(np.abs(mean - ref.numpy()).max()),
            "lost_elements": state.take_stats().lost_elements}
    everyone: list = [None] * world
    dist.all_gather_object(everyone, mine)
    return everyone


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=float, default=32.0)
    parser.add_argument("--iterations", type=int, default=15)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--collective", default="ring")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--port-rate", type=float, default=None, help="packets/s of the slowest port (fabric)")
    parser.add_argument("--port", type=int, default=0, help="UDP port of the hook's endpoint (fabric: DLCP_PORT)")
    parser.add_argument("--check", action="store_true", help="then compare the hook with gloo (module doc)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    gloo = DDP(_model(args.mb))
    hooked = DDP(_model(args.mb))
    state = connect(hooked.module, collective=args.collective, aimd=Aimd(rate=10_000_000), port_rate=args.port_rate,
                    port=args.port)
    hooked.register_comm_hook(state, dlcp_allreduce_hook)
    width = gloo.module[0].in_features
    x = torch.randn(8, width, generator=torch.Generator().manual_seed(rank))
    times: dict[str, list[float]] = {"gloo": [], "hook": []}
    cpu: dict[str, list[float]] = {"gloo": [], "hook": []}
    for i in range(args.warmup + args.iterations):
        # A pair of iterations, its order swapped each time, so neither side always follows the other.
        order = (("gloo", gloo), ("hook", hooked)) if i % 2 == 0 else (("hook", hooked), ("gloo", gloo))
        for name, model in order:
            seconds, used = _step(model, x)
            if i >= args.warmup:
                times[name].append(seconds)
                cpu[name].append(used)
    grads = sum(p.numel() for p in gloo.parameters()) * 4
    stats = state.take_stats()
    check = _check(gloo, hooked, state, x) if args.check else None
    ranks: list = [None] * dist.get_world_size()
    dist.all_gather_object(ranks, {"times": times, "cpu": cpu})  # every rank's, for rank 0's JSON
    state.close()
    if rank == 0:
        args.out.write_text(json.dumps({"times": times, "cpu": cpu, "gradient_bytes": grads, "world": dist.get_world_size(),
                                        "retransmitted": stats.retransmitted, "packets": stats.packets,
                                        "lost_elements": stats.lost_elements, "peers": [list(p) for p in state.peers],
                                        "check": check, "ranks": ranks}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
