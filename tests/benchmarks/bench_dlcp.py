"""The DLCP program on the embedded pipeline: spraying balance, priority under a burst, cost.

Figures (each against a baseline measured in the same run):
- busiest ECMP member's share of one elephant DLCP flow over 4 members, random and
  round-robin spraying against the per-flow hash (1.0 is a perfect split, 4.0 one path);
- completion time of the front-layer gradients of a burst through a rate-limited port,
  with the layer-priority and threshold policy against the same burst without it;
- DLCP packets per second through the full policy against plain UDP through the same
  program (the cost of the DLCP tables on the embedded target).
"""

from __future__ import annotations

import time
from collections import Counter

from p4switch.frontend import load_program
from p4switch.pipeline import Pipeline
from tests.benchmarks.figure import Figure
from tests.test_dlcp_e2e import FRONT_TENSOR, OUT_PORT, burst, install_policy
from tests.test_dlcp_e2e import run as run_burst
from tests.test_dlcp_pipeline import PROGRAM, DlcpSwitch, dlcp_frame, udp_frame

MEMBERS = [2, 3, 4, 5]
ELEPHANT_PACKETS = 2000
THROUGHPUT_PACKETS = 3000


def _busiest_share(switch: DlcpSwitch, mode: str | None) -> float:
    switch.group("10.0.2.0", 24, 7, MEMBERS)
    if mode:
        switch.spray(1, mode)
    load: Counter[int] = Counter()
    for seq in range(ELEPHANT_PACKETS):
        for port, _ in switch.send(dlcp_frame(job=1, seq=seq)):
            load[port] += 1
    return max(load.values()) / (ELEPHANT_PACKETS / len(MEMBERS))


def _front_completion_us(switch: DlcpSwitch, policy: bool) -> float:
    switch.route("10.0.2.0", 24, OUT_PORT)
    if policy:
        install_policy(switch)
    packets = burst()
    front = {p.seq for p in packets if p.tensor == FRONT_TENSOR}
    outcomes, _ = run_burst(switch, packets)
    return float(max(o.time_us for o in outcomes if o.seq in front))


def _packets_per_second(switch: DlcpSwitch, frames: list[bytes]) -> float:
    start = time.perf_counter()
    for frame in frames:
        switch.send(frame)
    return len(frames) / (time.perf_counter() - start)


def run() -> list[Figure]:
    program = load_program(PROGRAM)

    def fresh() -> DlcpSwitch:
        return DlcpSwitch(Pipeline(program))

    flow_hash = _busiest_share(fresh(), None)
    random_spray = _busiest_share(fresh(), "spray_random")
    round_robin = _busiest_share(fresh(), "spray_round_robin")

    fifo = _front_completion_us(fresh(), policy=False)
    prioritised = _front_completion_us(fresh(), policy=True)

    plain = fresh()
    plain.route("10.0.2.0", 24, 2)
    udp_rate = _packets_per_second(plain, [udp_frame(ident=i) for i in range(THROUGHPUT_PACKETS)])
    full = fresh()
    full.route("10.0.2.0", 24, 2)
    install_policy(full)
    full.spray(1, "spray_random")
    dlcp_rate = _packets_per_second(
        full, [dlcp_frame(job=1, tensor=i % 40, mag=100 + i % 60, eligible=True, seq=i)
               for i in range(THROUGHPUT_PACKETS)])

    return [
        Figure("dlcp random spraying: busiest member / even share", random_spray,
               "per-flow hash", flow_hash, "x", higher_is_better=False),
        Figure("dlcp round-robin spraying: busiest member / even share", round_robin,
               "per-flow hash", flow_hash, "x", higher_is_better=False),
        Figure("dlcp front-layer burst completion, layer priority", prioritised,
               "same burst, FIFO", fifo, "us (virtual)", higher_is_better=False),
        Figure("dlcp program, DLCP packets with full policy", dlcp_rate,
               "same program, plain UDP", udp_rate, "pkt/s"),
    ]
