"""The DLCP transport between two network namespaces, with the agent's `send` in one and its
`recv` in the other.

Loss, duplication and reordering come from ``tc netem`` on the sender's interface; on a
kernel built without netem the same impairment comes from the agent's `relay` running in
the receiver's namespace (the assertions do not change). A second test congests a real
kernel queue (``tc tbf``) so that the AIMD sender has to slow down.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from tests import netns

BOUND = 0.05
ELEMENTS = 36_100  # 100 packets of 361 values
AGENT = [sys.executable, "-m", "gradfabric.command.cli", "agent"]


def _two_hosts(lab: netns.Lab) -> tuple[netns.Host, netns.Host]:
    a, a_out = lab.add_host(1, "10.79.0.1")
    b, b_out = lab.add_host(2, "10.79.0.2")
    lab.add_bridge([a_out, b_out])
    return a, b


def _agent(ns: str, *args: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(["ip", "netns", "exec", ns, *AGENT, *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline() if proc.stdout else ""
    if not line:
        proc.kill()
        raise RuntimeError(f"agent {args[0]} did not start: {proc.communicate()[1]}")
    assert json.loads(line)["event"] == "listening"
    return proc


def _stop(*procs: subprocess.Popen[str]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _send(ns: str, dest: str, worker: int, messages: int, *extra: str) -> list[dict]:
    proc = netns.in_ns(ns, *AGENT, "send", "--to", dest, "--worker-id", str(worker), "--messages", str(messages),
                       "--elements", str(ELEMENTS), "--grad-bound", str(BOUND), "--timeout", "20", *extra,
                       timeout=150)
    return [json.loads(line) for line in proc.stdout.splitlines()][1:]


@contextmanager
def _impaired_path(a: netns.Host, b: netns.Host, port: int, loss: float) -> Iterator[str]:
    """Address to send to so that data packets cross `loss`, 5 % duplication and reordering."""
    netem = ["tc", "qdisc", "replace", "dev", a.iface, "root", "netem", "delay", "2ms",
             "reorder", "20%", "50%", "duplicate", "5%", "loss", f"{loss * 100:g}%"]
    if netns.in_ns(a.ns, *netem, check=False).returncode == 0:
        try:
            yield f"{b.ip}:19600"
        finally:
            netns.in_ns(a.ns, "tc", "qdisc", "del", "dev", a.iface, "root", check=False)
        return
    relay = _agent(b.ns, "relay", "--listen", f"{b.ip}:{port}", "--to", f"{b.ip}:19600", "--loss", str(loss),
                   "--duplicate", "0.05", "--reorder", "8", "--seed", str(port), "--seconds", "120")
    try:
        yield f"{b.ip}:{port}"
    finally:
        _stop(relay)


@pytest.mark.netns
def test_bounded_loss_transport_through_loss_duplication_and_reordering(lab: netns.Lab) -> None:
    a, b = _two_hosts(lab)
    per_phase = 15
    recv = _agent(b.ns, "recv", "--bind", f"{b.ip}:19600", "--messages", str(2 * per_phase),
                  "--grad-bound", str(BOUND), "--linger", "0.5", "--timeout", "60")
    try:
        with _impaired_path(a, b, 19601, 0.03) as dest:
            low = _send(a.ns, dest, 1, per_phase)
        with _impaired_path(a, b, 19602, 0.25) as dest:
            high = _send(a.ns, dest, 2, per_phase)
        out, err = recv.communicate(timeout=120)
        assert recv.returncode == 0, err
    finally:
        _stop(recv)
    records = [json.loads(line) for line in out.splitlines()]
    received = [r for r in records if r["event"] == "received"]
    stats = next(r for r in records if r["event"] == "stats")

    assert len(received) == 2 * per_phase
    assert all(r["wrong"] == 0 for r in received)  # every value is what was sent, or zero
    assert all(r["zero_filled"] <= BOUND * ELEMENTS for r in received)
    # 3 % loss: messages complete without retransmission, with lost values zero-filled
    assert any(s["rounds"] == 0 and s["missing"] > 0 for s in low)
    assert any(r["zero_filled"] > 0 for r in received if r["worker"] == 1)
    # 25 % loss: above the bound, so the sender retransmits until the loss is under it
    assert all(s["retransmissions"] > 0 and s["missing"] <= BOUND * ELEMENTS for s in high)
    assert stats["duplicates"] > 0


@pytest.mark.netns
def test_aimd_slows_down_on_a_congested_kernel_queue(lab: netns.Lab) -> None:
    a, b = _two_hosts(lab)
    # 20 Mbit/s with a 30 kB queue: the sender's first bursts overflow it
    netns.in_ns(a.ns, "tc", "qdisc", "add", "dev", a.iface, "root", "tbf", "rate", "20mbit",
                "burst", "16kb", "limit", "30kb")
    recv = _agent(b.ns, "recv", "--bind", f"{b.ip}:19600", "--messages", "6", "--grad-bound", str(BOUND),
                  "--linger", "0.3", "--timeout", "60")
    try:
        sent = _send(a.ns, f"{b.ip}:19600", 1, 6, "--rate", "40000")
        out, err = recv.communicate(timeout=120)
        assert recv.returncode == 0, err
    finally:
        _stop(recv)
    received = [json.loads(line) for line in out.splitlines() if '"received"' in line]
    assert len(received) == 6 and all(r["wrong"] == 0 and r["zero_filled"] <= BOUND * ELEMENTS for r in received)
    assert sent[-1]["window_cuts"] >= 1  # the queue overflowed in slow start: multiplicative decrease
    assert sent[-1]["srtt_ms"] is not None and sent[-1]["rate_pps"] < 40000  # paced by cwnd / SRTT
    # Slow start and the cut keep retransmissions a small share of what was sent.
    assert sum(s["retransmissions"] for s in sent) < 0.2 * sum(s["packets"] for s in sent)


@pytest.mark.netns
@pytest.mark.parametrize("offloads", ["on", "off"])
def test_frames_reaching_a_switch_port_fit_the_mtu(lab: netns.Lab, offloads: str) -> None:
    """The C data path batches with UDP GSO only where the kernel splits the datagram before
    the host's device: every frame that leaves a host's veth towards a switch (read here with
    AF_PACKET, as p4switch reads its ports) is at most 1500 bytes of IP plus the Ethernet header.
    Offloads on (a veth nobody tuned, which would pass a GSO datagram whole): no GSO. Offloads
    off (as the fabric leaves its hosts): GSO, segmented by the kernel at the veth."""
    import socket

    a, a_out = lab.add_host(1, "10.78.0.1")
    b, b_out = lab.add_host(2, "10.78.0.2")
    lab.add_bridge([a_out, b_out])
    netns.in_ns(a.ns, "ethtool", "-K", a.iface, "tx", offloads, check=False)
    probe = netns.in_ns(a.ns, sys.executable, "-c",
                        f"from hosts import netdev; print(netdev.splits_gso({b.ip!r}))").stdout.strip()
    offered = netns.in_ns(a.ns, "ethtool", "-k", a.iface, check=False).stdout
    if "tx-udp-segmentation: on" in offered:
        assert probe == "False"  # the veth would pass a GSO datagram whole
    elif "tx-udp-segmentation: off" in offered:
        assert probe == "True"  # the kernel segments before the veth
    else:
        pytest.skip(f"ethtool does not report tx-udp-segmentation on {a.iface}")
    capture = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))
    capture.setsockopt(socket.SOL_SOCKET, 33, 64 << 20)  # SO_RCVBUFFORCE: hold every frame
    capture.bind((a_out, 0))
    capture.settimeout(0.3)
    sizes: list[int] = []
    recv = _agent(b.ns, "recv", "--bind", f"{b.ip}:19600", "--messages", "3", "--grad-bound", "0",
                  "--linger", "0.3", "--timeout", "60")
    try:
        sender = subprocess.Popen(["ip", "netns", "exec", a.ns, *AGENT, "send", "--to", f"{b.ip}:19600",
                                   "--messages", "3", "--elements", "400000", "--grad-bound", "0",
                                   "--rate", "1000000", "--timeout", "30"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        while True:  # until the sender is done and the capture drained
            try:
                sizes.append(len(capture.recv(1 << 17)))
            except TimeoutError:
                if sender.poll() is not None:
                    break
        out, err = sender.communicate(timeout=60)
        assert sender.returncode == 0, err
        recv.communicate(timeout=60)
    finally:
        capture.close()
        _stop(recv)
    sent = [json.loads(line) for line in out.splitlines() if '"sent"' in line]
    assert len(sent) == 3
    assert max(sizes) <= 1514, f"a frame of {max(sizes)} bytes reached the switch port"
    assert len(sizes) >= sum(s["packets"] for s in sent)  # every data packet was seen, one frame each


_COMMODITY_SENDER = """
import sys
import numpy as np
from hosts.endpoint import Endpoint
from hosts.wire import MsgType
dest = (sys.argv[1], 19600)
with Endpoint(worker_id=1, host=sys.argv[2], marking="commodity",
              bounds={MsgType.GRADIENT: 0.05, MsgType.PARAMETER: 0.0}) as ep:
    for i, prio in enumerate((1, 4, 7)):
        values = np.random.default_rng(i).standard_normal(20_000, dtype=np.float32)
        ep.send(dest, values, iteration=i, prio_hint=prio)
