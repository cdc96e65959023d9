"""The worker agent drives schedulers over the PS and the ring; the agent CLI end to end."""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from gradfabric.command import cli as gradfabric_cli
from hosts.agent import WorkerAgent
from hosts.endpoint import Endpoint
from hosts.model import model_from_sizes, random_source
from hosts.ps import PS_WORKER_ID, ParameterServer, PsClient
from hosts.ring import RingAllReduce
from hosts.schedulers import AlphaBeta, create
from hosts.wire import MsgType
from tests.hosts_paths import datapath  # noqa: F401  (every test runs on both data paths)

LAYERS = model_from_sizes([3_000, 20_000, 500, 9_000], backward_s=0.002)
COST = AlphaBeta(alpha=1e-4, beta=1e-9)
#: Loss bounds of zero: every message arrives whole, so sums are exact. (With the default
#: bounds a message may end within its bound when a loaded host drops UDP on loopback; the
#: bounded-loss cases are tested with lossy relays in test_hosts_collectives.)
RELIABLE = {MsgType.GRADIENT: 0.0, MsgType.PARAMETER: 0.0}


def expected_sum(n: int, iteration: int) -> list[np.ndarray]:
    grads = [random_source(LAYERS, seed=5, rank=r)(iteration) for r in range(n)]
    return [np.sum([g[i] for g in grads], axis=0, dtype=np.float64) for i in range(len(LAYERS))]


@pytest.mark.parametrize("scheduler", ["p3", "mgwfbp", "dlcp"])
def test_ps_agents_aggregate_every_layer(scheduler: str) -> None:
    n = 3
    server = Endpoint(worker_id=PS_WORKER_ID, bounds=RELIABLE)
    endpoints = [Endpoint(worker_id=r, bounds=RELIABLE) for r in range(n)]
    try:
        ps = ParameterServer(server, n, update="sum")
        options = {"partition_bytes": 16_000} if scheduler in ("p3", "dlcp") else {}
        agents = [WorkerAgent(LAYERS, create(scheduler, cost=COST, **options), PsClient(e, server.address),
                              rank=r) for r, e in enumerate(endpoints)]
        with ThreadPoolExecutor(n + 1) as pool:
            served = pool.submit(ps.serve_iteration, 0, [l.index for l in LAYERS])
            runs = [pool.submit(a.run_iteration, 0, random_source(LAYERS, seed=5, rank=r)(0))
                    for r, a in enumerate(agents)]
            results = [f.result(timeout=30) for f in runs]
            assert served.result(timeout=30).gradient_loss == 0
        expected = expected_sum(n, 0)
        for values, report in results:
            for got, want in zip(values, expected):
                np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
            assert report.bytes == 4 * sum(l.numel for l in LAYERS)
            assert report.loss_rate == 0 and report.scheduler == scheduler
            assert report.compute_s >= sum(l.backward_s for l in LAYERS)
        if scheduler == "p3":  # 20 000 elements in 16 000-byte partitions: 5 transfers for layer 1
            assert results[0][1].transfers > len(LAYERS)
    finally:
        for e in [server, *endpoints]:
            e.close()


def test_ring_agents_allreduce_merged_transfers() -> None:
    n = 3
    endpoints = [Endpoint(worker_id=r, bounds=RELIABLE) for r in range(n)]
    try:
        peers = [e.address for e in endpoints]
        agents = [WorkerAgent(LAYERS, create("fusion", cost=COST, bucket_bytes=60_000, first_bucket_bytes=None),
                              RingAllReduce(e, r, peers), rank=r) for r, e in enumerate(endpoints)]
        with ThreadPoolExecutor(n) as pool:
            for it in range(2):
                runs = [pool.submit(a.run_iteration, it, random_source(LAYERS, seed=5, rank=r)(it))
                        for r, a in enumerate(agents)]
                results = [f.result(timeout=30) for f in runs]
                for values, report in results:
                    for got, want in zip(values, expected_sum(n, it)):
                        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
                    assert report.collective == "ring" and report.transfers < len(LAYERS)
                    # Each rank receives (n - 1) / n of every value in each stage, counted apart.
                    total = sum(l.numel for l in LAYERS)
                    assert abs(report.gather_received - total * (n - 1) / n) <= n * report.transfers
                    assert report.gather_lost == 0
    finally:
        for e in endpoints:
            e.close()


