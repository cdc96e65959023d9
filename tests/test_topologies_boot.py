"""Every shipped topology boots on the embedded target and routes every host pair.

Leaf-spine is covered in depth by tests/test_fabric_e2e.py; here the dumbbell and the
k=4 fat-tree (20 switches, 16 hosts) boot as `make run TOPO=...` boots them, get their
routes from the controller, and pass pingall with 0% loss.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from mininet_topos import cleanup
from mininet_topos.launcher import Fabric, LaunchOptions
from mininet_topos.programming import program_fabric
from tests import netns


@pytest.mark.netns
@pytest.mark.slow
@pytest.mark.parametrize(("topo", "switches", "hosts"), [("dumbbell", 2, 4), ("fattree", 20, 16)])
def test_topology_boots_and_every_pair_pings(tmp_path: Path, topo: str, switches: int, hosts: int) -> None:
    prefix = f"{netns.PREFIX}{uuid.uuid4().hex[:2]}"
    options = LaunchOptions(topo=topo, target="embedded", workdir=tmp_path, prefix=prefix, policy=None,
                            log_level="warn")
    try:
        with Fabric(options) as fab:
            assert fab.net is not None
            assert len([p for p in fab.state.processes if p.what.startswith("switch ")]) == switches
            assert len(fab.net.hosts) == hosts
            program_fabric(fab.description_path, None)
            # A missing route fails every round; a switch process starved of CPU on a loaded
            # machine can miss one ping, so a second round is allowed.
            loss = fab.net.pingAll(timeout=5)
            assert loss == 0 or fab.net.pingAll(timeout=5) == 0, f"pingall lost {loss:g}%, then again"
    finally:
        cleanup.stop_fabric(tmp_path / "build")
