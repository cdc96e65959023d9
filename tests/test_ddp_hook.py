"""The DDP communication hook on two local processes: gloo on loopback for set-up, the
gradient buckets all-reduced over DLCP (UDP on loopback)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch.multiprocessing as mp

from tests.netns import free_port

STEPS = 4


def _model(torch):  # noqa: ANN001, ANN202
    torch.manual_seed(3)
    return torch.nn.Sequential(torch.nn.Linear(64, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 300),
                               torch.nn.ReLU(), torch.nn.Linear(300, 10))


def _train(torch, ddp, rank: int) -> list[np.ndarray]:  # noqa: ANN001
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(100 + rank)  # every rank its own data
    for _ in range(STEPS):
        x = torch.randn(16, 64, generator=gen)
        y = torch.randint(0, 10, (16,), generator=gen)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(ddp(x), y).backward()
        opt.step()
    return [p.detach().numpy().copy() for p in ddp.parameters()]


def _rank(rank: int, port: int, out: str) -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from experiments.ddp_hook import connect, dlcp_allreduce_hook

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        # Small buckets (0.5 MB; DDP's first bucket holds up to 1 MB): layers travel apart.
        info = {}
        for collective in ("ring", "star"):
            hooked = DDP(_model(torch), bucket_cap_mb=0.5)
            state = connect(hooked.module, collective=collective)
            hooked.register_comm_hook(state, dlcp_allreduce_hook)
            with_dlcp = _train(torch, hooked, rank)
            state.close()
            np.savez(Path(out) / f"{collective}{rank}.npz", *with_dlcp)
            info[collective] = {"steps": state.step, "tensor_ids": state.tensor_ids,
                                "packets": state.take_stats().packets}
        reference = _train(torch, DDP(_model(torch)), rank)  # gloo's own all-reduce
        np.savez(Path(out) / f"ref{rank}.npz", *reference)
        (Path(out) / f"rank{rank}.json").write_text(json.dumps(info))
    finally:
        dist.destroy_process_group()


def _arrays(path: Path) -> list[np.ndarray]:
    with np.load(path) as data:
        return [data[k] for k in data.files]


def test_ddp_hook_all_reduces_buckets_over_dlcp(tmp_path: Path) -> None:
    mp.start_processes(_rank, args=(free_port(), str(tmp_path)), nprocs=2, join=True, start_method="spawn")
    reference = _arrays(tmp_path / "ref0.npz")
    for collective in ("ring", "star"):  # buckets in flight at once, two collectives
        info = [json.loads((tmp_path / f"rank{r}.json").read_text())[collective] for r in range(2)]
        hooked = [_arrays(tmp_path / f"{collective}{r}.npz") for r in range(2)]
        for a, b, ref in zip(hooked[0], hooked[1], reference):
            assert np.array_equal(a, b)  # both ranks applied the same reduced gradients
            np.testing.assert_allclose(a, ref, rtol=1e-5, atol=1e-6)  # and they are DDP's mean
        for r in range(2):
            assert info[r]["steps"] == STEPS
            assert info[r]["packets"] > 0
            # More than one bucket per step, each tagged with its front-most layer; layer 0 included.
            assert len(info[r]["tensor_ids"]) > STEPS
            assert 0 in info[r]["tensor_ids"] and max(info[r]["tensor_ids"]) > 0


def test_connect_advertises_the_process_groups_interface_never_a_default_loopback(monkeypatch) -> None:  # noqa: ANN001
    import pytest

    from experiments.ddp_hook import HOST_ENV, _check_reachable, advertised_host
    from experiments.errors import ExperimentError

    for name in (HOST_ENV, "GLOO_SOCKET_IFNAME", "MASTER_ADDR"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ExperimentError, match=HOST_ENV):
        advertised_host()  # nothing to go by (no process group here): no silent 127.0.0.1
    assert advertised_host("10.0.3.1") == "10.0.3.1"
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    assert advertised_host() == "127.0.0.1"  # the rendezvous is on this host: loopback is right
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    assert advertised_host() == "127.0.0.1"  # gloo's interface
    monkeypatch.setenv(HOST_ENV, "10.0.9.9")
    assert advertised_host() == "10.0.9.9"
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "nosuchif0")
    monkeypatch.delenv(HOST_ENV)
    with pytest.raises(ExperimentError, match="nosuchif0"):
        advertised_host()
    _check_reachable([("a", ("127.0.0.1", 1)), ("a", ("127.0.0.1", 2))])  # one host: fine
    _check_reachable([("a", ("10.0.1.1", 1)), ("b", ("10.0.2.1", 2))])
    with pytest.raises(ExperimentError, match="rank 1 on b advertised 127.0.0.1:2"):
        _check_reachable([("a", ("10.0.1.1", 1)), ("b", ("127.0.0.1", 2))])
