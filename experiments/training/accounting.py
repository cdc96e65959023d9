"""What a trace rank's transfers carried and lost, per iteration (the ``iteration`` JSON lines
of :mod:`experiments.training.trace_worker`), and what reached its endpoint."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

#: Figures summed over iterations into the ``done`` line's ``totals``.
TOTALED = ("packets", "retransmitted", "lost", "reduced", "bytes", "gather_lost", "eligible", "eligible_elements",
           "missing", "unconfirmed", "reordered")


@dataclass
class IterationTotals:
    """One iteration's traffic. Receiving side: ``lost`` (reduce stage, zero-filled) and
    ``gather_lost``; sending side: data packets sent and re-sent, packets (and values) marked drop-eligible,
    ``missing`` (what the peer zero-filled of this rank's messages, as its answers showed) by
    magnitude class, of which ``unconfirmed`` (messages whose final answers did not come: the
    peer zero-filled at most these), and
    ``reordered`` (shown missing, then arrived without a resend: late, not lost)."""

    packets: int = 0
    retransmitted: int = 0
    lost: int = 0
    reduced: int = 0
    bytes: int = 0
    gather_lost: int = 0
    eligible: int = 0
    eligible_elements: int = 0
    missing: int = 0
    unconfirmed: int = 0
    reordered: int = 0
    lost_by_tensor: dict[int, int] = field(default_factory=dict)
    missing_by_class: dict[int, int] = field(default_factory=dict)

    def add_ring(self, report: Any, tensor_id: int) -> None:
        """A ring all-reduce's report (DLCP's :class:`hosts.ring.RingReport` or a TCP one)."""
        self.lost += report.lost_elements
        self.reduced += report.received_elements
        self.bytes += int(getattr(report, "bytes", 0))
        self.gather_lost += int(getattr(report, "gather_lost", 0))
        for s in report.sends:
            self.add_send(s)
        if report.lost_elements:
            self.lost_by_tensor[tensor_id] = self.lost_by_tensor.get(tensor_id, 0) + report.lost_elements

    def add_send(self, s: Any) -> None:
        """One message sent (a :class:`hosts.send_state.SendReport`): a ring step or a push to a
        parameter server, whose ``missing`` is what the server zero-filled of it."""
        self.packets += s.packets
        self.retransmitted += s.retransmitted
        self.bytes += s.payload_bytes
        self.eligible += s.eligible
        self.eligible_elements += s.eligible_elements
        self.missing += s.missing
        self.unconfirmed += s.unconfirmed
        self.reordered += s.reordered
        for c, n in s.lost_by_class.items():
            self.missing_by_class[c] = self.missing_by_class.get(c, 0) + n

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for name in ("lost_by_tensor", "missing_by_class"):
            out[name] = {str(k): v for k, v in sorted(out[name].items())}
        return out


def received(closers: list[Any]) -> dict[str, Any]:
    """Data packets that reached the DLCP endpoint among `closers` (late ones included: they
    came after their message was complete), the late ones, the probes received and those the
    C receive path answered (hosts/answers.c), the window's cuts; for a TCP mesh instead, the
    congestion control each of its sockets ran (``tcp_congestion``: peer rank to name); else empty."""
    from experiments.training.tcp_collectives import TcpMesh
    from hosts.endpoint import Endpoint

    for c in closers:
        if isinstance(c, TcpMesh):
            return {"tcp_congestion": c.congestion_used()}
        if isinstance(c, Endpoint):
            stats = c.reassembler.stats
            late = stats.drops.get("late", 0)
            return {"received_packets": stats.data_packets + late, "late_packets": late,
                    "probes_received": stats.probes, "probes_answered_in_c": stats.answered_in_c,
                    # the window's cuts standing, taken back (reordering) and deferred to a confirmation
                    "window_cuts": c.window.decreases, "window_cuts_undone": c.window.undone,
                    "window_cuts_deferred": c.window.deferred}
    return {}
