"""Switch-side figures of a run: DLCP drops by magnitude threshold and ECN marks of the job, and
the per-queue steps' early drops of Not-ECT packets and CE marks (traffic classes and the
commodity profile).

Read through the controller (P4Runtime counters) before and after a run; the difference is
the run's share. Queue overflow (tail drop) happens in the traffic manager, which no P4
counter sees: the transport's own count of lost packets covers it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from controller.counters import SwitchCounters, gather


@dataclass(frozen=True)
class SwitchFigures:
    magnitude_drops: int
    ecn_marks: int
    queue_red_drops: int = 0  # every queue of every switch: Not-ECT packets dropped early
    queue_ecn_marks: int = 0  # every queue of every switch: ECT packets marked CE
    sprayed_packets: int = 0  # DLCP packets sprayed per packet, every switch
    sprayed_members: int = 0  # (switch, ECMP group, member) cells that took a sprayed packet
    tx_by_priority: dict[int, int] = field(default_factory=dict)  # packets sent per priority queue, every port


def snapshot(description: Path, timeout_s: float = 10.0) -> dict[str, SwitchCounters]:
    """Every switch's counters now, the switches read at once (one thread each: a switch busy
    forwarding answers a read of thousands of cells slowly, and the switches are separate
    processes)."""
    from concurrent.futures import ThreadPoolExecutor

    from controller.fabric_controller import FabricController
    from controller.pipeline import Pipeline
    from gradfabric import fabric as fabric_file

    fabric = fabric_file.load(description)
    pipeline = Pipeline.load(fabric.path(fabric.program.p4info), fabric.path(fabric.program.device_config))
    controller = FabricController.for_fabric(fabric, pipeline, connect_timeout=timeout_s)
    try:
        for session in controller.sessions.values():
            session.load_pipeline = False
        with ThreadPoolExecutor(max_workers=max(1, len(controller.sessions))) as pool:
            reads = {name: pool.submit(gather, session) for name, session in controller.sessions.items()}
            return {name: read.result() for name, read in reads.items()}
    finally:
        controller.close()


def difference(before: dict[str, SwitchCounters], after: dict[str, SwitchCounters], job_id: int) -> SwitchFigures:
    drops = marks = red = queue_marks = sprayed = members = 0
    tx: dict[int, int] = {}
    for name, now in after.items():
        delta = now.minus(before.get(name, SwitchCounters()))
        drops += delta.drops.get("magnitude_threshold", (0, 0))[0]
        marks += delta.ecn_marks.get(job_id, (0, 0))[0]
        red += sum(packets for packets, _ in delta.queue_red.values())
        queue_marks += sum(packets for packets, _ in delta.queue_marks.values())
        sprayed += sum(packets for packets, _ in delta.sprayed.values())
        members += sum(1 for packets, _ in delta.sprayed.values() if packets > 0)
        for (_, prio), (packets, _) in delta.port_prio.items():
            tx[prio] = tx.get(prio, 0) + packets
    return SwitchFigures(magnitude_drops=drops, ecn_marks=marks, queue_red_drops=red, queue_ecn_marks=queue_marks,
                         sprayed_packets=sprayed, sprayed_members=members,
                         tx_by_priority={p: n for p, n in sorted(tx.items()) if n})
