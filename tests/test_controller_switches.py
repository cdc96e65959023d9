"""The controller against real embedded switches (`p4switch run`) on a 2x2 leaf-spine.

Four switch processes on veth ports, four hosts in namespaces. Routes must give every
host pair a path (ping), applying a policy twice must write nothing the second time, and
a killed and restarted switch must get its pipeline and entries back.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from controller.counters import gather
from controller.fabric_controller import FabricController
from controller.pipeline import Pipeline
from controller.policy import POLICY_TABLES, load_policy, policy_entries
from controller.routing import ROUTE_TABLES, route_entries
from gradfabric.command import cli
from gradfabric import fabric as fabric_mod
from gradfabric.fabric import Fabric
from gradfabric.p4build import compile_embedded
from gradfabric.paths import ROOT
from tests import netns

pytestmark = pytest.mark.netns

LEAVES, SPINES, HOSTS_PER_LEAF = 2, 2, 2


@dataclass
class SwitchProcess:
    name: str
    argv: list[str]
    log: Path
    proc: subprocess.Popen | None = None

    def start(self, address: str) -> None:
        with self.log.open("a") as stderr:
            self.proc = subprocess.Popen(self.argv, stdout=subprocess.DEVNULL, stderr=stderr)
        deadline = time.monotonic() + 30
        host, port = address.rsplit(":", 1)
        while True:
            try:
                socket.create_connection((host, int(port)), timeout=0.5).close()
                return
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    tail = self.log.read_text()[-2000:] if self.log.exists() else ""
                    raise RuntimeError(f"{self.name} did not start: {' '.join(self.argv)}\n{tail}") from None
                time.sleep(0.1)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@dataclass
class LeafSpineBed:
    fabric: Fabric
    pipeline: Pipeline
    switches: dict[str, SwitchProcess]
    hosts: dict[str, netns.Host]


def _build(lab: netns.Lab, tmp: Path) -> LeafSpineBed:
    names = [f"s{i + 1}" for i in range(LEAVES + SPINES)]
    ports: dict[str, list[dict]] = {n: [] for n in names}
    hosts_desc, links, hosts = [], [], {}
    index = 0
    for li in range(LEAVES):
        leaf = names[li]
        for h in range(HOSTS_PER_LEAF):
            index += 1
            name, port, ip = f"h{li + 1}{h + 1}", h + 1, f"10.0.{li + 1}.{h + 1}"
            host, outer = lab.add_host(index, ip)
            hosts[name] = host
            ports[leaf].append({"port": port, "iface": outer, "peer": name, "peer_port": 0})
            hosts_desc.append({"name": name, "ip": ip, "prefix_len": 24, "mac": host.mac, "switch": leaf,
                               "switch_port": port, "gateway_mac": fabric_mod.switch_port_mac(li + 1, port)})
            links.append({"a": leaf, "a_port": port, "b": name, "b_port": 0})
        for si in range(SPINES):
            spine = names[LEAVES + si]
            lp, sp = HOSTS_PER_LEAF + si + 1, li + 1
            a, b = lab.name("a", li * SPINES + si), lab.name("b", li * SPINES + si)
            netns.sh("ip", "link", "add", a, "type", "veth", "peer", "name", b)
            lab.links.append(a)
            for end in (a, b):
                netns.sh("ip", "link", "set", end, "up")
                netns.sh("ethtool", "-K", end, "tx", "off", check=False)
            ports[leaf].append({"port": lp, "iface": a, "peer": spine, "peer_port": sp})
            ports[spine].append({"port": sp, "iface": b, "peer": leaf, "peer_port": lp})
            links.append({"a": leaf, "a_port": lp, "b": spine, "b_port": sp})
    out = compile_embedded(ROOT / "p4src" / "dlcp.p4", tmp / "build")
    switches_desc, procs = [], {}
    for i, n in enumerate(names):
        address = f"127.0.0.1:{netns.free_port()}"
        switches_desc.append({"name": n, "device_id": i + 1, "grpc_addr": address, "cpu_port": 510,
                              "log": str(tmp / f"{n}.log"), "request_log": str(tmp / f"{n}-controller.log"),
                              "ports": ports[n]})
        argv = [sys.executable, "-m", "p4switch.cli", "run", "--no-p4", "--device-id", str(i + 1),
                "--grpc-server-addr", address, "--cpu-port", "510", "--log-file", str(tmp / f"{n}.log"),
                "--log-level", "warn"]
        for p in ports[n]:
            argv += ["-i", f"{p['port']}@{p['iface']}"]
        procs[n] = SwitchProcess(n, argv, tmp / f"{n}.stderr")
    fabric = fabric_mod.from_dict({
        "name": "leafspine-test", "target": "embedded",
        "program": {"source": "p4src/dlcp.p4", "p4info": str(out.p4info), "device_config": str(out.device_config)},
        "switches": switches_desc, "hosts": hosts_desc, "links": links})
    # Hosts reach every other host through their gateway MAC: the switches route, never answer ARP.
    netns.route_through_gateways(hosts, hosts_desc, "10.0.0.0/16")
    return LeafSpineBed(fabric, Pipeline.load(out.p4info, out.device_config), procs, hosts)


@pytest.fixture(scope="module")
def testbed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LeafSpineBed]:
    tmp = tmp_path_factory.mktemp("switches")
    with netns.lab() as lab:
        bed = _build(lab, tmp)
        try:
            for sw in bed.fabric.switches:
                bed.switches[sw.name].start(sw.grpc_addr)
            yield bed
        finally:
            for proc in bed.switches.values():
                proc.stop()


def ping(bed: LeafSpineBed, src: str, dst: str, attempts: int = 3) -> bool:
    """One echo answered within 2 s, allowing a busy machine two more tries."""
    target = bed.fabric.host(dst).ip
    for _ in range(attempts):
        if netns.in_ns(bed.hosts[src].ns, "ping", "-c", "1", "-W", "2", target, check=False).returncode == 0:
            return True
    return False


def all_pairs(bed: LeafSpineBed) -> list[tuple[str, str]]:
    names = [h.name for h in bed.fabric.hosts]
    return [(a, b) for a in names for b in names if a != b]


def test_routes_give_every_host_pair_a_path(testbed: LeafSpineBed) -> None:
    with FabricController.for_fabric(testbed.fabric, testbed.pipeline) as controller:
        result = controller.apply(route_entries(testbed.fabric, testbed.pipeline.schema), ROUTE_TABLES)
        # leaves: 4 routes + 2 members; spines: 4 routes; every switch: its spraying seed (default entry)
        assert result.total == 20 + 4
    failed = [pair for pair in all_pairs(testbed) if not ping(testbed, *pair)]
    assert failed == []


def test_policy_apply_twice_writes_nothing_the_second_time(testbed: LeafSpineBed) -> None:
    policy = load_policy(ROOT / "controller" / "policies" / "default.yaml")
    with FabricController.for_fabric(testbed.fabric, testbed.pipeline) as controller:
        entries = policy_entries(policy, testbed.pipeline.schema)
        desired = {name: entries for name in controller.sessions}
        first = controller.apply(desired, POLICY_TABLES)
        # The program's own default (set_priority(0, 0)) already is the policy's default.
        assert first.total == sum(not e.is_default for e in entries) * 4
    with FabricController.for_fabric(testbed.fabric, testbed.pipeline) as controller:
        second = controller.apply(desired, POLICY_TABLES)
        assert second.total == 0
        held = controller["s3"].read_entries(sorted(POLICY_TABLES))
        assert set(held) == {e for e in entries if not e.is_default}


def test_restarted_switch_gets_its_state_back(testbed: LeafSpineBed) -> None:
    fabric, pipeline = testbed.fabric, testbed.pipeline
    with FabricController.for_fabric(fabric, pipeline) as controller:
        routes = route_entries(fabric, pipeline.schema)
        controller.apply(routes, ROUTE_TABLES)
        session = controller["s1"]
        session.reconnect_timeout = 30
        before = set(session.read_entries(sorted(ROUTE_TABLES)))
        testbed.switches["s1"].stop()
        testbed.switches["s1"].start(fabric.switch("s1").grpc_addr)
        after = set(session.read_entries(sorted(ROUTE_TABLES)))  # reconnects, reloads, reconciles
        assert after == before == {e for e in routes["s1"] if not e.is_default}
        seed = next(e for e in routes["s1"] if e.is_default)  # the switch's own spraying seed
        assert session.read_default(seed.table) == seed
        assert session.pipeline_pushes == 1
    assert ping(testbed, "h11", "h21") and ping(testbed, "h12", "h11")


def test_cli_and_counters_on_real_switches(
    testbed: LeafSpineBed, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:

    path = fabric_mod.save(testbed.fabric, tmp_path / "fabric.json")
    assert cli.main(["routes", "--fabric", str(path)]) == 0
    assert "(0 updates)" in capsys.readouterr().out
    assert cli.main(["status", "--fabric", str(path)]) == 0
    assert ping(testbed, "h11", "h22")
    with FabricController.for_fabric(testbed.fabric, testbed.pipeline) as controller:
        ports = [p.port for p in testbed.fabric.switch("s1").ports]
        counters = gather(controller["s1"], ports, jobs=[1])
    assert sum(p for p, _ in counters.port_prio.values()) > 0, "port_tx counted the pings"
    assert sum(p for p, _ in counters.ecmp.values()) > 0, "the ECMP member counters saw the pings"
    assert cli.main(["counters", "--fabric", str(path), "--switch", "s1"]) == 0
    assert "spraying balance per ECMP group" in capsys.readouterr().out


def test_counters_since_a_snapshot_name_a_non_ipv4_drop(
    testbed: LeafSpineBed, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A phase on the embedded target, read as differences: pings, and one frame that is not
    IPv4, counted under the program's name for it."""
    import json

    path = fabric_mod.save(testbed.fabric, tmp_path / "fabric.json")
    assert cli.main(["routes", "--fabric", str(path)]) == 0
    capsys.readouterr()
    assert cli.main(["counters", "--fabric", str(path), "--switch", "s1", "--json"]) == 0
    before = tmp_path / "before.json"
    before.write_text(capsys.readouterr().out)
    assert ping(testbed, "h11", "h22")
    host = testbed.hosts["h11"]
    frame = "ff" * 6 + host.mac.replace(":", "") + "88b5" + "00" * 46  # local experimental EtherType
    send = (f"import socket; s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW); s.bind(({host.iface!r}, 0)); "
            f"s.send(bytes.fromhex({frame!r}))")
    netns.in_ns(host.ns, sys.executable, "-c", send)
    deadline = time.monotonic() + 20  # the switch counts the frame once its thread gets a turn
    while True:
        assert cli.main(["counters", "--fabric", str(path), "--switch", "s1", "--since", str(before), "--json"]) == 0
        s1 = json.loads(capsys.readouterr().out)["switches"]["s1"]
        drops = {d["reason"]: d["packets"] for d in s1["drops"]}
        if drops.get("not_ipv4", 0) >= 1 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert drops.get("not_ipv4", 0) >= 1, f"the frame is counted as not_ipv4: {drops}"
    assert not any(name.startswith("ingress_drops[") for name in drops)
    assert sum(p["packets"] for p in s1["ports"]) > 0, "the pings were sent during the phase"