print("sent", ep.fast)
"""


@pytest.mark.netns
@pytest.mark.parametrize("path", ["c", "python"])
def test_commodity_marking_sets_dscp_per_class_and_ecn_by_eligibility(lab: netns.Lab, path: str) -> None:
    """Marking mode ``commodity``, read off a host's veth: every data packet carries its
    priority class's DSCP, Not-ECT when drop-eligible and ECT(0) otherwise; probes carry the
    most urgent class's DSCP with ECT(0)."""
    import os
    import socket

    from hosts.marking import DEFAULT_DSCP

    a, a_out = lab.add_host(1, "10.77.0.1")
    b, b_out = lab.add_host(2, "10.77.0.2")
    lab.add_bridge([a_out, b_out])
    capture = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))
    capture.setsockopt(socket.SOL_SOCKET, 33, 16 << 20)
    capture.bind((a_out, 0))
    capture.settimeout(0.3)
    recv = _agent(b.ns, "recv", "--bind", f"{b.ip}:19600", "--messages", "3", "--grad-bound", "0.05",
                  "--linger", "0.3", "--timeout", "60")
    env = dict(os.environ, GRADFABRIC_FASTPATH="1" if path == "c" else "0")
    frames: list[bytes] = []
    try:
        sender = subprocess.Popen(["ip", "netns", "exec", a.ns, sys.executable, "-c", _COMMODITY_SENDER, b.ip, a.ip],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        while True:
            try:
                frames.append(capture.recv(1 << 16))
            except TimeoutError:
                if sender.poll() is not None:
                    break
        out, err = sender.communicate(timeout=60)
        assert sender.returncode == 0, err
        assert out.split() == ["sent", str(path == "c")]
        recv.communicate(timeout=60)
    finally:
        capture.close()
        _stop(recv)
    data = {"eligible": 0, "kept": 0}
    probes = 0
    for frame in frames:
        ihl = (frame[14] & 0x0F) * 4
        if frame[12:14] != b"\x08\x00" or frame[23] != 17 or int.from_bytes(frame[14 + ihl + 2:14 + ihl + 4], "big") != 19600:
            continue
        tos, dlcp = frame[15], frame[14 + ihl + 8:]
        kind, eligible, prio = dlcp[0] & 0x0F, dlcp[1] & 0x01, dlcp[23]
        if kind <= 1:
            assert tos >> 2 == DEFAULT_DSCP[prio], f"priority {prio} left with DSCP {tos >> 2}"
            assert tos & 3 == (0 if eligible else 2), f"eligible={eligible} left with ECN {tos & 3}"
            data["eligible" if eligible else "kept"] += 1
        elif kind == 2:
            assert tos == (DEFAULT_DSCP[7] << 2) | 2
            probes += 1
    assert data["eligible"] > 0 and data["kept"] > 0 and probes > 0, (data, probes, len(frames))
