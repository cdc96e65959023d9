"""Ports the launcher gives its switches."""

from __future__ import annotations

from pathlib import Path

import pytest


def test_switches_get_distinct_ports_outside_the_ephemeral_range_even_when_draws_repeat(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ports are chosen while all are held (draws that repeat move on) and below the range
    outgoing connections take theirs from."""
    from mininet_topos import launcher

    bound: set[int] = set()

    class FakeSocket:
        """Refuses a port an open socket holds, as the kernel does."""
        def __init__(self, *_args: object) -> None:
            self.port = 0

        def bind(self, addr: tuple[str, int]) -> None:
            if addr[1] in bound:
                raise OSError(98, "Address already in use")
            self.port = addr[1]
            bound.add(self.port)

        def getsockname(self) -> tuple[str, int]:
            return ("127.0.0.1", self.port)

        def close(self) -> None:
            bound.discard(self.port)

    class RepeatingDraws:
        """Every port drawn twice: 25000, 25000, 25001, 25001, ..."""
        def __init__(self) -> None:
            self.n = 0

        def randrange(self, low: int, high: int) -> int:
            assert high <= 32768
            self.n += 1
            return 25000 + (self.n - 1) // 2

    monkeypatch.setattr(launcher.socket, "socket", FakeSocket)
    monkeypatch.setattr(launcher.random, "Random", RepeatingDraws)
    monkeypatch.setattr(launcher, "_ephemeral_low", lambda: 32768)
    fabric = launcher.Fabric(launcher.LaunchOptions(topo="fattree", target="bmv2", workdir=tmp_path))
    configs = fabric.switch_configs()
    ports = [c.grpc_port for c in configs.values()] + [c.thrift_port for c in configs.values()]
    assert len(configs) == 20
    assert sorted(ports) == list(range(25000, 25040))
    assert not bound
