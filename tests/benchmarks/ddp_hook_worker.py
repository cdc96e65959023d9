"""One rank of the DDP hook benchmark (started by torchrun from bench_ddp_hook.py).

Plain DDP (gloo's all-reduce) and DDP with the DLCP hook (bound 0) train the same MLP of
``--mb`` MB of float32 gradients, iterations interleaved (gloo, hook, gloo, ...), so a busy
machine weighs on both alike; rank 0 writes each side's iteration times and the CPU time its
process used per iteration (s, all threads) as JSON.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from experiments.ddp_hook import connect, dlcp_allreduce_hook
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=float, default=32.0)
    parser.add_argument("--iterations", type=int, default=15)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--collective", default="ring")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    gloo = DDP(_model(args.mb))
    hooked = DDP(_model(args.mb))
    state = connect(hooked.module, collective=args.collective, aimd=Aimd(rate=10_000_000))
    hooked.register_comm_hook(state, dlcp_allreduce_hook)
    width = gloo.module[0].in_features
    x = torch.randn(8, width, generator=torch.Generator().manual_seed(rank))
    times: dict[str, list[float]] = {"gloo": [], "hook": []}
    cpu: dict[str, list[float]] = {"gloo": [], "hook": []}
    for i in range(args.warmup + args.iterations):
        for name, model in (("gloo", gloo), ("hook", hooked)):
            seconds, used = _step(model, x)
            if i >= args.warmup:
                times[name].append(seconds)
                cpu[name].append(used)
    grads = sum(p.numel() for p in gloo.parameters()) * 4
    stats = state.take_stats()
    state.close()
    if rank == 0:
        args.out.write_text(json.dumps({"times": times, "cpu": cpu, "gradient_bytes": grads, "world": dist.get_world_size(),
                                        "retransmitted": stats.retransmitted, "packets": stats.packets}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
