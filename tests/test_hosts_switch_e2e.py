"""A DLCP message through one switch running ``p4src/dlcp.p4`` on a congested port, on the
embedded target and on BMv2 (``simple_switch_grpc`` with p4c's build, marked ``bmv2``).

Three namespace hosts on one switch: a sender, a background UDP blaster and a receiver whose
port is rate-limited (``--queue-rate``, ``--queue-depth``, BMv2's meaning: each priority queue
has its own rate and ``enq_qdepth`` is the depth of the packet's own queue). The controller
library installs routes and a policy (job 1 in queue 3, drop-eligible packets below magnitude
class 118 are dropped in ingress when that queue holds 8 packets or more; ECN marks from 16,
so the eligible packets go before the sender is told to slow down). Queue 3 drains slower than
the job sends, so the job congests its own queue while the blast fills queue 0 beside it; the
message completes within its loss bound without retransmission; only the
drop-eligible, small-magnitude packets are lost, exactly as many as the switch's
``ingress_drops[6]`` counted; important packets arrive ECN-marked and the sender's echo cuts
its congestion window.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from controller.counters import gather
from controller.fabric_controller import FabricController
from controller.pipeline import Pipeline
from controller.policy import POLICY_TABLES, parse_policy, policy_entries
from controller.routing import ROUTE_TABLES, route_entries
from gradfabric import fabric as fabric_mod
from gradfabric.p4build import Artifacts, compile_embedded, compile_p4c
from gradfabric.paths import ROOT
from tests import netns
from tests.test_switch_process import switch_process

pytestmark = pytest.mark.netns

COUNT = 361
PACKETS = 200
ELEMENTS = COUNT * PACKETS
BOUND = 0.05  # 10 packets of 200 may be marked drop-eligible
SMALL_EVERY = 20  # every 20th packet holds tiny gradients (magnitude class ~111)
MAG_THRESHOLD = 118
QUEUE_THRESHOLD = 8   # early drop of the drop-eligible class
ECN_THRESHOLD = 16    # ECN marks for the rest, deeper
PORT_RATE_PPS = 1000
JOB_QUEUE_RATE_PPS = 300  # queue 3: below the sender's starting rate
SENDER_PPS = 400
BLAST_PPS = 1500  # keeps queue 0 of the receiver's port full
HOSTS = {"sender": (1, "10.0.1.1"), "blaster": (2, "10.0.2.1"), "receiver": (3, "10.0.3.1")}

POLICY = {
    "version": 1,
    "default_priority": 0,
    "jobs": [{
        "id": 1, "name": "e2e", "spraying": "off",
        "layers": [{"tensors": "0..65535", "priority": 3}],
        "dropping": {"classes": [{"mag_class": f"0..{MAG_THRESHOLD - 1}", "queue_threshold": QUEUE_THRESHOLD}]},
        "ecn": {"queue_threshold": ECN_THRESHOLD},
    }],
}

RECEIVER = """
import json, sys
from hosts.endpoint import Endpoint
from hosts.wire import MsgType
bounds = {MsgType.GRADIENT: float(sys.argv[2]), MsgType.PARAMETER: 0.002}
# The switch parses DLCP on destination port 19600 only.
with Endpoint(worker_id=2, host=sys.argv[1], port=19600, bounds=bounds, count=int(sys.argv[3])) as ep:
    print("port", ep.address[1], flush=True)
    got = [ep.receive(timeout=30) for _ in range(int(sys.argv[4]))]
    lost = [int(i) for m in got for i in __import__("numpy").flatnonzero(m.values == 0)]
    print("result", json.dumps({"received": [m.received for m in got], "zero_positions": lost,
                                "ce_marked": ep.reassembler.stats.ce_marked,
                                "echoes": ep.reassembler.stats.ecn_echoes}), flush=True)
"""

BLASTER = """
import socket, sys, time
dest, pps, seconds = (sys.argv[1], 9), float(sys.argv[2]), float(sys.argv[3])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
payload, sent, start = b"x" * 200, 0, time.perf_counter()
print("blasting", flush=True)
while (now := time.perf_counter()) - start < seconds:
    while sent < (now - start) * pps:
        s.sendto(payload, dest)
        sent += 1
    time.sleep(0.001)
