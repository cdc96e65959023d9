"""hosts.netdev: the egress device of a route and its UDP segmentation feature."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from hosts import netdev

HEADER = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"


def _table(tmp_path: Path, rows: list[str]) -> str:
    path = tmp_path / "route"
    path.write_text(HEADER + "".join(r + "\n" for r in rows))
    return str(path)


def test_route_device_takes_the_longest_prefix_then_the_least_metric(tmp_path: Path) -> None:
    # /proc/net/route writes addresses little-endian: 10.0.3.0 is 0003000A, 255.255.255.0 is 00FFFFFF
    table = _table(tmp_path, [
        "eth0\t00000000\t0100000A\t0003\t0\t0\t0\t00000000\t0\t0\t0",  # default via 10.0.0.1
        "veth1\t0000000A\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0",  # 10.0.0.0/16
        "veth2\t0003000A\t00000000\t0001\t0\t0\t5\t00FFFFFF\t0\t0\t0",  # 10.0.3.0/24 metric 5
        "veth3\t0003000A\t00000000\t0001\t0\t0\t1\t00FFFFFF\t0\t0\t0",  # 10.0.3.0/24 metric 1
        "veth4\t0004000A\t00000000\t0000\t0\t0\t0\t00FFFFFF\t0\t0\t0",  # 10.0.4.0/24, not up
    ])
    assert netdev.route_device("10.0.3.7", table) == "veth3"
    assert netdev.route_device("10.0.4.7", table) == "veth1"
    assert netdev.route_device("10.0.9.9", table) == "veth1"
    assert netdev.route_device("192.168.1.1", table) == "eth0"
    assert netdev.route_device("10.0.3.7", str(tmp_path / "missing")) is None


def test_route_device_without_a_matching_route_is_none(tmp_path: Path) -> None:
    table = _table(tmp_path, ["veth1\t0000000A\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0"])
    assert netdev.route_device("192.168.1.1", table) is None


def test_device_feature_agrees_with_ethtool() -> None:
    if shutil.which("ethtool") is None:
        pytest.skip("ethtool not installed: nothing to compare with")
    out = subprocess.run(["ethtool", "-k", "lo"], capture_output=True, text=True, check=False).stdout
    shown = {}
    for line in out.splitlines():
        name, _, state = line.strip().partition(": ")
        if state:
            shown[name] = state.split()[0] == "on"
    for name in ("tx-udp-segmentation", "tx-checksum-ip-generic", "tx-tcp-segmentation", "tx-scatter-gather"):
        if name in shown:
            assert netdev.device_feature("lo", name) is shown[name], name
    assert netdev.device_feature("lo", "no-such-feature") is None
    assert netdev.device_feature("no-such-device0") is None


def test_gso_can_be_turned_off_by_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    from hosts import fastpath

    nat = fastpath.native()
    if nat is None:
        pytest.skip("the C data path cannot be built here")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        assert fastpath.BatchSender(nat, sock).gso_ok
        monkeypatch.setenv("GRADFABRIC_UDP_GSO", "0")
        assert not fastpath.BatchSender(nat, sock).gso_ok
