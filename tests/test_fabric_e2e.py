"""End to end: the leaf-spine fabric as `make run` boots it, on the embedded target and on
BMv2 (``simple_switch_grpc`` with p4c's build of the same program, marked ``bmv2``).

One boot serves every check (booting four switch processes is the slow part): all host
pairs ping with 0% loss; a DLCP tensor from a host on one leaf is rebuilt exactly on a
host on the other leaf, and the ECMP member counters of the first leaf show its packets
sprayed over both spines; a single TCP flow stays on one spine; stopping leaves no
namespace, interface or process behind.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import pytest
import yaml

from gradfabric import fabric as fabric_description
from mininet_topos import cleanup
from mininet_topos.launcher import Fabric, LaunchOptions
from mininet_topos.programming import DEFAULT_POLICY, program_fabric
from mininet_topos.runner import run_scenario
from tests import netns

ROOT = Path(__file__).resolve().parent.parent
ECMP_COUNTER = "DlcpIngress.ecmp_member_counter"
TENSOR_LEN = 30_000  # about 85 packets of up to 360 float32 values

RECEIVER = """
import sys
import numpy as np
from hosts.endpoint import Endpoint
from hosts.wire import MsgType
with Endpoint(worker_id=2, host="0.0.0.0", port=19600, bounds={MsgType.GRADIENT: 0.0}) as ep:
    print("ready", flush=True)
    got = ep.receive(timeout=90)
    np.save(sys.argv[1], got.values)
    print("received", got.received, flush=True)
    sys.stdin.read()  # keep answering the sender's probes until told to stop
"""

SENDER = """
import sys
import numpy as np
from hosts.endpoint import Endpoint
from hosts.wire import MsgType
values = np.random.default_rng(8).standard_normal(int(sys.argv[2])).astype(np.float32)
with Endpoint(worker_id=1, host="0.0.0.0", bounds={MsgType.GRADIENT: 0.0}) as ep:
    ep.send((sys.argv[1], 19600), values, tensor_id=3, num_layers=8, drop_eligible=False)
print("sent", flush=True)
"""

TCP_SINK = """
import socket, sys
srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("0.0.0.0", int(sys.argv[1]))); srv.listen(1)
print("ready", flush=True)
conn, _ = srv.accept()
total = 0
while chunk := conn.recv(65536):
    total += len(chunk)
print(total, flush=True)
"""

TCP_SOURCE = """
import socket, sys
with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=60) as s:
    s.sendall(b"x" * int(sys.argv[3]))
"""


def ecmp_counts(description: Path, switch: str) -> dict[int, int]:
    """Packets per ECMP member port of the switch's multi-member groups."""
    from controller.fabric_controller import FabricController
    from controller.pipeline import Pipeline

    fab = fabric_description.load(description)
    pipeline = Pipeline.load(fab.path(fab.program.p4info), fab.path(fab.program.device_config))
    with FabricController.for_fabric(fab, pipeline, request_logs=False) as controller:
        session = controller[switch]
        session.connect(load_pipeline=False)
        # BMv2 returns a direct counter's entry by its match only: find the port by the match.
        ports = {tuple(e.match): dict(e.params)["port"] for e in session.read_entries(["ecmp_member"])}
        counts: dict[int, int] = {}
        for dc in session.read_direct_counters(ECMP_COUNTER):
            assert dc.entry is not None
            port = ports[tuple(dc.entry.match)]
            counts[port] = counts.get(port, 0) + dc.packets
    return counts


def delta(after: dict[int, int], before: dict[int, int]) -> dict[int, int]:
    return {port: after[port] - before.get(port, 0) for port in after}


