"""Background traffic: iperf3 UDP and TCP flows between namespace hosts, all stopped after."""

from __future__ import annotations

import subprocess
import time

import pytest

from experiments.background import BackgroundTraffic, Flow, NamespaceHosts


def _iperf3_in(ns: str) -> list[str]:
    out = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()
    names = []
    for pid in out:
        try:
            with open(f"/proc/{pid}/comm") as f:
                names.append(f.read().strip())
        except OSError:
            continue
    return [n for n in names if n == "iperf3"]


@pytest.mark.netns
def test_udp_and_tcp_flows_carry_traffic_and_stop(lab) -> None:  # noqa: ANN001
    a, _ = lab.add_host(1, "10.231.0.1")
    # Both ends in one namespace: the flows cross its own stack only.
    hosts = NamespaceHosts({"a": (a.ns, a.ip), "b": (a.ns, a.ip)})
    flows = [Flow("a", "b", "udp", mbps=2.0, packet_bytes=200), Flow("b", "a", "tcp")]
    traffic = BackgroundTraffic(hosts, flows, seconds=1.0)
    with traffic:
        deadline = time.monotonic() + 5
        while len(_iperf3_in(a.ns)) < 4 and time.monotonic() < deadline:
            time.sleep(0.05)  # `ip netns exec` has not exec'd iperf3 yet
        assert len(_iperf3_in(a.ns)) == 4  # two servers, two clients
        udp, tcp = traffic.wait(timeout=15)
    udp_rx = udp["end"]["sum"]
    assert udp_rx["bytes"] > 0.5 * 2e6 / 8  # about a second at 2 Mbit/s
    assert udp["start"]["test_start"]["protocol"] == "UDP" and udp["start"]["test_start"]["blksize"] == 200
    assert tcp["end"]["sum_received"]["bytes"] > 0 and tcp["start"]["test_start"]["protocol"] == "TCP"
    assert _iperf3_in(a.ns) == []


def test_a_flow_with_an_unknown_protocol_is_refused() -> None:
    from experiments.errors import ExperimentError

    with pytest.raises(ExperimentError, match="protocol must be one of udp, tcp, rr"):
        BackgroundTraffic(NamespaceHosts({}), [Flow("a", "b", "sctp")])


@pytest.mark.netns
def test_a_job_runs_between_mininet_hosts_beside_background_traffic(tmp_path) -> None:  # noqa: ANN001
    """The experiment's placement on a fabric of Linux bridges (plumbing only, no P4):
    roles started with host.popen on the DLCP port, background traffic from another host."""
    import uuid

    from experiments.sites import FabricSite
    from experiments.training.loop import TrainConfig
    from experiments.training.options import TransportOptions
    from experiments.training.processes import Placement, run_job
    from hosts.wire import DLCP_PORT
    from mininet_topos.launcher import Fabric, LaunchOptions

    prefix = f"gtr{uuid.uuid4().hex[:2]}"
    options = LaunchOptions(topo="dumbbell", workdir=tmp_path, prefix=prefix, switch_kind="bridge")
    config = TrainConfig(iterations=10, eval_every=5)
    with Fabric(options) as fabric:
        hosts = FabricSite(fabric)
        placement = Placement(ps=(hosts.spawner("h1"), hosts.ip("h1")), workers=[(hosts.spawner("h2"), hosts.ip("h2"))],
                              ps_port=DLCP_PORT, worker_port=DLCP_PORT)
        # Bridges forward within a subnet only: the job and the traffic stay behind s1.
        traffic = BackgroundTraffic(hosts, [Flow("h2", "h1", "udp", mbps=1.0, packet_bytes=256)])
        try:
            outcome = run_job(config, TransportOptions(timeout_s=20.0), placement, tmp_path / "logs",
                              on_ready=traffic.start)
            background_running = all(p.poll() is None for p in traffic.clients)
        finally:
            traffic.stop()
    assert background_running
    records = outcome.records[0]
    assert [r["iteration"] for r in records] == list(range(10))
    assert records[-1]["accuracy"] is not None and all(r["packets"] > 0 for r in records)
    assert outcome.server["server"]["iterations"] == 10
    assert outcome.server["receive"]["data_packets"] >= sum(r["packets"] for r in records)
