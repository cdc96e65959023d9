"""``p4switch run`` as a process: readiness, run-time queue control, pcaps, logs, SIGTERM."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc
import pytest
from google.protobuf import text_format
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

from p4switch.errors import P4SwitchError
from p4switch.ports import PortSpec
from p4switch.run_commands import parse_port_setting, parse_queue_setting, parse_queue_target
from p4switch.server import control
from tests.netns import Lab, accepts_connections, free_port


def wait_ready(address: str, proc: subprocess.Popen[str], log: Path, timeout: float = 20) -> None:
    """Until the gRPC port accepts connections (or the process died, with its log)."""
    host, port = address.rsplit(":", 1)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"switch exited with {proc.returncode}:\n{_tail(log)}\n{proc.stderr.read() if proc.stderr else ''}")
        if accepts_connections(host, int(port)):
            return
        time.sleep(0.05)
    raise AssertionError(f"switch not ready after {timeout}s:\n{_tail(log)}")


def _tail(path: Path) -> str:
    return path.read_text()[-3000:] if path.exists() else "(no log)"


@contextmanager
def switch_process(args: list[str], log: Path, *,
                   ready_timeout: float = 20) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """A running ``p4switch run``; SIGTERM and a checked exit afterwards, kill as a last resort."""
    address = f"127.0.0.1:{free_port()}"
    cmd = [sys.executable, "-m", "p4switch.cli", "run", *args, "--grpc-server-addr", address,
           "--log-file", str(log)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_ready(address, proc, log, ready_timeout)
        yield proc, address
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if proc.stdout:
            proc.stdout.close()
        if proc.stderr:
            proc.stderr.close()


def ctl(address: str, *args: str) -> dict:
    proc = subprocess.run([sys.executable, "-m", "p4switch.cli", "ctl", "--grpc-server-addr", address, *args],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_queue_setting_syntax() -> None:
    assert parse_queue_setting("3:7=10Mbps") == (3, 7, "10Mbps")
    assert parse_queue_setting("2=64") == (2, None, "64")
    assert parse_queue_target("4:1") == (4, 1)
    assert parse_port_setting("5=2kpps") == (5, "2kpps")
    with pytest.raises(P4SwitchError):
        parse_port_setting("5:1=2kpps")
    with pytest.raises(P4SwitchError):
        parse_queue_setting("port2=64")
    assert PortSpec.parse("3@veth-s1.3") == PortSpec(3, "veth-s1.3")
    for bad in ("veth1", "511@eth0", "1@" + "x" * 16):
        with pytest.raises(P4SwitchError):
            PortSpec.parse(bad)


def test_run_needs_a_program_or_no_p4() -> None:
    proc = subprocess.run([sys.executable, "-m", "p4switch.cli", "run"], capture_output=True, text=True,
                          timeout=30)
    assert proc.returncode != 0 and "--no-p4" in proc.stderr


@pytest.mark.netns
def test_switch_process_lifecycle_ctl_pcap_and_logs(lab: Lab, tmp_path: Path) -> None:
    host, outer = lab.add_host(1, "10.0.9.1")
    log, rlog, pcaps = tmp_path / "s.log", tmp_path / "p4rt.log", tmp_path / "pcaps"
    args = ["--no-p4", "-i", f"1@{outer}", "--device-id", "3", "--priority-queues", "4",
            "--pcap", str(pcaps), "--p4runtime-log", str(rlog), "--queue-rate", "1=1000pps",
            "--queue-depth", "1:3=16", "--port-rate", "1=2000pps"]
    with switch_process(args, log) as (proc, address):
        with grpc.insecure_channel(address) as channel:
            stub = p4runtime_pb2_grpc.P4RuntimeStub(channel)
            assert stub.Capabilities(p4runtime_pb2.CapabilitiesRequest()).p4runtime_api_version
        shown = control.call(address, "ShowQueues", {"port": 1})["1"]
        # --queue-rate PORT=R gives R to each priority queue (BMv2); --port-rate is the port's own.
        assert shown["port_rate"] == "2000pps"
        assert [q["rate"] for q in shown["queues"]] == ["1000pps"] * 4
        assert [q["depth"] for q in shown["queues"]] == [64, 64, 64, 16]
        changed = ctl(address, "set_queue_rate", "1:2", "5Mbps")  # the command line, once
        assert [q["rate"] for q in changed["queues"]] == ["1000pps", "1000pps", "5e+06bps", "1000pps"]
        changed = ctl(address, "set_port_rate", "1", "none")
        assert changed["port_rate"] == "none" and changed["queues"][0]["rate"] == "1000pps"
        changed = control.call(address, "SetQueueDepth", {"port": 1, "priority": None, "depth": 8})
        assert [q["depth"] for q in changed["queues"]] == [8, 8, 8, 8]
        with pytest.raises(P4SwitchError, match="out of range"):
            control.call(address, "SetQueueDepth", {"port": 1, "priority": 4, "depth": 8})
        # Frames arrive (garbage included) while no pipeline is installed: counted, not fatal.
        frame = bytes.fromhex("ffffffffffff") + bytes.fromhex(host.mac.replace(":", "")) + b"\x08\x00" + b"\x00" * 3
        _send_raw(host.ns, host.iface, frame)
        deadline = time.monotonic() + 10
        while control.call(address, "Stats", {})["packets"].get("no_pipeline", 0) < 1 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert control.call(address, "Stats", {})["packets"]["no_pipeline"] >= 1
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    text = log.read_text()
    assert "ready" in text and "stopped" in text
    assert "/p4.v1.P4Runtime/Capabilities" in rlog.read_text()
    pcap_in = pcaps / f"{outer}_in.pcap"
    assert (pcaps / f"{outer}_out.pcap").exists()
    from scapy.utils import rdpcap

    assert frame in [bytes(p) for p in rdpcap(str(pcap_in))]  # beside the host's IPv6 chatter


ROUTER = Path(__file__).parent / "p4programs" / "ipv4_router.p4"


def _installed_p4info(address: str, device_id: int) -> p4info_pb2.P4Info:
    with grpc.insecure_channel(address) as channel:
        stub = p4runtime_pb2_grpc.P4RuntimeStub(channel)
        request = p4runtime_pb2.GetForwardingPipelineConfigRequest(device_id=device_id)
        return stub.GetForwardingPipelineConfig(request).config.p4info


def test_program_on_the_command_line_is_installed_before_the_port_opens(tmp_path: Path) -> None:
    with switch_process([str(ROUTER), "--device-id", "2"], tmp_path / "s.log") as (_, address):
        p4info = _installed_p4info(address, 2)
    assert [t.preamble.name for t in p4info.tables] == ["MyIngress.ipv4_lpm"]


def test_device_config_with_p4info_on_the_command_line(tmp_path: Path) -> None:
    from p4switch.device_config import write_device_config
    from p4switch.frontend import load_program
    from p4switch.p4info import build_p4info

    program = load_program(ROUTER)
    write_device_config(program, tmp_path / "router.json")
    (tmp_path / "router.p4info.txtpb").write_text(text_format.MessageToString(build_p4info(program)))
    args = [str(tmp_path / "router.json"), "--p4info", str(tmp_path / "router.p4info.txtpb"), "--device-id", "4"]
    with switch_process(args, tmp_path / "s.log") as (_, address):
        assert _installed_p4info(address, 4) == build_p4info(program)
    proc = subprocess.run([sys.executable, "-m", "p4switch.cli", "run", str(tmp_path / "router.json")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--p4info" in proc.stderr


@pytest.mark.netns
def test_bad_interface_fails_with_a_message(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "p4switch.cli", "run", "--no-p4", "-i", "1@gftnosuchif0",
         "--grpc-server-addr", f"127.0.0.1:{free_port()}", "--log-file", str(tmp_path / "s.log")],
        capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2
    assert "gftnosuchif0" in proc.stderr


def _send_raw(ns: str, iface: str, frame: bytes) -> None:
    code = (f"import socket; s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW); "
            f"s.bind(({iface!r}, 0)); s.send(bytes.fromhex({frame.hex()!r}))")
    subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", code], check=True, timeout=30)


def test_second_switch_on_a_taken_port_fails_cleanly(tmp_path: Path) -> None:
    with switch_process(["--no-p4"], tmp_path / "first.log") as (_, address):
        proc = subprocess.run(
            [sys.executable, "-m", "p4switch.cli", "run", "--no-p4", "--grpc-server-addr", address,
             "--log-file", str(tmp_path / "second.log")], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2 and f"cannot listen on {address}" in proc.stderr
        with grpc.insecure_channel(address) as channel:  # the first switch still serves
            stub = p4runtime_pb2_grpc.P4RuntimeStub(channel)
            assert stub.Capabilities(p4runtime_pb2.CapabilitiesRequest()).p4runtime_api_version == "1.4.1"
