"""Background traffic: iperf3 UDP and TCP flows between namespace hosts, all stopped after."""

from __future__ import annotations

import subprocess

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
        assert len(_iperf3_in(a.ns)) == 4  # two servers, two clients
        udp, tcp = traffic.wait(timeout=15)
    udp_rx = udp["end"]["sum"]
    assert udp_rx["bytes"] > 0.5 * 2e6 / 8  # about a second at 2 Mbit/s
    assert udp["start"]["test_start"]["protocol"] == "UDP" and udp["start"]["test_start"]["blksize"] == 200
    assert tcp["end"]["sum_received"]["bytes"] > 0 and tcp["start"]["test_start"]["protocol"] == "TCP"
    assert _iperf3_in(a.ns) == []


def test_a_flow_with_an_unknown_protocol_is_refused() -> None:
    from experiments.errors import ExperimentError

    with pytest.raises(ExperimentError, match="protocol must be udp or tcp"):
        BackgroundTraffic(NamespaceHosts({}), [Flow("a", "b", "sctp")])
