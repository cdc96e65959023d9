"""A policy as a Linux tc script (hosts, or a Linux router's egress port).

One ``prio`` qdisc with 8 bands: queue priority p (7 most urgent) is band 7 - p (band 0 is
served first); unclassified traffic goes to queue 0's band. ``u32`` filters pick the band by
DSCP (``match ip dsfield (dscp << 2) 0xfc``: the ECN bits are masked off), and by protocol,
addresses and ports for classes that name them; the first class of the policy gets the first
filter priority. Each band with a step gets ``red ... ecn``: from the threshold on, ECN-capable
packets are marked and Not-ECT ones dropped (min = the threshold in bytes, max one packet more,
probability 1: the step the P4 program makes, on RED's average queue length).
"""

from __future__ import annotations

import ipaddress

from controller.policy import Policy
from controller.render import PACKET_BYTES, Rendered, checked_plan

BANDS = 8


def band(priority: int) -> int:
    """The prio band of a queue priority (band 0 is served first)."""
    return BANDS - 1 - priority


def tc_commands(policy: Policy, packet_bytes: int = PACKET_BYTES) -> tuple[list[str], list[str]]:
    """The tc argument lines (device ``$DEV``, bandwidth ``$RATE``) and notes."""
    plan = checked_plan(policy)
    notes: list[str] = []
    default_band = band(0)
    lines = [f'qdisc replace dev "$DEV" root handle 1: prio bands {BANDS} priomap '
             + " ".join([str(default_band)] * 16)]
    steps = [q for q in plan.queues if q.drop or q.ecn]
    for q in steps:
        low = q.queue_threshold * packet_bytes
        high = low + packet_bytes
        limit = max(4 * high, 64 * packet_bytes)
        burst = max(1, (2 * low + high) // (3 * packet_bytes))
        ecn = " ecn" if q.ecn else ""
        lines.append(f'qdisc replace dev "$DEV" parent 1:{band(q.priority) + 1} handle {10 + band(q.priority)}: '
                     f"red limit {limit} min {low} max {high} avpkt {packet_bytes} burst {burst} "
                     f'probability 1.0 bandwidth "$RATE"{ecn}')
        if q.ecn and not q.drop:
            notes.append(f"queue {q.priority}: red with ecn still drops Not-ECT packets at its threshold "
                         "(Linux RED cannot mark without dropping Not-ECT)")
    for index, c in enumerate(plan.classes, start=1):
        matches = []
        if c.dscp is not None:
            matches.append(f"match ip dsfield {c.dscp << 2:#04x} 0xfc")
        if c.protocol is not None:
            matches.append(f"match ip protocol {c.protocol} 0xff")
        for word, prefix in (("src", c.src), ("dst", c.dst)):
            if prefix is not None:
                matches.append(f"match ip {word} {ipaddress.IPv4Address(prefix[0])}/{prefix[1]}")
        for word, port in (("sport", c.src_port), ("dport", c.dst_port)):
            if port is not None:
                matches.append(f"match ip {word} {port} 0xffff")
        lines.append(f'filter add dev "$DEV" parent 1: protocol ip prio {index} u32 '
                     f"{' '.join(matches)} flowid 1:{band(c.priority) + 1}")
    return lines, notes


def render_linux(policy: Policy, packet_bytes: int = PACKET_BYTES) -> Rendered:
    """A POSIX shell script: ``sh script DEV [RATE]`` replaces DEV's root qdisc."""
    lines, notes = tc_commands(policy, packet_bytes)
    script = [
        "#!/bin/sh",
        "# Written by `gradfabric policy render --for linux`: strict-priority bands by DSCP, RED/ECN per band.",
        "# Usage: sh THIS_FILE DEV [RATE]   (RATE: the link's bandwidth for RED's idle time, default 1gbit)",
        "set -eu",
        'DEV="${1:?usage: $0 DEV [RATE]}"',
        'RATE="${2:-1gbit}"',
        "tc qdisc del dev \"$DEV\" root 2>/dev/null || true",
        *(f"tc {line}" for line in lines),
    ]
    return Rendered("\n".join(script) + "\n", notes)
