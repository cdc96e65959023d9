"""The TCP baselines' congestion control: set per socket, read back, recorded and compared."""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path

import pytest

from experiments.errors import ExperimentError
from experiments.trace_configs import TRACE_SCENARIOS, trace_config
from experiments.trace_report import write_trace_report
from experiments.trace_sweep import queue_drops_by_queue, tcp_congestion_plan
from experiments.training.accounting import received
from experiments.training.tcp_collectives import TcpMesh, congestion_of
from experiments.training.trace_worker import TraceJob

AVAILABLE = Path("/proc/sys/net/ipv4/tcp_available_congestion_control")
DEFAULT = Path("/proc/sys/net/ipv4/tcp_congestion_control")


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def _two_meshes(congestion: str) -> list[TcpMesh]:
    """Ranks 0 and 1 of a 2-rank ring on loopback, each built in its own thread (rank 0 accepts)."""
    addresses = [("127.0.0.1", p) for p in _free_ports(2)]
    meshes: dict[int, TcpMesh] = {}
    errors: list[BaseException] = []

    def build(rank: int) -> None:
        try:
            meshes[rank] = TcpMesh(rank, addresses, {1 - rank}, congestion=congestion, timeout_s=30.0)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=build, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60.0)
    if errors:
        for m in meshes.values():
            m.close()
        raise errors[0]
    return [meshes[0], meshes[1]]


def _other_than_default() -> str:
    """An algorithm this kernel offers that is not its default (the test sets what it would not get)."""
    offered = AVAILABLE.read_text().split()
    default = DEFAULT.read_text().strip()
    others = [name for name in ("cubic", "reno", "bbr") if name in offered and name != default]
    if not others:
        pytest.fail(f"this kernel offers only {offered}: no algorithm besides the default {default!r} to set")
    return others[0]


def test_the_option_sets_each_socket_and_the_record_says_so() -> None:
    name = _other_than_default()
    meshes = _two_meshes(name)
    try:
        for mesh in meshes:
            assert mesh.congestion_used() == {str(1 - mesh.rank): name}
            assert received([mesh]) == {"tcp_congestion": {str(1 - mesh.rank): name}}
            for sock in mesh._socks.values():  # noqa: SLF001 - the kernel's own answer, independently of the mesh
                raw = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16)
                assert raw.rstrip(b"\0").decode() == name
    finally:
        for mesh in meshes:
            mesh.close()


def test_without_the_option_sockets_run_the_host_default() -> None:
    meshes = _two_meshes("")
    try:
        default = DEFAULT.read_text().strip()
        assert [m.congestion_used() for m in meshes] == [{"1": default}, {"0": default}]
    finally:
        for mesh in meshes:
            mesh.close()


def test_an_unknown_algorithm_fails_with_what_the_kernel_offers() -> None:
    with pytest.raises(ExperimentError, match="no-such-cc.*this kernel offers"):
        _two_meshes("no-such-cc")


def test_congestion_of_a_plain_socket() -> None:
    with socket.socket() as s:
        assert congestion_of(s) == DEFAULT.read_text().strip()


def test_the_cubic_configuration_differs_from_ddp_tcp_only_in_congestion_control() -> None:
    placement = TRACE_SCENARIOS["multitenant"].jobs[0]
    cubic = trace_config("ddp-tcp-cubic").job(TraceJob(), placement, seed=5)
    plain = trace_config("ddp-tcp").job(TraceJob(), placement, seed=5)
    assert cubic.congestion == "cubic" and plain.congestion == ""
    assert cubic.argv()[cubic.argv().index("--congestion") + 1] == "cubic"
    assert {**vars(cubic), "congestion": ""} == vars(plain)
    def unnamed(config: str) -> list[dict]:
        return [{k: v for k, v in job.items() if k != "name"} for job in trace_config(config).policy([1, 2])["jobs"]]

    assert unnamed("ddp-tcp-cubic") == unnamed("ddp-tcp")


