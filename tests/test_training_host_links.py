"""Host links without a second bottleneck (issue 28): the hosts' own qdisc must not drop
what the switches should queue.

Unit level: the token bucket of every link holds a host's transmit queue (1,000 frames),
not Mininet's ten. On the fabric (root, network namespaces): iperf3 through the training
fabric's leaf-spine, from a host on one leaf into a host on the other, drives a switch
port (20,000 packets/s, about 240 Mbit/s) past its queue; the switches' traffic managers
must drop and the sending host's qdisc must drop at most 1% of what they dropped.
"""

from __future__ import annotations

import json
import shutil
import time
import uuid
from pathlib import Path

import pytest

from mininet_topos.builder import LINK_QUEUE_PACKETS, qdisc_drops, tbf_latency_ms, tc_params
from mininet_topos.spec import LinkParams
from tests import netns

ROOT = Path(__file__).resolve().parent.parent
TOPOLOGY = ROOT / "experiments" / "topologies" / "leafspine_training.yaml"


def test_tbf_queue_holds_a_host_transmit_queue() -> None:
    opts = tc_params(LinkParams(bw_mbps=1000.0), netem=False)
    assert opts["use_tbf"] is True and opts["bw"] == 1000.0
    # 1,000 frames of 1,514 bytes at 1 Gbit/s wait 12.112 ms in the bucket's queue.
    assert opts["latency_ms"] == pytest.approx(12.112)
    assert tbf_latency_ms(100.0, 10) == pytest.approx(1.2112)
    assert LINK_QUEUE_PACKETS >= 1000


def test_qdisc_drops_sums_every_qdisc() -> None:
    text = ("qdisc tbf 5: root refcnt 2 rate 1Gbit burst 15000b lat 12.1ms\n"
            " Sent 7104 bytes 96 pkt (dropped 17, overlimits 0 requeues 0)\n"
            " backlog 0b 0p requeues 0\n"
            "qdisc netem 10: parent 5:1 limit 1000 loss 1%\n"
            " Sent 7104 bytes 96 pkt (dropped 3, overlimits 0 requeues 0)\n")
    assert qdisc_drops(text) == 20
    assert qdisc_drops("qdisc noqueue 0: root refcnt 2\n") == 0


def _switch_queue_drops(description: Path) -> int:
    from controller.counters import queue_drops

    data = json.loads(description.read_text())
    total = 0
    for sw in data["switches"]:
        drops = queue_drops(sw["grpc_addr"], timeout=10.0)
        assert drops is not None, f"switch {sw['name']} reports no queue drops (embedded target expected)"
        total += sum(drops.values())
    return total


@pytest.mark.netns
@pytest.mark.slow
def test_iperf3_congests_the_switch_not_the_host(tmp_path: Path) -> None:
    if not netns.is_root():
        pytest.skip("needs root (Mininet fabric)")
    if shutil.which("iperf3") is None:
        pytest.skip("iperf3 is not installed")
    from mininet_topos.builder import host_link_drops
    from mininet_topos.launcher import Fabric, LaunchOptions
    from mininet_topos.programming import program_fabric

    prefix = f"q{uuid.uuid4().hex[:3]}"
    options = LaunchOptions(topo=TOPOLOGY, workdir=tmp_path, prefix=prefix, policy=None)
    with Fabric(options) as fabric:
        program_fabric(fabric.description_path, None)
        server, client = fabric.node("h4"), fabric.node("h2")
        before_host = host_link_drops(fabric)
        before_switch = _switch_queue_drops(fabric.description_path)
        srv = server.popen(["iperf3", "-s", "-1", "-p", "5301"])
        try:
            time.sleep(1.0)
            out = client.cmd(f"iperf3 -c {server.IP()} -p 5301 -t 4 -J")
        finally:
            if srv.poll() is None:
                srv.kill()
            srv.wait(10)
        report = json.loads(out[out.index("{"):])
        assert "error" not in report, report.get("error")
        host = sum(host_link_drops(fabric).values()) - sum(before_host.values())
        switch = _switch_queue_drops(fabric.description_path) - before_switch
        retransmits = report["end"]["sum_sent"]["retransmits"]
    print(f"iperf3: {report['end']['sum_received']['bits_per_second'] / 1e6:.0f} Mbit/s, "
          f"{retransmits} retransmits; switch queue drops {switch}, host qdisc drops {host}")
    assert switch > 0, "the switch's port was never congested: the test shows nothing"
    assert host <= 0.01 * switch, f"hosts dropped {host} packets in their qdisc against the switches' {switch}"
