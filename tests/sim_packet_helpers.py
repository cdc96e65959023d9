"""Shared by the packet-simulation tests: DLCP messages h1 -> h2 on a built network, run in ns-3."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def dlcp_completions(ns3: tuple[Any, Any], net: Any, messages: int, probe_s: float,
                     setup: Callable[[Any], None] = lambda _sender: None) -> list[float]:
    """Queue ``messages`` 720-value (two-packet) DLCP messages h1 -> h2 at t = 0 (after
    ``setup(sender)``), run ns-3 for a simulated second and destroy it; the messages'
    completion times at h2 (seconds)."""
    ns, gf = ns3
    sender = gf.DlcpEndpoint(net.nodes["h1"], 40000, 16, 10.0, 64.0, 0.001, probe_s)
    receiver = gf.DlcpEndpoint(net.nodes["h2"], 40000, 16, 10.0, 64.0, 0.001, probe_s)
    done: list[float] = []

    def received(src: int, msg: int, values: int, lost: int) -> None:
        done.append(float(gf.NowSeconds()))

    receiver.onReceived = received
    setup(sender)
    dst = net.address("h2")

    def send() -> None:  # from inside the run (ns-3 sets its nodes up when it starts); kept alive here
        for msg in range(1, messages + 1):
            sender.Send(msg, dst, 720, 0, 0, 0.0, 0.0)

    gf.ScheduleCall(0.0, send)
    ns.Simulator.Stop(ns.Seconds(1))
    ns.Simulator.Run()
    ns.Simulator.Destroy()
    return done