def run_in(node, script: str, *args: str) -> subprocess.Popen[str]:
    """``script`` in a host's namespace; closing its stdin tells the receiver to stop."""
    return node.popen([sys.executable, "-c", script, *args], cwd=str(ROOT), text=True,
                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def wait_line(proc: subprocess.Popen[str], expected: str, timeout: float = 30) -> str:
    """The first line of ``proc``'s output starting with ``expected``; everything it said if none."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    said: list[str] = []
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        if line.startswith(expected):
            return line
        said.append(line)
    if proc.poll() is None:
        proc.kill()
    said.append(proc.stdout.read())
    raise AssertionError(f"expected a line {expected!r}; exit {proc.wait(5)}, output:\n{''.join(said)}")


def default_policy_for_any_hosts(folder: Path) -> Path:
    """The default policy without worker host names (this fabric's hosts are prefixed)."""
    policy = yaml.safe_load(DEFAULT_POLICY.read_text())
    for job in policy.get("jobs", []):
        job.pop("workers", None)
    path = folder / "policy.yaml"
    path.write_text(yaml.safe_dump(policy))
    return path


def leftovers(prefix: str) -> list[str]:
    """Interfaces named like this fabric's nodes; "gft" plus five hex digits (tests/netns
    labs) never matches, since leaf-spine node names start with "h", "l" or "s"."""
    ours = re.compile(rf"^{re.escape(prefix)}[hls][\w-]*$")
    names = [l.split(":")[1].strip().split("@")[0] for l in netns.sh("ip", "-o", "link").stdout.splitlines()]
    return [name for name in names if ours.match(name)]


@pytest.mark.netns
@pytest.mark.slow
@pytest.mark.parametrize("target", ["embedded", pytest.param("bmv2", marks=pytest.mark.bmv2)])
def test_leafspine_end_to_end(tmp_path: Path, capfd: pytest.CaptureFixture[str], target: str) -> None:
    prefix = f"{netns.PREFIX}{uuid.uuid4().hex[:2]}"
    options = LaunchOptions(topo="leafspine", target=target, workdir=tmp_path, prefix=prefix,
                            policy=default_policy_for_any_hosts(tmp_path), log_level="warn")
    switches: list[cleanup.TrackedProcess] = []
    hosts: list[cleanup.TrackedProcess] = []
    try:
        with Fabric(options) as fab:
            assert fab.net is not None
            switches = [p for p in fab.state.processes if p.what.startswith("switch ")]
            hosts = [p for p in fab.state.processes if p.netns is not None]
            assert len(switches) == 4 and len(hosts) == 4
            assert len(leftovers(prefix)) == 12  # the switch ports, in the root namespace
            program_fabric(fab.description_path, options.policy)

            # Every host pair, both directions, 0% loss.
            assert fab.net.pingAll(timeout=3) == 0

            # A DLCP tensor from h1 (leaf l1) to h3 (leaf l2), rebuilt exactly.
            h1, h3, h2, h4 = (fab.node(n) for n in ("h1", "h3", "h2", "h4"))
            leaf = f"{prefix}l1"
            before = ecmp_counts(fab.description_path, leaf)
            assert sorted(before) == [3, 4]  # l1's uplinks: port 3 to s1, port 4 to s2
            out = tmp_path / "tensor.npy"
            receiver = run_in(h3, RECEIVER, str(out))
            try:
                wait_line(receiver, "ready")
                sender = run_in(h1, SENDER, h3.IP(), str(TENSOR_LEN))
                wait_line(sender, "sent", timeout=90)
                wait_line(receiver, "received", timeout=30)
            finally:
                assert receiver.stdin is not None
                receiver.stdin.close()
                try:
                    receiver.wait(10)
                except subprocess.TimeoutExpired:
                    receiver.kill()
                    receiver.wait()
            expected = np.random.default_rng(8).standard_normal(TENSOR_LEN).astype(np.float32)
            assert np.array_equal(np.load(out), expected)
            sprayed = delta(ecmp_counts(fab.description_path, leaf), before)
            total = sum(sprayed.values())
            assert total >= TENSOR_LEN // 360
            assert min(sprayed.values()) >= 0.2 * total, sprayed  # both spines carried a share

            # One TCP flow from h2 to h4 (l1 to l2): all its packets on one spine.
            before = ecmp_counts(fab.description_path, leaf)
            sink = run_in(h4, TCP_SINK, "5201")
            wait_line(sink, "ready")
            source = run_in(h2, TCP_SOURCE, h4.IP(), "5201", str(200_000))
            assert source.wait(60) == 0
            assert int(wait_line(sink, "", timeout=30)) == 200_000
            flow = delta(ecmp_counts(fab.description_path, leaf), before)
            assert max(flow.values()) >= 100 and min(flow.values()) == 0, flow

            # The CLI's own commands, as a --no-cli scenario runs them.
            scenario = tmp_path / "scenario.txt"
            scenario.write_text(f"counters {leaf}\npolicy show\n")
            capfd.readouterr()
            run_scenario(fab, scenario)
            shown = capfd.readouterr().out
            assert "spraying balance" in shown and leaf in shown
            assert "DlcpIngress.spray_mode hdr.dlcp.job_id=1 -> DlcpIngress.spray_random()" in shown
    finally:
        cleanup.stop_fabric(tmp_path / "build")
    assert leftovers(prefix) == []
    assert switches and not any(p.alive() for p in switches)
    assert hosts and not any(cleanup.pids_in_netns(p.netns, p.netns_iface) for p in hosts if p.netns)
    shells = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert f"mininet:{prefix}" not in shells
