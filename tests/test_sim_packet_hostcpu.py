"""The ranks' host CPU in the packet simulation: the figures read from a fabric sweep's runs
(fake run records, values by hand; no ns-3), and (with the ns3 extra; skipped with the reason
otherwise) DLCP and TCP transfers whose times with a CPU per packet are computed by hand.

The hand-computed runs use h1 -- s1 -- h2 (``tiny``): 1,502-byte DLCP data frames (32 + 1,440
payload + 8 UDP + 20 IPv4 + 2 PPP) take 12.016 us on a 1 Gbit/s link and 120.16 us on a
100 Mbit/s one, 62-byte probes 0.496 and 4.96 us; 1 us of propagation per link.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from simulator.packet.host_cpu import (BENCH_DLCP_RX_S, BENCH_DLCP_TX_S, SWITCH_OFF_S, HostCpu, host_cpu,
                                       linux_tcp_buffers, rank_cpu, server_cpu, switch_availability,
                                       switch_run_schedules, switch_schedule)
from simulator.packet.runtime import PacketSimulationError, missing_reason
from simulator.packet.topology import Port, tiny

needs_ns3 = pytest.mark.skipif(missing_reason() is not None, reason=str(missing_reason()))


def _rank(share: float, ended_s: float, totals: dict[str, int], wait: float | None) -> dict[str, Any]:
    rank: dict[str, Any] = {"role": "worker", "cpu_share": share, "starvation": 0.9, "totals": totals,
                            "records": [{"iteration": 0, "ended_s": ended_s / 2}, {"iteration": 1, "ended_s": ended_s}]}
    if wait is not None:
        rank["cpu_wait_share"] = wait
    return rank


def _sweep(folder: Path, runs: list[tuple[str, list[dict[str, Any]]]]) -> Path:
    (folder / "runs").mkdir(parents=True)
    for i, (config, ranks) in enumerate(runs):
        record = {"run_id": f"{i:03d}", "scenario": "tcp", "config": config, "status": "ok",
                  "jobs": {"1": {"ranks": {str(r): rank for r, rank in enumerate(ranks)}}}}
        (folder / "runs" / f"{i:03d}.json").write_text(json.dumps(record))
    (folder / "runs" / "999.json").write_text(json.dumps({"config": "dlcp", "status": "failed"}))
    return folder


def test_rank_cpu_is_cpu_seconds_over_packets_and_availability_its_share_of_runnable_time(tmp_path: Path) -> None:
    dlcp = {"packets": 900, "retransmitted": 100, "received_packets": 1000}
    folder = _sweep(tmp_path / "sweep", [
        # 0.5 of a core over 8 s = 4 CPU s over 2,000 packets: 2 ms; ran 0.5 of 0.5 + 0.3.
        ("dlcp", [_rank(0.5, 8.0, dlcp, 0.3), _rank(0.25, 8.0, dlcp, 0.25)]),  # 1 ms; 0.5
        ("dlcp", [_rank(0.75, 8.0, dlcp, 0.05)]),  # 3 ms; 0.9375
        # TCP: 1,448,000 bytes sent is 1,000 segments each way; 0.1 x 20 s = 2 CPU s: 1 ms.
        ("ddp-tcp", [_rank(0.1, 20.0, {"bytes": 1_448_000}, None)]),
    ])
    found = rank_cpu(folder)
    assert found["dlcp"].packet_s == pytest.approx(2e-3)  # median of 2, 1, 3 ms
    assert found["dlcp"].availability == pytest.approx(0.625)  # median of 0.625, 0.5, 0.9375
    assert found["dlcp"].ranks == 3
    assert found["ddp-tcp"].packet_s == pytest.approx(1e-3)
    assert found["ddp-tcp"].availability is None


def test_host_cpu_sources_and_what_they_refuse(tmp_path: Path) -> None:
    dlcp = {"packets": 1000, "retransmitted": 0, "received_packets": 1000}
    old = _sweep(tmp_path / "old", [("dlcp", [_rank(0.5, 8.0, dlcp, None)])])  # 2 ms, no wait recorded
    new = _sweep(tmp_path / "new", [("dlcp", [_rank(0.25, 8.0, dlcp, 0.25)])])  # 1 ms, availability 0.5
    assert not host_cpu("none", "dlcp", "dlcp", None).active
    run = host_cpu("run", "dlcp", "dlcp", new)
    assert (run.tx_packet_s, run.rx_packet_s, run.availability) == pytest.approx((1e-3, 1e-3, 0.5))
    assert run.wall_costs() == pytest.approx((2e-3, 2e-3, 0.0, 0.0))
    bench = host_cpu("bench", "dlcp", "dlcp", new)
    assert (bench.tx_packet_s, bench.rx_packet_s) == (BENCH_DLCP_TX_S, BENCH_DLCP_RX_S) == (2.4e-6, 2.53e-6)
    borrowed = host_cpu("run", "dlcp", "dlcp", old, availability_from=new)
    assert (borrowed.tx_packet_s, borrowed.availability) == pytest.approx((2e-3, 0.5))
    assert "availability from new" in borrowed.source
    with pytest.raises(PacketSimulationError, match="record no cpu_wait_share"):
        host_cpu("run", "dlcp", "dlcp", old)
    with pytest.raises(PacketSimulationError, match="no run of configuration 'p3-tcp'"):
        host_cpu("run", "p3-tcp", "tcp", new)
    with pytest.raises(PacketSimulationError, match="not one of"):
        host_cpu("perf", "dlcp", "dlcp", new)
    with pytest.raises(PacketSimulationError, match="availability in"):
        HostCpu(1e-6, 1e-6, availability=0.0)


def test_switch_schedule_from_the_runs_switch_cpu_and_wait(tmp_path: Path) -> None:
    folder = tmp_path / "sweep"
    (folder / "runs").mkdir(parents=True)
    switch = [  # per run: (cpu, wait) of the fabric's switches; gts2 idle (below 0.02 of a core)
        {"gtl1": (0.3, 0.2), "gtl2": (0.2, 0.2), "gts1": (0.1, 0.3), "gts2": (0.01, 0.0)},
        {"gtl1": (0.4, 0.1), "gtl2": (0.3, 0.3), "gts1": (0.2, 0.2), "gts2": (0.015, 0.1)},
    ]
    for i, figures in enumerate(switch):
        record = {"config": "dlcp", "status": "ok", "jobs": {}, "switch": {
            "switch_cpu": {k: v[0] for k, v in figures.items()}, "switch_cpu_wait": {k: v[1] for k, v in figures.items()}}}
        (folder / "runs" / f"{i:03d}.json").write_text(json.dumps(record))
    # Shares of runnable time: 0.6, 0.5, 0.25 and 0.8, 0.5, 0.5: median 0.5.
    assert switch_availability(folder) == {"dlcp": pytest.approx(0.5)}
    on, off, a = switch_schedule("dlcp", folder, off_s=1e-3)
    assert (on, off, a) == pytest.approx((1e-3, 1e-3, 0.5))
    assert SWITCH_OFF_S == 1.5e-3  # the kernel's slice on 2 cores: 0.75 ms x (1 + log2 2)
    with pytest.raises(PacketSimulationError, match="records its switches' CPU"):
        switch_schedule("ddp-tcp", folder)
    empty = _sweep(tmp_path / "old", [("ddp-tcp", [_rank(0.1, 1.0, {"bytes": 1448}, None)])])
    assert switch_schedule("dlcp", empty, 1e-3, availability_from=folder)[2] == pytest.approx(0.5)


def test_each_switch_takes_its_own_figures_from_the_fabric_run_of_the_same_repetition(tmp_path: Path) -> None:
    folder = tmp_path / "sweep"
    (folder / "runs").mkdir(parents=True)
    runs = [  # (repetition, per switch (cpu, wait)); written out of order, gts2 idle in repetition 0
        (1, {"gtl1": (0.2, 0.6), "gtl2": (0.5, 0.5), "gts1": (0.3, 0.1), "gts2": (0.4, 0.0)}),
        (0, {"gtl1": (0.3, 0.2), "gtl2": (0.2, 0.2), "gts1": (0.1, 0.3), "gts2": (0.01, 0.1)}),
    ]
    for i, (rep, figures) in enumerate(runs):
        record = {"config": "dlcp", "status": "ok", "repetition": rep, "jobs": {}, "switch": {
            "switch_cpu": {k: v[0] for k, v in figures.items()}, "switch_cpu_wait": {k: v[1] for k, v in figures.items()}}}
        (folder / "runs" / f"{i:03d}.json").write_text(json.dumps(record))
    names = ["l1", "l2", "s1", "s2"]
    # Repetition 0: l1 0.3 / 0.5 = 0.6 -> on 1 ms x 0.6 / 0.4 = 1.5 ms; l2 0.5 -> 1 ms; s1 0.25
    # -> 1/3 ms; s2 carried nothing (0.01 of a core): always on.
    got = switch_run_schedules("dlcp", folder, 0, names, off_s=1e-3)
    assert got == {"l1": pytest.approx((1.5e-3, 1e-3, 0.6)), "l2": pytest.approx((1e-3, 1e-3, 0.5)),
                   "s1": pytest.approx((1e-3 / 3, 1e-3, 0.25)), "s2": (0.0, 0.0, 1.0)}
    # Repetition 1 (and 3: modulo the two runs): l1 0.25, l2 0.5, s1 0.75 -> 3 ms, s2 never
    # waited: availability 1, on capped at 0.99 / 0.01 of the off time.
    for rep in (1, 3):
        got = switch_run_schedules("dlcp", folder, rep, names, off_s=1e-3)
        assert got == {"l1": pytest.approx((1e-3 / 3, 1e-3, 0.25)), "l2": pytest.approx((1e-3, 1e-3, 0.5)),
                       "s1": pytest.approx((3e-3, 1e-3, 0.75)), "s2": pytest.approx((99e-3, 1e-3, 1.0))}
    assert switch_run_schedules("dlcp", folder, 0, ["s3"], off_s=1e-3) == {"s3": (0.0, 0.0, 1.0)}
    with pytest.raises(PacketSimulationError, match="configuration 'p3-tcp'"):
        switch_run_schedules("p3-tcp", folder, 0, names)
    with pytest.raises(PacketSimulationError, match="matches"):
        switch_run_schedules("dlcp", folder, 0, ["1"])


def test_a_parameter_servers_cpu_is_over_every_packet_it_handles(tmp_path: Path) -> None:
    dlcp = {"packets": 900, "retransmitted": 100, "received_packets": 1000}
    server = {"role": "server", "cpu_share": 0.5, "cpu_wait_share": 0.5, "totals": {}}
    folder = _sweep(tmp_path / "sweep", [("dlcp", [server, _rank(0.2, 8.0, dlcp, 0.2), _rank(0.2, 6.0, dlcp, 0.2)])])
    # 0.5 of a core over the longest worker's 8 s = 4 CPU s over the workers' 4,000 packets: 1 ms.
    cpu = server_cpu(folder, "dlcp")
    assert cpu is not None and (cpu.tx_packet_s, cpu.rx_packet_s, cpu.availability) == pytest.approx((1e-3, 1e-3, 0.5))
    assert server_cpu(folder, "ddp-tcp") is None
    assert rank_cpu(folder)["dlcp"].ranks == 2  # the server is no rank of its own


def test_linux_tcp_buffers_are_the_sysctls_maxima(tmp_path: Path) -> None:
    (tmp_path / "tcp_wmem").write_text("4096\t16384\t4194304\n")
    (tmp_path / "tcp_rmem").write_text("4096 131072 6291456\n")
    assert linux_tcp_buffers(tmp_path) == (4_194_304, 6_291_456)
    (tmp_path / "tcp_rmem").write_text("4096\n")
    with pytest.raises(PacketSimulationError, match="tcp_rmem"):
        linux_tcp_buffers(tmp_path)


@pytest.fixture(scope="module")
def ns3():  # type: ignore[no-untyped-def]
    from simulator.packet.runtime import load

    return load()


def _dlcp_message(ns3, cpu: HostCpu) -> list[int]:  # type: ignore[no-untyped-def]
    """One 720-value (two-packet) DLCP message h1 -> h2 queued at t = 0; its completion at h2 (ns)."""
    from simulator.packet.network import build
    from tests.sim_packet_helpers import dlcp_completions

    net = build(tiny(1e9, 1e8, 1e-6, Port(rate_bps=1e8, queue_packets=32)), host_cpu=cpu)
    return [round(t * 1e9) for t in dlcp_completions(ns3, net, 1, 0.05)]


@needs_ns3
def test_dlcp_packets_wait_for_the_sending_and_receiving_cpu(ns3) -> None:  # type: ignore[no-untyped-def]
    # No cost: data 0 reaches h2 at 12.016 + 1 + 120.16 + 1 = 134.176 us, data 1 at 254.336
    # (behind it at the port) and completes the message: every packet is in (the probe behind
    # it, at 259.296 us, finds it complete).
    assert _dlcp_message(ns3, HostCpu()) == [254_336]
    # 0.5 / 1 ms of CPU per packet sent / received at availability 0.5: 1 / 2 ms of wall. The
    # data leave h1 at 1 and 2 ms, the probe (no cost) behind the second; h2 takes data 0 in at
    # 1.134176 + 2 = 3.134176 ms, data 1 (arrived at 2.134176) at 5.134176 ms: complete then.
    costs = HostCpu(0.5e-3, 1e-3, availability=0.5)
    assert _dlcp_message(ns3, costs) == [pytest.approx(5_134_176, abs=2)]
    # A receiver's CPU per message: 0.25 ms more (0.5 ms of wall) after the message's last work.
    costs = HostCpu(0.5e-3, 1e-3, rx_message_s=0.25e-3, availability=0.5)
    assert _dlcp_message(ns3, costs) == [pytest.approx(5_634_176, abs=2)]


def _one_bucket(numel: int) -> Any:
    from simulator.packet.workload import Bucket, Workload

    return Workload("one", (Bucket(0, numel, 0.002, 7),), forward_s=0.001, backward_s=0.002)


@needs_ns3
@pytest.mark.slow
def test_ring_of_two_steps_take_the_hand_computed_cpu_per_packet() -> None:
    from simulator.packet import scenarios as sim
    from simulator.packet.run import RunSettings, run

    # tests/test_sim_packet_jobs.py's ring of two (100 Mbit/s links, one 782-byte data packet
    # and its 62-byte probe per step: the data is in at 127.12 us, the probe at 132.08 us),
    # with 100 / 200 us of CPU per packet sent / received at availability 0.5 (200 / 400 us of
    # wall). A step: the data leaves after 200 us and, taken in 400 us after it arrived,
    # completes it (every packet in): 200 + 127.12 + 400 = 727.12 us. Iteration: 3 ms of
    # compute and two steps.
    topo = tiny(1e8, 1e8, 1e-6, Port(rate_bps=1e8))
    scenario = sim.Scenario("pair", "ring h1-h2", (sim.Job(1, ("h1", "h2")),))
    settings = RunSettings(_one_bucket(360), iterations=3, host_cpu=HostCpu(100e-6, 200e-6, availability=0.5))
    record = run(topo, scenario, sim.configuration("qos"), settings)
    for rank in ("0", "1"):
        records = record["jobs"]["1"]["ranks"][rank]["records"]
        assert [round(r["iteration_s"] * 1e9) for r in records] == [pytest.approx(3_000_000 + 2 * 727_120, abs=3)] * 3
    cpu = record["simulation"]["host_cpu"]
    # Six data packets sent and six received per host, two hosts.
    assert (cpu["tx_busy_s"], cpu["rx_busy_s"]) == pytest.approx((12 * 200e-6, 12 * 400e-6))
    assert cpu["availability"] == 0.5 and cpu["tx_packet_s"] == 100e-6


@needs_ns3
@pytest.mark.slow
def test_tcp_ring_steps_wait_for_each_segments_cpu() -> None:
    from simulator.packet import scenarios as sim
    from simulator.packet.run import RunSettings, run

    # Ring of two over ns-3's TCP, steps of 1,800 values (7,200 bytes: 4.97 segments of 1,448).
    # 1 ms of CPU per segment sent (a write of 5 segments, charged 5 ms before it goes) and
    # 2 ms per 1,448 bytes read (9.945 ms for the step, charged as the bytes come in): a step
    # takes at least 5 + 9.945 ms, and at most that plus its time on the wire and in TCP
    # (7,200 bytes at 100 Mbit/s is 0.58 ms; under 2 ms with slow start's round trips).
    topo = tiny(1e8, 1e8, 1e-6, Port(rate_bps=1e8))
    scenario = sim.Scenario("pair", "ring h1-h2", (sim.Job(1, ("h1", "h2")),))
    settings = RunSettings(_one_bucket(3600), iterations=3, host_cpu=HostCpu(1e-3, 2e-3))
    record = run(topo, scenario, sim.configuration("gloo"), settings)
    step = 5e-3 + 7200 / 1448 * 2e-3
    times = [r["iteration_s"] for r in record["jobs"]["1"]["ranks"]["0"]["records"]]
    assert len(times) == 3 and all(0.003 + 2 * step - 1e-6 <= t <= 0.003 + 2 * (step + 0.002) for t in times)
    cpu = record["simulation"]["host_cpu"]
    # Per host: 3 iterations x 2 steps of 5 segments written and 7,200 bytes read.
    assert (cpu["tx_busy_s"], cpu["rx_busy_s"]) == pytest.approx((2 * 6 * 5e-3, 2 * 6 * 7200 / 1448 * 2e-3))


def test_each_switch_is_off_for_its_runs_recorded_mean_wait_per_timeslice(tmp_path: Path) -> None:
    folder = tmp_path / "sweep"
    (folder / "runs").mkdir(parents=True)
    figures = {"gtl1": (0.3, 0.2), "gtl2": (0.2, 0.2), "gts1": (0.1, 0.3), "gts2": (0.4, 0.1)}
    # mean wait per timeslice of each switch's busiest thread; gtl2's busiest thread did not run
    # (None), gts2's never waited (0): both keep the given off time
    slices = {"gtl1": 600_000, "gtl2": None, "gts1": 250_000, "gts2": 0}
    record = {"config": "dlcp", "status": "ok", "repetition": 0, "jobs": {}, "switch": {
        "switch_cpu": {k: v[0] for k, v in figures.items()}, "switch_cpu_wait": {k: v[1] for k, v in figures.items()},
        "switch_wait_per_slice_ns": slices}}
    (folder / "runs" / "000.json").write_text(json.dumps(record))
    names = ["l1", "l2", "s1", "s2"]
    # l1: availability 0.3 / 0.5 = 0.6, off 600 us -> on 600 x 0.6 / 0.4 = 900 us; l2: 0.5, the
    # given 1 ms off and 1 ms on; s1: 0.25, off 250 us -> on 250 / 3 = 83.3 us; s2: 0.8, 1 ms off,
    # on 4 ms.
    got = switch_run_schedules("dlcp", folder, 0, names, off_s=1e-3, recorded_off=True)
    assert got == {"l1": pytest.approx((900e-6, 600e-6, 0.6)), "l2": pytest.approx((1e-3, 1e-3, 0.5)),
                   "s1": pytest.approx((250e-6 / 3, 250e-6, 0.25)), "s2": pytest.approx((4e-3, 1e-3, 0.8))}
    # by default (no --switch-off-recorded) the given off time holds for every switch
    fixed = switch_run_schedules("dlcp", folder, 0, names, off_s=1e-3)
    assert fixed["l1"] == pytest.approx((1.5e-3, 1e-3, 0.6)) and fixed["s1"] == pytest.approx((1e-3 / 3, 1e-3, 0.25))


def test_with_wall_a_switch_is_off_its_recorded_wait_share_of_the_wall(tmp_path: Path) -> None:
    folder = tmp_path / "sweep"
    (folder / "runs").mkdir(parents=True)
    figures = {"gtl1": (0.3, 0.2), "gtl2": (0.1, 0.4), "gts1": (0.01, 0.5)}
    record = {"config": "dlcp", "status": "ok", "repetition": 0, "jobs": {}, "switch": {
        "switch_cpu": {k: v[0] for k, v in figures.items()}, "switch_cpu_wait": {k: v[1] for k, v in figures.items()}}}
    (folder / "runs" / "000.json").write_text(json.dumps(record))
    # l1 waited 0.2 of the wall: on 0.8, off 1 ms -> on 4 ms (of its runnable time: 0.6 -> 1.5 ms);
    # l2 waited 0.4: 0.6 -> 1.5 ms (runnable: 0.2 -> 0.25 ms); s1 carried nothing: always on.
    got = switch_run_schedules("dlcp", folder, 0, ["l1", "l2", "s1"], off_s=1e-3, wall=True)
    assert got == {"l1": pytest.approx((4e-3, 1e-3, 0.8)), "l2": pytest.approx((1.5e-3, 1e-3, 0.6)),
                   "s1": (0.0, 0.0, 1.0)}
    runnable = switch_run_schedules("dlcp", folder, 0, ["l1", "l2"], off_s=1e-3)
    assert runnable == {"l1": pytest.approx((1.5e-3, 1e-3, 0.6)), "l2": pytest.approx((0.25e-3, 1e-3, 0.2))}


def test_each_switch_reads_its_own_scenarios_run_when_a_sweep_holds_several(tmp_path: Path) -> None:
    folder = tmp_path / "sweep"
    (folder / "runs").mkdir(parents=True)
    # one dlcp run per scenario, repetition 0 each: tcp's sorts first by run id
    for i, (scenario, cpu, wait, per_slice) in enumerate([("tcp", 0.2, 0.6, 100_000), ("lossy-0.1", 0.3, 0.1, 80_000)]):
        record = {"config": "dlcp", "scenario": scenario, "status": "ok", "repetition": 0, "run_id": f"{i:03d}",
                  "jobs": {}, "switch": {"switch_cpu": {"gtl1": cpu}, "switch_cpu_wait": {"gtl1": wait},
                                         "switch_wait_per_slice_ns": {"gtl1": per_slice}}}
        (folder / "runs" / f"{i:03d}.json").write_text(json.dumps(record))
    # lossy-0.1: availability 0.75, off 80 us -> on 240 us; tcp: 0.25, off 100 us -> on 33.3 us
    assert switch_run_schedules("dlcp", folder, 0, ["l1"], scenario="lossy-0.1", recorded_off=True) == {
        "l1": pytest.approx((240e-6, 80e-6, 0.75))}
    assert switch_run_schedules("dlcp", folder, 0, ["l1"], scenario="tcp", recorded_off=True) == {"l1": pytest.approx((100e-6 / 3, 100e-6, 0.25))}
    with pytest.raises(PacketSimulationError, match="in scenario 'incast'"):
        switch_run_schedules("dlcp", folder, 0, ["l1"], scenario="incast")