def test_the_plan_records_each_tcp_configuration_s_congestion_control() -> None:
    default = DEFAULT.read_text().strip()
    plan = tcp_congestion_plan({"multitenant": ("ddp-tcp", "ddp-tcp-cubic", "transport")})
    assert plan == {"host_default": default,
                    "configs": {"ddp-tcp": f"host default ({default})", "ddp-tcp-cubic": "cubic"}}


def test_queue_drops_are_kept_per_queue() -> None:
    from controller.counters import SwitchCounters

    before = {"counters": {"l1": SwitchCounters(queue_drops={(3, 0, "queue_full"): 10})}}
    after = {"counters": {"l1": SwitchCounters(queue_drops={(3, 0, "queue_full"): 25, (4, 5, "queue_full"): 2}),
                          "s1": SwitchCounters(queue_drops={(1, 0, "queue_full"): 7})}}
    assert queue_drops_by_queue(before, after) == {"l1:3:0": 15, "l1:4:5": 2, "s1:1:0": 7}


def _record(run_id: str, config: str, rep: int, p50: float, congestion: str | None) -> dict:
    recs = [{"iteration": i, "iteration_s": t, "compute_s": 0.3, "forward_wait_s": 0.0, "first_send_s": 0.1 + i,
             "last_arrival_s": 0.4 + i, "lost_by_tensor": {}} for i, t in enumerate([9.0, p50, p50])]
    totals = {"lost": 0, "reduced": 100, **({"tcp_congestion": {"1": congestion}} if congestion else {})}
    return {"run_id": run_id, "scenario": "multitenant", "config": config, "repetition": rep, "status": "ok",
            "jobs": {"1": {"ranks": {"0": {"role": "worker", "cpu_share": 0.2, "totals": totals, "records": recs}}}},
            "switch": {}, "background": [], "max_cpu_share": 0.2, "cpu_bound": False, "cpu_starved": False}


def test_report_compares_against_the_faster_tcp_of_each_round(tmp_path: Path) -> None:
    (tmp_path / "runs").mkdir()
    meta = {"command": "test", "repetitions": 3, "job": {"model": "resnet50", "precision": "fp32", "iterations": 3},
            "scale": {"b": 13.0, "k": 32.0, "real_gbps": 25.0, "emulated_mbps": 60.0, "capacity_ratio": 416.7},
            "runs": [{}] * 9}
    (tmp_path / "plan.json").write_text(json.dumps(meta))
    # per round p50 (s): bbr 2.0/2.0/2.0, cubic 1.6/2.4/1.5, transport 1.0/1.0/1.2
    # the faster TCP per round: 1.6, 2.0, 1.5 -> transport's ratios 1.6, 2.0, 1.25: median 1.6
    table = {"ddp-tcp": ([2.0, 2.0, 2.0], "bbr"), "ddp-tcp-cubic": ([1.6, 2.4, 1.5], "cubic"),
             "transport": ([1.0, 1.0, 1.2], None)}
    n = 0
    for rep in range(3):
        for config, (p50s, cc) in table.items():
            r = _record(f"{n:03d}", config, rep, p50s[rep], cc)
            (tmp_path / "runs" / f"{r['run_id']}.json").write_text(json.dumps(r))
            n += 1
    rows = write_trace_report(tmp_path)["multitenant"]
    assert rows["transport"]["speedup_p50"]["median"] == pytest.approx(2.0)
    assert rows["transport"]["speedup_p50_faster_tcp"]["median"] == pytest.approx(1.6)
    assert rows["transport"]["speedup_p50_faster_tcp"]["pairs"] == 3
    # cubic against the faster TCP: 1.6/1.6, 2.0/2.4, 1.5/1.5 -> median 1.0
    assert rows["ddp-tcp-cubic"]["speedup_p50_faster_tcp"]["median"] == pytest.approx(1.0)
    assert rows["ddp-tcp"]["tcp_congestion"] == ["bbr"] and rows["ddp-tcp-cubic"]["tcp_congestion"] == ["cubic"]
    text = (tmp_path / "results.md").read_text()
    assert "| ddp-tcp-cubic | cubic |" in text and "| transport | (no TCP) |" in text