def test_agent_rejects_gradients_that_do_not_fit_the_model() -> None:
    with Endpoint(worker_id=0) as e:
        agent = WorkerAgent(LAYERS, create("wfbp"), PsClient(e, ("127.0.0.1", 9)), rank=0)
        with pytest.raises(Exception, match="layer 1"):
            agent.run_iteration(0, [np.zeros(l.numel + (l.index == 1)) for l in LAYERS])


def _listening(proc: subprocess.Popen[str]) -> str:
    line = proc.stdout.readline() if proc.stdout else ""
    record = json.loads(line)
    assert record["event"] == "listening"
    return record["address"].split(":")[1]


def test_cli_ps_and_two_workers_write_json_lines(tmp_path: Path) -> None:
    trace = tmp_path / "tiny.csv"
    trace.write_text("name,numel,forward_us,backward_us\nconv,2000,500,800\nfc,30000,200,1500\nout,100,100,300\n")
    cmd = [sys.executable, "-m", "gradfabric.command.cli", "agent"]
    # --timeout 60: under a heavy load the workers' start-up alone took 20 s, and the PS gave up
    common = ["--model", str(trace), "--iterations", "2", "--timeout", "60", "--grad-bound", "0", "--param-bound", "0"]
    ps = subprocess.Popen([*cmd, "ps", "--bind", "127.0.0.1:0", "--workers", "2", "--update", "sum", *common],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    workers: list[subprocess.Popen[str]] = []
    try:
        port = _listening(ps)
        for r in range(2):
            workers.append(subprocess.Popen(
                [*cmd, "worker", "--rank", str(r), "--ps", f"127.0.0.1:{port}", "--bind", "127.0.0.1:0",
                 "--scheduler", "mgwfbp", "--json", str(tmp_path / f"w{r}.jsonl"), *common],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        for proc in [*workers, ps]:
            out, err = proc.communicate(timeout=180)
            assert proc.returncode == 0, err
        lines = [json.loads(l) for l in (tmp_path / "w1.jsonl").read_text().splitlines()]
        iterations = [l for l in lines if l["event"] == "iteration"]
        assert [l["iteration"] for l in iterations] == [0, 1]
        for l in iterations:
            assert l["bytes"] == 4 * 32_100 and l["loss_rate"] == 0 and l["scheduler"] == "mgwfbp"
            assert l["iteration_s"] >= 0.0026  # forward + backward of the trace
    finally:
        for proc in [*workers, ps]:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_cli_errors_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code = gradfabric_cli.main(["agent", "worker", "--rank", "5", "--ring", "127.0.0.1:1,127.0.0.1:2",
                                "--layers", "10"])
    assert code == 1
    err = capsys.readouterr().err.strip()
    assert "rank 5" in err and len(err.splitlines()) == 1
    assert gradfabric_cli.main(["agent", "send", "--to", "127.0.0.1", "--messages", "1"]) == 1
    assert "needs a port" in capsys.readouterr().err


def test_cli_default_port_is_the_dlcp_port() -> None:
    from hosts import cli as hosts_cli
    from hosts.wire import DLCP_PORT

    assert hosts_cli.DLCP_PORT == DLCP_PORT
    assert hosts_cli.parse_address("10.0.1.1", default_port=DLCP_PORT) == ("10.0.1.1", 19600)
    assert hosts_cli.parse_address(":0") == ("0.0.0.0", 0)


def test_npz_gradient_source_checks_the_model(tmp_path: Path) -> None:
    from hosts.errors import ModelError
    from hosts.model import npz_source

    path = tmp_path / "grads.npz"
    arrays = [np.full(l.numel, l.index, np.float32) for l in LAYERS]
    np.savez(path, *arrays)
    got = npz_source(path, LAYERS)(7)
    assert [a.size for a in got] == [l.numel for l in LAYERS] and got[3][0] == 3
    with pytest.raises(ModelError, match="do not match"):
        npz_source(path, LAYERS[:2])
    with pytest.raises(ModelError, match="cannot read"):
        npz_source(tmp_path / "missing.npz", LAYERS)


def _free_udp_ports(n: int) -> list[int]:
    import socket

    socks = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def test_cli_ring_workers(tmp_path: Path) -> None:
    ring = ",".join(f"127.0.0.1:{p}" for p in _free_udp_ports(2))
    procs = [subprocess.Popen(
        [sys.executable, "-m", "gradfabric.command.cli", "agent", "worker", "--rank", str(r), "--ring", ring,
         "--layers", "4000,700,12000", "--iterations", "2", "--scheduler", "wfbp", "--timeout", "20"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(2)]
    try:
        outs = [p.communicate(timeout=180) for p in procs]  # two interpreters starting on a loaded machine
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for proc, (out, err) in zip(procs, outs):
        assert proc.returncode == 0, err
        rows = [json.loads(l) for l in out.splitlines()]
        assert rows[0]["event"] == "listening"
        its = [r for r in rows if r["event"] == "iteration"]
        assert [r["iteration"] for r in its] == [0, 1]
        assert all(r["collective"] == "ring" and r["transfers"] == 3 and r["loss_rate"] == 0 for r in its)
        # each rank sends half of every layer twice (reduce-scatter and all-gather)
        assert all(r["bytes"] == 4 * 16_700 for r in its)


def test_cli_send_and_recv_say_what_was_lost_and_how_the_window_went(capsys: pytest.CaptureFixture[str]) -> None:
    from hosts.relay import Relay
    from hosts.wire import Flags, Header, MsgType

    def lose_two(h: Header, data: bytes) -> int:  # 2 of 100 packets: within the 5 % bound
        first = h.msg_type <= MsgType.PARAMETER and not h.flags & Flags.RETRANSMIT
        return 0 if first and h.seq in (10, 60) else 1

    cmd = [sys.executable, "-m", "gradfabric.command.cli", "agent"]
    recv = subprocess.Popen([*cmd, "recv", "--bind", "127.0.0.1:0", "--messages", "1", "--grad-bound", "0.05",
                             "--timeout", "20"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        port = _listening(recv)
        with Relay(("127.0.0.1", int(port)), lose_two) as relay:
            assert gradfabric_cli.main(["agent", "send", "--to", f"127.0.0.1:{relay.address[1]}", "--messages", "1",
                                        "--elements", "36100", "--grad-bound", "0.05", "--timeout", "10"]) == 0
            out, err = recv.communicate(timeout=30)
        assert recv.returncode == 0, err
    finally:
        if recv.poll() is None:
            recv.kill()
            recv.wait()
    sent = [json.loads(l) for l in capsys.readouterr().out.splitlines()][1]
    received = next(json.loads(l) for l in out.splitlines() if '"received"' in l)
    assert received["zero_filled"] == 2 * 361 and received["wrong"] == 0
    assert "intact" not in received and "lost" not in received  # no "intact" next to a loss
    assert sent["retransmissions"] == 0 and sent["missing"] == 2 * 361
    assert sent["cwnd"] > 10 and sent["window_cuts"] == 0 and sent["srtt_ms"] > 0  # loss within the bound: no cut


def test_dlcp_agent_marks_its_bound_of_every_tensor_and_reports_the_share() -> None:
    # A 10 % gradient bound (front and back): every tensor, the 500-value one included (whole
    # 361-value packets could mark none of it), has 10 % of its values marked drop-eligible,
    # and the iteration's JSON line says so per tensor. Nothing is lost on loopback.
    bounds = {MsgType.GRADIENT: 0.10, MsgType.PARAMETER: 0.0}
    server = Endpoint(worker_id=PS_WORKER_ID, bounds=bounds)
    worker = Endpoint(worker_id=0, bounds=bounds)
    try:
        ps = ParameterServer(server, 1, update="sum")
        scheduler = create("dlcp", cost=COST, front_loss_bound=0.10, back_loss_bound=0.10)
        agent = WorkerAgent(LAYERS, scheduler, PsClient(worker, server.address), rank=0)
        with ThreadPoolExecutor(2) as pool:
            served = pool.submit(ps.serve_iteration, 0, [l.index for l in LAYERS])
            _, report = pool.submit(agent.run_iteration, 0, random_source(LAYERS, seed=5, rank=0)(0)).result(30)
            served.result(timeout=30)
    finally:
        server.close()
        worker.close()
    line = json.loads(report.to_json())
    shares = {int(t): v for t, v in line["marked_share"].items()}
    assert set(shares) == {l.index for l in LAYERS}
    for layer in LAYERS:
        assert abs(shares[layer.index] - 0.10) <= 1 / layer.numel  # floor(0.1 x len) of len
    assert line["lost_by_class"] == {} and line["lost_by_tensor"] == {} and line["reordered"] >= 0
    assert line["gather_received"] == 0 == line["gather_lost"]  # a PS job has no all-gather stage
