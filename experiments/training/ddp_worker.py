"""One rank of the experiment's training job: PyTorch DDP on the digits CNN.

Every configuration runs this same loop; only the communication differs. ``--comm gloo``:
DDP's own all-reduce over gloo (TCP), what users run. ``--comm dlcp``: the same DDP with
the DLCP communication hook (:mod:`experiments.ddp_hook`; UDP, per-bucket layer tags,
optional loss bound). Buckets are capped small (``--bucket-cap-mb``) so that each
parameter tensor is a bucket of its own, sent as soon as backward produced it (WFBP).

Prints JSON lines (the protocol of :mod:`experiments.training.processes`): ``listening``
once the process group and the DLCP endpoint are up, then waits for a line on stdin (with
``--wait-go``), one ``iteration`` record per iteration, and ``done`` with the totals::

    python -m experiments.training.ddp_worker --rank 0 --world 2 --master 10.0.0.1:29500 \
        --bind 10.0.0.1 --comm dlcp --grad-bound 0.1
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from datetime import timedelta
from typing import Any

import numpy as np

from experiments.errors import ExperimentError
from experiments.training.cnn import as_images, build_cnn
from experiments.training.data import Batches, load_digits
from experiments.training.loop import Record
from experiments.training.model import torch_module
from hosts.wire import DLCP_PORT


@dataclass(frozen=True)
class DdpJob:
    """What every rank of a job agrees on (hyper-parameters and communication)."""

    iterations: int = 60
    batch_size: int = 32
    lr: float = 0.01  # Adam
    model_seed: int = 0
    data_seed: int = 1  # minibatch order: differs per repetition
    eval_every: int = 5
    bucket_cap_mb: float = 1e-4  # below the smallest tensor's bytes: one tensor per bucket
    comm: str = "gloo"  # "gloo" or "dlcp"
    collective: str = "ring"  # dlcp: "ring" or "star" (rank 0 aggregates)
    grad_bound: float = 0.0
    param_bound: float = 0.0
    job_id: int = 1
    rate_pps: float = 20_000.0  # DLCP sender's starting rate: the fabric's port rate
    max_rate_pps: float = 80_000.0
    in_flight: int = 4
    timeout_s: float = 60.0

    def argv(self) -> list[str]:
        out: list[str] = []
        for name, value in asdict(self).items():
            out += [f"--{name.replace('_', '-')}", str(value)]
        return out


def interface_of(ip: str) -> str:
    """The name of the interface holding `ip` (gloo binds its TCP sockets there)."""
    text = subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True, check=True).stdout
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[3].split("/")[0] == ip:
            return fields[1]
    raise ExperimentError(f"no interface holds {ip} here:\n{text}")


def _emit(record: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(record, sort_keys=True) + "\n")
    sys.stdout.flush()


def run_rank(job: DdpJob, rank: int, world: int, master: str, bind: str, dlcp_port: int, wait_go: bool) -> None:
    """Train as `rank` of `world` (module doc)."""
    torch = torch_module()
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    os.environ.setdefault("GLOO_SOCKET_IFNAME", interface_of(bind))
    dist.init_process_group("gloo", init_method=f"tcp://{master}", rank=rank, world_size=world,
                            timeout=timedelta(seconds=job.timeout_s * 2))
    state = None
    try:
        data = load_digits(0)
        test_x, test_y = torch.from_numpy(as_images(data.test_x)), data.test_y
        model = build_cnn(job.model_seed)
        ddp = DistributedDataParallel(model, bucket_cap_mb=job.bucket_cap_mb)
        if job.comm == "dlcp":
            from experiments.ddp_hook import connect, dlcp_allreduce_hook
            from hosts.pacing import Aimd

            state = connect(model, host=bind, port=dlcp_port, job_id=job.job_id, grad_bound=job.grad_bound,
                            param_bound=job.param_bound, collective=job.collective, in_flight=job.in_flight,
                            timeout_s=job.timeout_s,
                            aimd=Aimd(rate=job.rate_pps, min_rate=job.rate_pps / 10, max_rate=job.max_rate_pps,
                                      increase=job.rate_pps / 10))
            ddp.register_comm_hook(state, dlcp_allreduce_hook)
            address = f"{state.endpoint.address[0]}:{state.endpoint.address[1]}"
        elif job.comm == "gloo":
            address = f"{bind}:gloo"
        else:
            raise ExperimentError(f"unknown --comm {job.comm!r}: gloo or dlcp")
        _emit({"event": "listening", "address": address, "rank": rank})
        if wait_go:
            sys.stdin.readline()
        dist.barrier()
        batches = Batches(data, rank, world, job.batch_size, job.data_seed)
        opt = torch.optim.Adam(ddp.parameters(), lr=job.lr)
        loss_fn = torch.nn.CrossEntropyLoss()
        origin = time.perf_counter()
        totals = {"packets": 0, "retransmitted": 0, "lost": 0, "reduced": 0}
        for it in range(job.iterations):
            began = time.perf_counter()
            x, y = batches.batch(it)
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(ddp(torch.from_numpy(as_images(x))), torch.from_numpy(y))
            loss.backward()
            opt.step()
            ended = time.perf_counter()
            acc = None
            if it % job.eval_every == job.eval_every - 1 or it == job.iterations - 1:
                with torch.no_grad():
                    acc = float((model(test_x).argmax(dim=1).numpy() == test_y).mean())
            packets = resent = 0
            loss_rate = 0.0
            if state is not None:
                s = state.take_stats()
                packets, resent = s.packets, s.retransmitted
                loss_rate = s.lost_elements / s.reduced_elements if s.reduced_elements else 0.0
                totals["lost"] += s.lost_elements
                totals["reduced"] += s.reduced_elements
            totals["packets"] += packets
            totals["retransmitted"] += resent
            record = Record(iteration=it, rank=rank, wall_s=time.perf_counter() - origin, iteration_s=ended - began,
                            loss=float(loss.item()), accuracy=acc, packets=packets, retransmitted=resent,
                            loss_rate=loss_rate)
            _emit({"event": "iteration", **record.to_dict()})
        receive: dict[str, Any] = {}
        if state is not None:
            stats = state.endpoint.reassembler.stats
            receive = {"data_packets": stats.data_packets, "duplicates": stats.duplicates, "drops": dict(stats.drops)}
        dist.barrier()
        _emit({"event": "done", "role": "worker", "rank": rank, "totals": totals, "receive": receive,
               "buckets": len(set(state.tensor_ids)) if state is not None else None})
    finally:
        if state is not None:
            state.close()
        dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.training.ddp_worker", description=__doc__.split("\n\n")[0])
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--master", required=True, help="IP:PORT of rank 0's rendezvous (TCP store)")
    p.add_argument("--bind", default="127.0.0.1", help="this rank's IP (DLCP socket, gloo interface)")
    p.add_argument("--dlcp-port", type=int, default=DLCP_PORT, help="DLCP socket port (0: any)")
    p.add_argument("--wait-go", action="store_true")
    defaults = DdpJob()
    for name, value in asdict(defaults).items():
        p.add_argument(f"--{name.replace('_', '-')}", type=type(value), default=value)
    args = p.parse_args(argv)
    job = DdpJob(**{k: getattr(args, k) for k in asdict(defaults)})
    try:
        run_rank(job, args.rank, args.world, args.master, args.bind, args.dlcp_port, args.wait_go)
    except ExperimentError as exc:
        print(f"ddp_worker rank {args.rank}: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
