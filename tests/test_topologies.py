"""Topology files, their validation, the Mininet builder, switch command lines and cleanup.

The tests marked netns boot real Mininet fabrics made of Linux bridges (no P4 switch), to
check the plumbing: namespaces, links, shaping, the fabric description and that stopping
(normally or after the launcher was killed) leaves nothing behind.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import networkx as nx
import pytest
import yaml

from gradfabric import fabric as fabric_description
from gradfabric.p4ref import ENV_PREFIX
from mininet_topos import cleanup
from mininet_topos.banner import boot_banner
from mininet_topos.builder import FabricTopo, describe, root_interfaces, tc_params
from mininet_topos.launcher import Fabric, LaunchOptions
from mininet_topos.spec import LinkParams, TopologyError, load_topology
from mininet_topos.switches import (
    SwitchConfig,
    SwitchProcess,
    SwitchStartError,
    TargetMissingError,
    bmv2_command,
    embedded_command,
)
from tests import netns

SHIPPED = ("leafspine", "dumbbell", "fattree")


def host_paths(spec, a: str, b: str) -> list[list[str]]:
    return list(nx.all_shortest_paths(nx.Graph(spec.graph()), a, b))


# -- shipped topologies ------------------------------------------------------------------
def test_leafspine_is_two_spines_two_leaves_two_hosts_per_leaf_with_two_paths() -> None:
    spec = load_topology("leafspine")
    roles = sorted(s.role for s in spec.switches)
    assert roles == ["leaf", "leaf", "spine", "spine"]
    per_leaf = {s.name: [h.name for h in spec.hosts if h.switch == s.name]
                for s in spec.switches if s.role == "leaf"}
    assert all(len(hosts) == 2 for hosts in per_leaf.values())
    (la, ha), (lb, hb) = [(leaf, hosts[0]) for leaf, hosts in per_leaf.items()]
    paths = host_paths(spec, ha, hb)
    assert len(paths) == 2  # one per spine: the ECMP group the controller builds
    assert {p[2] for p in paths} == {s.name for s in spec.switches if s.role == "spine"}


def test_fattree_k4_has_20_switches_16_hosts_and_4_paths_between_pods() -> None:
    spec = load_topology("fattree")
    assert len(spec.switches) == 20 and len(spec.hosts) == 16
    assert all(len(spec.ports_of(s.name)) == 4 for s in spec.switches)
    pod_of = {h.name: (int(h.switch[1:]) - 1) // 2 for h in spec.hosts}
    a, b = spec.hosts[0].name, next(h.name for h in spec.hosts if pod_of[h.name] != pod_of[spec.hosts[0].name])
    assert len(host_paths(spec, a, b)) == 4
    same_pod = next(h.name for h in spec.hosts if pod_of[h.name] == pod_of[a]
                    and spec.host(h.name).switch != spec.host(a).switch)
    assert len(host_paths(spec, a, same_pod)) == 2


def test_dumbbell_has_one_slower_bottleneck_between_the_groups() -> None:
    spec = load_topology("dumbbell")
    bridges = [tuple(sorted(e)) for e in nx.bridges(nx.Graph(spec.graph()))
               if all(n in {s.name for s in spec.switches} for n in e)]
    assert len(bridges) == 1
    bottleneck = next(l for l in spec.links if tuple(sorted((l.a, l.b))) == bridges[0])
    access = [l.params.bw_mbps for l in spec.links if l is not bottleneck]
    assert bottleneck.params.bw_mbps < min(access)


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_topology_ports_addresses_and_macs_are_unique(name: str) -> None:
    spec = load_topology(name)
    for sw in spec.switches:
        ports = [p for p, _, _ in spec.ports_of(sw.name)]
        assert len(ports) == len(set(ports)) and min(ports) >= 1
    assert len({h.ip for h in spec.hosts}) == len(spec.hosts)
    assert len({h.mac for h in spec.hosts}) == len(spec.hosts)
    for h in spec.hosts:
        dev = spec.switch(h.switch).device_id
        assert h.gateway_mac == f"00:00:00:00:{dev:02x}:{h.switch_port:02x}"
    assert all(len(i) <= 15 for i in root_interfaces(spec.with_prefix("gft00")))


def test_topology_by_path_and_default_ip_from_device_and_port(tmp_path: Path) -> None:
    path = write(tmp_path, "t.yaml", {
        "switches": [{"name": "sa", "device_id": 7}],
        "hosts": [{"name": "ha"}, {"name": "hb", "ip": "192.168.5.9/16"}],
        "links": [{"a": "sa", "b": "ha"}, {"a": "hb", "b": "sa", "b_port": 1, "bw_mbps": 10}],
    })
    spec = load_topology(path)
    ha, hb = spec.host("ha"), spec.host("hb")
    # hb's link names port 1 explicitly, so ha's link (no port given) takes port 2.
    assert (hb.switch_port, ha.switch_port) == (1, 2)
    assert (ha.ip, ha.prefix_len) == ("10.0.7.2", 24)
    assert (hb.ip, hb.prefix_len, hb.mac) == ("192.168.5.9", 16, "00:00:c0:a8:05:09")
    assert spec.links[1].params.bw_mbps == 10 and spec.links[0].params.bw_mbps == 1000
    assert spec.switches[0].params.rate_scope == "port"  # the default: one rate per port


def test_rate_scope_per_switch_overrides_the_default(tmp_path: Path) -> None:
    data = json.loads(json.dumps(BASE))
    data["defaults"] = {"switch": {"rate_scope": "queue"}}
    data["switches"][1]["rate_scope"] = "port"
    spec = load_topology(write(tmp_path, "t.yaml", data))
    assert [s.params.rate_scope for s in spec.switches] == ["queue", "port"]


# -- validation messages -----------------------------------------------------------------
def write(tmp_path: Path, name: str, data: object) -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return path


BASE = {
    "switches": [{"name": "s1"}, {"name": "s2"}],
    "hosts": [{"name": "h1"}, {"name": "h2"}],
    "links": [{"a": "s1", "b": "h1"}, {"a": "s2", "b": "h2"}, {"a": "s1", "b": "s2"}],
}


@pytest.mark.parametrize("change, expected", [
    (lambda d: d["links"].append({"a": "s1", "b": "s9"}),
     "bad.yaml: links[3].b: unknown node 's9'"),
    (lambda d: d["links"].__setitem__(2, {"a": "s1", "a_port": 1, "b": "s2"}) or
     d["links"].__setitem__(0, {"a": "s1", "a_port": 1, "b": "h1"}),
     "bad.yaml: links[2].a_port: duplicate port 1 on s1 (also links[0])"),
    (lambda d: d["links"].pop(2),
     "bad.yaml: hosts[1]: host 'h2' is unreachable from 'h1'"),
    (lambda d: d["hosts"].append({"name": "h3"}),
     "bad.yaml: hosts[2]: host 'h3' is unreachable: no link attaches it"),
    (lambda d: d["switches"].append({"name": "h1"}),
     "bad.yaml: hosts[0].name: duplicate node 'h1'"),
    (lambda d: d["links"].append({"a": "s2", "b": "h1"}),
     "bad.yaml: links[3].b: host 'h1' is already linked by links[0]"),
    (lambda d: d["links"][0].__setitem__("bw_mbps", "fast"),
     "bad.yaml: links[0].bw_mbps: must be a number, got 'fast'"),
    (lambda d: d["links"][0].__setitem__("loss_pct", 150),
     "bad.yaml: links[0].loss_pct: must be 0..100, got 150"),
    (lambda d: d["switches"][1].__setitem__("device_id", 1),
     "bad.yaml: switches[1].device_id: duplicate device id 1 (also switches[0])"),
    (lambda d: d["links"][0].__setitem__("colour", "red"),
     "bad.yaml: links[0].colour: unknown key"),
    (lambda d: d["switches"][0].__setitem__("rate_scope", "link"),
     "bad.yaml: switches[0].rate_scope: must be one of port, queue, got 'link'"),
    (lambda d: d["switches"][0].__setitem__("name", "averyveryverylongname"),
     "bad.yaml: switches[0].name: 'averyveryverylongname' is longer than 9 characters"),
])
def test_validation_names_file_key_and_reason(tmp_path: Path, change, expected: str) -> None:
    data = json.loads(json.dumps(BASE))
    change(data)
    with pytest.raises(TopologyError) as exc:
        load_topology(write(tmp_path, "bad.yaml", data))
    assert str(exc.value).startswith(expected), str(exc.value)


def test_unknown_topology_name_lists_the_known_ones() -> None:
    with pytest.raises(TopologyError, match=r"unknown topology 'ring' \(known: dumbbell, fattree, leafspine"):
        load_topology("ring")


def test_yaml_syntax_error_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("switches: [\n")
    with pytest.raises(TopologyError, match=r"^broken.yaml: not valid YAML"):
        load_topology(path)


# -- builder and description -------------------------------------------------------------
def switch_config(name: str, device_id: int, tmp_path: Path, **kw: object) -> SwitchConfig:
    return SwitchConfig(name=name, device_id=device_id, grpc_port=50000 + device_id,
                        log_file=tmp_path / "logs" / f"{name}.log",
                        p4runtime_log=tmp_path / "logs" / f"{name}-p4runtime.log", **kw)


def test_mininet_topo_has_explicit_ports_addresses_and_shaping() -> None:
    spec = load_topology("dumbbell")
    topo = FabricTopo(spec)
    assert sorted(topo.switches()) == ["s1", "s2"] and sorted(topo.hosts()) == ["h1", "h2", "h3", "h4"]
    assert topo.nodeInfo("h3") == {"ip": "10.0.2.1/24", "mac": "00:00:0a:00:02:01"}
    info = topo.linkInfo("s1", "s2")
    assert (info["port1"], info["port2"]) == (3, 3)  # the bottleneck: port 3 on both sides
    assert info["bw"] == 200 and info["use_tbf"] is True
    assert topo.port("s2", "h4") == (2, 0)


def test_tc_params_leave_out_delay_and_loss_without_netem() -> None:
    params = LinkParams(bw_mbps=50, delay_ms=2, loss_pct=1.5)
    # the tbf holds 1,000 full frames (1,514 bytes) at 50 Mbit/s: 1000 * 1514 * 8 / 50e6 s = 242.24 ms
    queue = {"latency_ms": 242.24}
    assert tc_params(params, netem=True) == {"bw": 50, "use_tbf": True, "delay": "2ms", "loss": 1.5, **queue}
    assert tc_params(params, netem=False) == {"bw": 50, "use_tbf": True, **queue}


def test_description_validates_and_follows_the_contract(tmp_path: Path) -> None:
    spec = load_topology("leafspine")
    configs = {s.name: switch_config(s.name, s.device_id, tmp_path) for s in spec.switches}
    program = {"source": str(tmp_path / "p.p4"), "p4info": str(tmp_path / "build/p.txtpb"),
               "device_config": str(tmp_path / "build/p.json")}
    fab = describe(spec, configs, "embedded", program, relative_to=tmp_path.resolve())
    data = json.loads(json.dumps(fab.to_dict()))
    again = fabric_description.from_dict(data)  # the controller's own validation
    assert again.program.p4info == "build/p.txtpb"
    l1 = again.switch("l1")
    assert l1.grpc_addr == "127.0.0.1:50001" and l1.log == "logs/l1.log"
    assert [(p.port, p.iface, p.peer) for p in l1.ports] == [
        (1, "l1-eth1", "h1"), (2, "l1-eth2", "h2"), (3, "l1-eth3", "s1"), (4, "l1-eth4", "s2")]
    h3 = again.host("h3")
    assert (h3.ip, h3.switch, h3.switch_port, h3.gateway_mac) == ("10.0.2.1", "l2", 1, "00:00:00:00:02:01")
    assert h3.gateway_mac == again.switch("l2").port_mac(1)
    assert len(again.links) == 8


def test_banner_says_where_logs_pcaps_and_request_logs_are(tmp_path: Path) -> None:
    spec = load_topology("leafspine")
    configs = {s.name: switch_config(s.name, s.device_id, tmp_path) for s in spec.switches}
    fab = describe(spec, configs, "embedded", {"source": "", "p4info": "", "device_config": ""},
                   relative_to=tmp_path.resolve())
    text = boot_banner(fab.to_dict(), tmp_path, pcap=True, description_path=tmp_path / "build/fabric.json",
                       policy=Path("controller/policies/default.yaml"), warnings=["w1"])
    assert "leafspine fabric is up on the embedded target (4 switches, 4 hosts)" in text
    assert "logs/l1.log" in text and "logs/l1-p4runtime.log" in text
    assert "pcaps/" in text and "build/fabric.json" in text and "warning: w1" in text
    assert "counters" in text and "policy apply FILE" in text
    assert "logs/l1-controller.log" in text and "leave with: exit" in text
    off = boot_banner(fab.to_dict(), tmp_path, pcap=False, description_path=tmp_path / "f.json", policy=None,
                      interactive=False)
    assert "pcaps:               off" in off and "PCAP=1" in off
    assert "exit" not in off and "extra CLI commands" not in off


# -- switch command lines and processes --------------------------------------------------
def test_embedded_command_line_follows_the_contract(tmp_path: Path) -> None:
    cfg = switch_config("l1", 3, tmp_path, ports=((1, "l1-eth1"), (2, "l1-eth2")),
                        egress_rate_pps=500, queue_depth=32, pcap_dir=tmp_path / "pcaps")
    cmd = embedded_command(cfg)
    assert cmd[1:5] == ["-m", "p4switch.cli", "run", "--no-p4"]
    joined = " ".join(cmd)
    for part in ("-i 1@l1-eth1 -i 2@l1-eth2", "--device-id 3", "--grpc-server-addr 127.0.0.1:50003",
                 "--cpu-port 510", "--priority-queues 8", f"--log-file {tmp_path}/logs/l1.log",
                 f"--p4runtime-log {tmp_path}/logs/l1-p4runtime.log", "--port-rate 2=500pps",
                 "--queue-depth 1=32", f"--pcap {tmp_path}/pcaps"):
        assert part in joined
    assert "--queue-rate" not in joined  # rate_scope "port": one rate shared by the queues
    per_queue = " ".join(embedded_command(SwitchConfig(**{**cfg.__dict__, "rate_scope": "queue"})))
    assert "--queue-rate 1=500pps --queue-depth 1=32 --queue-rate 2=500pps" in per_queue
    assert "--port-rate" not in per_queue


def test_bmv2_is_refused_with_a_clear_message_when_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_PREFIX, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(TargetMissingError, match=r"simple_switch_grpc under \$GRADFABRIC_P4REF/bin or on PATH"):
        bmv2_command(switch_config("s1", 1, tmp_path))
    options = LaunchOptions(topo="leafspine", target="bmv2", workdir=tmp_path)
    with pytest.raises(TargetMissingError, match="use --target embedded"):
        with Fabric(options):
            pass
    assert not (tmp_path / "build" / cleanup.STATE_FILE).exists()


def listening_addresses(port: int) -> set[str]:
    """The addresses a TCP port listens on (from /proc/net/tcp and tcp6; IPv4 as dotted quad,
    IPv4-mapped IPv6 as ``::ffff:a.b.c.d``, other IPv6 as 32 hex digits)."""
    found = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            address, hex_port = fields[1].split(":")
            if fields[3] != "0A" or int(hex_port, 16) != port:
                continue
            raw = bytes.fromhex(address)
            words = [raw[i:i + 4][::-1] for i in range(0, len(raw), 4)]  # host-order 32-bit words
            if len(words) == 1:
                found.add(".".join(map(str, words[0])))
            elif b"".join(words[:3]) == bytes(10) + b"\xff\xff":
                found.add("::ffff:" + ".".join(map(str, words[3])))
            else:
                found.add(b"".join(words).hex())
    return found


@pytest.mark.bmv2
@pytest.mark.netns
def test_bmv2_command_line_starts_the_real_simple_switch_grpc(tmp_path: Path) -> None:
    """BMv2 1.15 accepts the launcher's command line (target options after ``--``), serves
    P4Runtime on loopback only, has the 8 priority queues asked for (the Thrift CLI can set
    the rate of priority 7) and logs where the launcher says."""
    from controller.bmv2_queues import QueueSetting, apply_queue_settings
    from mininet_topos.launcher import free_port

    with netns.lab() as lab:
        _, outer1 = lab.add_host(1, "10.9.1.1")
        _, outer2 = lab.add_host(2, "10.9.1.2")
        cfg = SwitchConfig(name="b1", device_id=7, grpc_port=free_port(), log_file=tmp_path / "logs" / "b1.txt",
                           p4runtime_log=tmp_path / "logs" / "b1-p4runtime.log", thrift_port=free_port(),
                           pcap_dir=tmp_path / "pcaps", ports=((1, outer1), (2, outer2)))
        command = bmv2_command(cfg)
        assert command[command.index("--") + 1:] == [
            "--grpc-server-addr", cfg.grpc_addr, "--cpu-port", "510", "--priority-queues", "8"]
        proc = SwitchProcess(cfg, command)
        proc.start()
        try:
            proc.wait_ready(time.monotonic() + 30)
            assert listening_addresses(cfg.grpc_port) <= {"127.0.0.1", "::ffff:127.0.0.1"}
            assert listening_addresses(cfg.grpc_port)
            apply_queue_settings(cfg.thrift_port, [QueueSetting(port=2, rate_pps=100, depth_packets=16, priority=7)])
        finally:
            proc.stop()
        assert proc.proc is not None and proc.proc.returncode is not None
    assert "Thrift server was started" in cfg.log_file.read_text()
    assert f"Adding interface {outer2} as port 2" in cfg.output_file.read_text()
    assert (tmp_path / "pcaps" / f"{outer1}_in.pcap").exists()


def test_switch_that_exits_is_reported_with_command_and_output(tmp_path: Path) -> None:
    cfg = switch_config("s9", 9, tmp_path)
    script = "import sys; print('loading pipeline'); print('bad interface s9-eth7', file=sys.stderr); sys.exit(3)"
    proc = SwitchProcess(cfg, [sys.executable, "-c", script])
    proc.start()
    with pytest.raises(SwitchStartError) as exc:
        proc.wait_ready(time.monotonic() + 20)
    text = str(exc.value)
    assert "switch s9 exited with code 3" in text
    assert "command: " + sys.executable in text
    assert "bad interface s9-eth7" in text and "loading pipeline" in text


def test_embedded_switch_on_a_missing_interface_is_reported_with_its_own_words(tmp_path: Path) -> None:
    from mininet_topos.launcher import free_port

    cfg = SwitchConfig(name="sx", device_id=9, grpc_port=free_port(), log_file=tmp_path / "sx.log",
                       p4runtime_log=tmp_path / "sx-p4runtime.log", ports=((1, "gftnosuch0"),))
    proc = SwitchProcess(cfg, embedded_command(cfg))
    proc.start()
    try:
        with pytest.raises(SwitchStartError) as exc:
            proc.wait_ready(time.monotonic() + 30)
    finally:
        proc.stop()
    text = str(exc.value)
    assert "switch sx exited with code" in text
    assert "-i 1@gftnosuch0" in text  # the command line
    assert text.count("gftnosuch0") >= 2  # and the switch's own message about it


def test_switch_ready_when_its_port_accepts_and_reported_when_it_never_does(tmp_path: Path) -> None:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    cfg = SwitchConfig(name="s5", device_id=5, grpc_port=port, log_file=tmp_path / "s5.log",
                       p4runtime_log=tmp_path / "s5-p4rt.log")
    listen = (f"import socket, time; s = socket.socket(); s.bind(('127.0.0.1', {port})); "
              "time.sleep(0.5); s.listen(); print('listening', flush=True); time.sleep(60)")
    proc = SwitchProcess(cfg, [sys.executable, "-c", listen])
    proc.start()
    try:
        proc.wait_ready(time.monotonic() + 20)
        assert proc.proc is not None and proc.proc.poll() is None
    finally:
        proc.stop()
    assert proc.proc.returncode == -signal.SIGTERM
    silent = SwitchProcess(cfg, [sys.executable, "-c", "import time; print('still booting', flush=True); time.sleep(60)"])
    silent.start()
    try:
        with pytest.raises(SwitchStartError, match=rf"did not open its P4Runtime port 127.0.0.1:{port}"):
            silent.wait_ready(time.monotonic() + 1.0)
    finally:
        silent.stop()


# -- cleanup records ---------------------------------------------------------------------
def test_cleanup_stops_tracked_processes_only_when_they_are_still_the_same(tmp_path: Path) -> None:
    state = cleanup.FabricState(tmp_path / cleanup.STATE_FILE)
    mine = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        state.track(mine.pid, "switch x")
        state.track(other.pid, "switch y")
        loaded = cleanup.FabricState.load(state.path)
        assert loaded is not None and [p.what for p in loaded.processes] == ["switch x", "switch y"]
        loaded.processes[1].start_time += 1  # as if the pid had been reused by another process
        done = cleanup.remove(loaded)
        assert mine.wait(10) == -signal.SIGTERM
        assert other.poll() is None
        assert done == [f"stopped switch x (pid {mine.pid})"]
        assert not state.path.exists()
        assert cleanup.stop_fabric(tmp_path) is None
    finally:
        for p in (mine, other):
            if p.poll() is None:
                p.kill()
                p.wait()


# -- plumbing with Linux bridges (root) --------------------------------------------------
def leftovers(prefix: str) -> list[str]:
    """Interfaces named like this fabric's nodes (``<prefix>s1``, ``<prefix>h3-eth0``...).

    The prefix is "gft" plus two hex digits and the node names used here start with a
    letter past "f", so interfaces of tests/netns labs ("gft" plus five hex digits) never match.
    """
    ours = re.compile(rf"^{re.escape(prefix)}[g-z][\w-]*$")
    links = [l.split(":")[1].strip().split("@")[0] for l in netns.sh("ip", "-o", "link").stdout.splitlines()]
    return [name for name in links if ours.match(name)]


def mininet_shells(prefix: str) -> list[str]:
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return [l for l in out.splitlines() if f"mininet:{prefix}" in l]


@pytest.fixture
def prefix() -> str:
    tag = f"{netns.PREFIX}{uuid.uuid4().hex[:2]}"
    yield tag
    for name in leftovers(tag):
        netns.sh("ip", "link", "del", name, check=False)


@pytest.mark.netns
def test_bridge_fabric_boots_pings_shapes_and_leaves_nothing(tmp_path: Path, prefix: str) -> None:
    options = LaunchOptions(topo="dumbbell", workdir=tmp_path, prefix=prefix, switch_kind="bridge")
    with Fabric(options) as fab:
        h1, h2 = fab.node("h1"), fab.node("h2")
        ping = h1.cmd(f"ping -c 2 -W 2 -i 0.2 {h2.IP()}")
        assert " 0% packet loss" in ping, ping
        assert "tbf" in h1.cmd(f"tc qdisc show dev {h1.defaultIntf().name}")
        bottleneck = subprocess.run(["tc", "qdisc", "show", "dev", f"{prefix}s1-eth3"],
                                    capture_output=True, text=True).stdout
        assert "rate 200Mbit" in bottleneck
        assert "tx-checksumming: off" in h1.cmd(f"ethtool -k {h1.defaultIntf().name}")
        # `h1 gradfabric agent ...` in the CLI finds the command of the running environment
        assert h1.cmd("command -v gradfabric").strip() == str(Path(sys.executable).parent / "gradfabric")
        described = fabric_description.load(tmp_path / "build" / "fabric.json")
        assert described.host(f"{prefix}h3").switch == f"{prefix}s2"
        state = cleanup.FabricState.load(tmp_path / "build" / cleanup.STATE_FILE)
        assert state is not None and f"{prefix}s1-eth3" in state.interfaces
        assert len(leftovers(prefix)) == 8  # 6 switch ports + 2 bridges in the root namespace
        assert len(mininet_shells(prefix)) == 6
    assert leftovers(prefix) == []
    assert mininet_shells(prefix) == []
    assert not (tmp_path / "build" / cleanup.STATE_FILE).exists()


@pytest.mark.netns
def test_a_second_fabric_in_the_same_workdir_is_refused(tmp_path: Path, prefix: str) -> None:
    options = LaunchOptions(topo="dumbbell", workdir=tmp_path, prefix=prefix, switch_kind="bridge")
    with Fabric(options):
        with pytest.raises(Exception, match="a fabric is already running"):
            with Fabric(LaunchOptions(topo="dumbbell", workdir=tmp_path, prefix=prefix + "x",
                                      switch_kind="bridge")):
                pass
        assert len(leftovers(prefix)) == 8  # the refused one removed nothing of the first
        assert (tmp_path / "build" / cleanup.STATE_FILE).exists()
    assert leftovers(prefix) == []


@pytest.mark.netns
def test_stop_after_the_launcher_was_killed_removes_everything(tmp_path: Path, prefix: str) -> None:
    script = textwrap.dedent(f"""
        import time
        from pathlib import Path
        from mininet_topos.launcher import Fabric, LaunchOptions
        fab = Fabric(LaunchOptions(topo="dumbbell", workdir=Path({str(tmp_path)!r}),
                                   prefix={prefix!r}, switch_kind="bridge"))
        fab.__enter__()
        fab.node("h1").cmd("setsid sleep 300 >/dev/null 2>&1 &")  # outlives its shell
        print("up", flush=True)
        time.sleep(300)
    """)
    launcher = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                                cwd=Path(__file__).resolve().parent.parent)
    try:
        assert launcher.stdout is not None and launcher.stdout.readline().strip() == "up"
        assert len(leftovers(prefix)) == 8
        launcher.send_signal(signal.SIGKILL)
        launcher.wait(10)
        env = {**os.environ, "GRADFABRIC_WORKDIR": str(tmp_path)}
        stop = subprocess.run([sys.executable, "-m", "gradfabric.command.cli", "stop"], env=env,
                              capture_output=True, text=True, timeout=60)
        assert stop.returncode == 0, stop.stderr
        assert "fabric removed" in stop.stdout
        assert "left in the namespace of shell of " + prefix + "h1" in stop.stdout, stop.stdout
        assert leftovers(prefix) == []
        assert mininet_shells(prefix) == []
        again = subprocess.run([sys.executable, "-m", "gradfabric.command.cli", "stop"], env=env,
                               capture_output=True, text=True, timeout=60)
        assert "nothing to stop" in again.stdout
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()
        cleanup.stop_fabric(tmp_path / "build")


@pytest.mark.netns
def test_run_without_cli_prints_the_banner_and_runs_the_scenario(
        tmp_path: Path, prefix: str, capfd: pytest.CaptureFixture[str]) -> None:
    from mininet_topos import runner

    scenario = tmp_path / "scenario.txt"
    ping_out = tmp_path / "ping.txt"
    scenario.write_text(f"{prefix}h1 ping -c 1 -W 2 {prefix}h2 > {ping_out}\n"
                        f"sh echo scenario-finished >> {ping_out}\n")
    options = LaunchOptions(topo="dumbbell", workdir=tmp_path, prefix=prefix, switch_kind="bridge")
    assert runner.run(options, interactive=False, scenario=scenario) == 0
    out = capfd.readouterr().out
    assert "dumbbell fabric is up" in out and f"{prefix}h4" in out
    ran = ping_out.read_text()
    assert "1 packets transmitted, 1 received" in ran
    assert ran.rstrip().endswith("scenario-finished")
    assert leftovers(prefix) == []


def test_cli_counters_line_becomes_controller_arguments() -> None:
    from mininet_topos.console import counters_args

    assert counters_args("") == ["counters"]
    assert counters_args("l1 s2 --watch --count 3") == [
        "counters", "--switch", "l1", "--switch", "s2", "--watch", "--count", "3"]


@pytest.mark.netns
def test_interfaces_that_already_exist_are_refused_and_left_alone(tmp_path: Path, prefix: str) -> None:
    from mininet_topos.launcher import FabricError

    taken = f"{prefix}s1-eth1"
    netns.sh("ip", "link", "add", taken, "type", "veth", "peer", "name", f"{prefix}peer")
    options = LaunchOptions(topo="dumbbell", workdir=tmp_path, prefix=prefix, switch_kind="bridge")
    with pytest.raises(FabricError, match=f"interfaces this fabric needs already exist: {taken};"):
        with Fabric(options):
            pass
    assert sorted(leftovers(prefix)) == sorted([taken, f"{prefix}peer"])  # not ours: untouched


@pytest.mark.netns
def test_run_and_stop_commands_check_their_input_before_touching_anything(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from gradfabric.command import cli

    monkeypatch.setenv("GRADFABRIC_WORKDIR", str(tmp_path))
    assert cli.main(["run", "--no-cli", "--scenario", str(tmp_path / "none.txt")]) == 1
    assert f"scenario file {tmp_path / 'none.txt'} does not exist" in capsys.readouterr().err
    assert cli.main(["run", "--topo", str(tmp_path / "none.yaml")]) == 1
    assert f"topology file {tmp_path / 'none.yaml'} does not exist" in capsys.readouterr().err
    assert cli.main(["stop"]) == 0
    assert "no fabric recorded, nothing to stop" in capsys.readouterr().out
    assert not (tmp_path / "build").exists()
