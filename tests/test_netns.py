"""The namespace helpers the end-to-end tests stand on: hosts reach each other and leave nothing behind."""

from __future__ import annotations

import pytest

from tests import netns


@pytest.mark.netns
def test_two_namespaces_over_a_root_bridge_ping_and_are_removed() -> None:
    with netns.lab() as lab:
        a, a_out = lab.add_host(1, "10.77.0.1")
        b, b_out = lab.add_host(2, "10.77.0.2")
        lab.add_bridge([a_out, b_out])
        ping = netns.in_ns(a.ns, "ping", "-c", "2", "-W", "2", "-i", "0.2", b.ip, check=False)
        assert ping.returncode == 0, ping.stdout + ping.stderr
        made = list(lab.namespaces)
    listed = netns.sh("ip", "netns", "list").stdout
    assert not any(ns in listed for ns in made)
    links = netns.sh("ip", "-o", "link").stdout
    assert lab.tag not in links