print("sent", sent, flush=True)
"""

SENDER = """
import json, sys
import numpy as np
from hosts.endpoint import Endpoint
from hosts.pacing import Aimd
from hosts.wire import MsgType
dest = (sys.argv[1], int(sys.argv[2]))
bound, count, messages, pps = float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), float(sys.argv[6])
values = np.load(sys.argv[7])
aimd = Aimd(rate=pps)  # the pacing ceiling
with Endpoint(worker_id=1, host=sys.argv[8], bounds={MsgType.GRADIENT: bound, MsgType.PARAMETER: 0.002},
              count=count, aimd=aimd) as ep:
    reports = []
    cuts = [ep.window.decreases]
    for i in range(messages):
        r = ep.send(dest, values, iteration=i)
        cuts.append(ep.window.decreases)
        reports.append({"missing": r.missing, "retransmitted": r.retransmitted, "rounds": r.rounds,
                        "eligible": r.eligible, "echoes": r.ecn_echoes, "seconds": r.seconds})
print("result", json.dumps({"reports": reports, "cuts": cuts}), flush=True)
"""


def gradients(seed: int = 0) -> np.ndarray:
    """Values of magnitude ~1 (class ~128), and every 20th packet ~1e-5 (class ~111)."""
    values = np.random.default_rng(seed).uniform(0.5, 1.0, ELEMENTS).astype(np.float32)
    for p in range(0, PACKETS, SMALL_EVERY):
        values[p * COUNT:(p + 1) * COUNT] *= np.float32(1e-5)
    return values


@dataclass
class Bed:
    hosts: dict[str, netns.Host]
    fabric: fabric_mod.Fabric
    pipeline: Pipeline


def _build(hosts: dict[str, netns.Host], ports: dict[str, str], out: Artifacts, grpc_addr: str) -> Bed:
    """The one-switch fabric description, its compiled program, and host routes via the switch."""
    hosts_desc, links, switch_ports = [], [], []
    for name, (port, ip) in HOSTS.items():
        host = hosts[name]
        hosts_desc.append({"name": name, "ip": ip, "prefix_len": 24, "mac": host.mac, "switch": "s1",
                           "switch_port": port, "gateway_mac": fabric_mod.switch_port_mac(1, port)})
        switch_ports.append({"port": port, "iface": ports[name], "peer": name, "peer_port": 0})
        links.append({"a": "s1", "a_port": port, "b": name, "b_port": 0})
    fabric = fabric_mod.from_dict({
        "name": "hosts-e2e", "target": "embedded",
        "program": {"source": "p4src/dlcp.p4", "p4info": str(out.p4info), "device_config": str(out.device_config)},
        "switches": [{"name": "s1", "device_id": 1, "grpc_addr": grpc_addr, "cpu_port": 510,
                      "ports": switch_ports}],
        "hosts": hosts_desc, "links": links})
    netns.route_through_gateways(hosts, hosts_desc, "10.0.0.0/16")
    return Bed(hosts, fabric, Pipeline.load(out.p4info, out.device_config))


def _run(host: netns.Host, script: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(["ip", "netns", "exec", host.ns, sys.executable, "-c", script, *args],
                            cwd=str(ROOT), text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def _line(proc: subprocess.Popen[str], prefix: str, timeout: float = 30) -> str:
    assert proc.stdout is not None
    said = []
    for line in proc.stdout:
        if line.startswith(prefix):
            return line[len(prefix):].strip()
        said.append(line)
    raise AssertionError(f"no {prefix!r} line (exit {proc.wait(timeout)}):\n{''.join(said)}")


@contextmanager
def embedded_switch(ports: dict[str, str], tmp: Path) -> Iterator[tuple[str, Artifacts]]:
    """``p4switch run`` with the receiver's port (3) limited as BMv2's CLI would limit it."""
    args = ["--no-p4", "--device-id", "1", "--cpu-port", "510", "--priority-queues", "8",
            "--log-level", "warn", "--queue-rate", f"3={PORT_RATE_PPS}pps",
            "--queue-rate", f"3:3={JOB_QUEUE_RATE_PPS}pps", "--queue-depth", "3=64"]
    for name, (port, _) in HOSTS.items():
        args += ["-i", f"{port}@{ports[name]}"]
    with switch_process(args, tmp / "s1.log") as (_, address):
        yield address, compile_embedded(ROOT / "p4src" / "dlcp.p4", tmp / "build")


@contextmanager
def bmv2_switch(ports: dict[str, str], tmp: Path) -> Iterator[tuple[str, Artifacts]]:
    """``simple_switch_grpc`` as the launcher starts it; the same queue settings via its CLI."""
    from controller.bmv2_queues import QueueSetting, apply_queue_settings
    from gradfabric.p4ref import require_tool
    from mininet_topos.switches import SwitchConfig, SwitchProcess, bmv2_command

    out = compile_p4c(ROOT / "p4src" / "dlcp.p4", tmp / "build" / "bmv2", str(require_tool("p4c")))
    cfg = SwitchConfig(name="s1", device_id=1, grpc_port=netns.free_port(), log_file=tmp / "s1.txt",
                       p4runtime_log=tmp / "s1-p4runtime.log", log_level="warn", thrift_port=netns.free_port(),
                       ports=tuple(sorted((port, ports[name]) for name, (port, _) in HOSTS.items())))
    proc = SwitchProcess(cfg, bmv2_command(cfg))
    proc.start()
    try:
        proc.wait_ready(time.monotonic() + 60)
        apply_queue_settings(cfg.thrift_port, [
            QueueSetting(port=3, rate_pps=PORT_RATE_PPS, depth_packets=64),
            QueueSetting(port=3, rate_pps=JOB_QUEUE_RATE_PPS, priority=3)])
        yield cfg.grpc_addr, out
    finally:
        proc.stop()


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    try:
        yield started
    finally:
        for proc in started:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            if proc.stdout:
                proc.stdout.close()


@pytest.mark.parametrize("target", ["embedded", pytest.param("bmv2", marks=pytest.mark.bmv2)])
def test_congested_port_drops_only_eligible_packets_and_marks_the_rest(
        tmp_path: Path, procs: list[subprocess.Popen[str]], target: str) -> None:
    values = gradients()
    np.save(tmp_path / "values.npy", values)
    start = bmv2_switch if target == "bmv2" else embedded_switch
    with netns.lab() as lab:
        lab_hosts, ports = {}, {}
        for name, (port, ip) in HOSTS.items():
            lab_hosts[name], ports[name] = lab.add_host(port, ip)
        with start(ports, tmp_path) as (address, artifacts):
            bed = _build(lab_hosts, ports, artifacts, address)
            with FabricController.for_fabric(bed.fabric, bed.pipeline, request_logs=False) as controller:
                controller.apply(route_entries(bed.fabric, bed.pipeline.schema), ROUTE_TABLES)
                entries = policy_entries(parse_policy(POLICY), bed.pipeline.schema)
                controller.apply({"s1": entries}, POLICY_TABLES)
                session = controller["s1"]
                before = gather(session, [1, 2, 3], jobs=[1])

                receiver_ip, sender_ip = HOSTS["receiver"][1], HOSTS["sender"][1]
                receiver = _run(bed.hosts["receiver"], RECEIVER, receiver_ip, str(BOUND), str(COUNT), "2")
                procs.append(receiver)
                port = _line(receiver, "port ")
                blaster = _run(bed.hosts["blaster"], BLASTER, receiver_ip, str(BLAST_PPS), "60")
                procs.append(blaster)
                _line(blaster, "blasting")
                sender = _run(bed.hosts["sender"], SENDER, receiver_ip, port, str(BOUND), str(COUNT), "2",
                              str(SENDER_PPS), str(tmp_path / "values.npy"), sender_ip)
                procs.append(sender)
                sent = json.loads(_line(sender, "result "))
                got = json.loads(_line(receiver, "result "))
                after = gather(session, [1, 2, 3], jobs=[1])
                blaster.kill()  # it blasts until stopped, however slowly the others start
    counted = after.minus(before)
    magnitude_drops = counted.drops.get("magnitude_threshold", (0, 0))[0]
    marks = counted.ecn_marks.get(1, (0, 0))[0]
    missing_packets = sum(ELEMENTS - r for r in got["received"])
    assert missing_packets % COUNT == 0
    missing_packets //= COUNT

    # Congestion happened and the switch shed only drop-eligible packets: as many as the
    # receiver lacks, all of them from the tiny-gradient packets.
    assert magnitude_drops > 0, (sent, got, counted)
    assert magnitude_drops == missing_packets, (sent, got, counted)
    small = {p for p in range(0, PACKETS, SMALL_EVERY)}
    assert {i // COUNT for i in got["zero_positions"]} <= small
    # Within the bound: no retransmission; each message lost at most its eligible packets.
    for report in sent["reports"]:
        assert report["retransmitted"] == 0 and report["rounds"] == 0, (sent, counted)
        assert report["eligible"] == len(small)
        assert report["missing"] <= BOUND * ELEMENTS
    # Important packets were ECN-marked, the receiver echoed it and the sender slowed down.
    assert marks > 0 and 0 < got["ce_marked"] <= marks
    assert got["echoes"] >= 1 and any(r["echoes"] for r in sent["reports"])
    assert sent["cuts"][-1] > sent["cuts"][0]  # the echoes cut the congestion window
