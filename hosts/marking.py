"""How a host marks the IP header of its DLCP packets for the fabric.

Two modes:

* ``p4`` (default): every datagram leaves with DSCP 0 and ECN = ECT(0); the P4 switches
  read the DLCP header (priority hint, magnitude class, drop-eligible flag) themselves.
* ``commodity``: for switches that cannot parse DLCP but do DSCP classes and ECN/RED. Each
  data packet carries the DSCP of its priority class (``dscp``: priority hint 0..7 ->
  DSCP), ECN = ECT(0) when it must not be dropped (a congested queue marks it CE instead)
  and Not-ECT when it is drop-eligible (a congested queue drops it). Probes and bitmaps
  carry the most urgent class's DSCP with ECT(0). The TOS byte is set per packet (an
  ``IP_TOS`` control message on each datagram).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from hosts.errors import HostError

MODES = ("p4", "commodity")
NOT_ECT = 0x00
ECT0 = 0x02
#: Priority hint -> DSCP: class selectors CS0..CS5 (7 and 6 share CS5: CS6/CS7 are for
#: network control).
DEFAULT_DSCP: dict[int, int] = {0: 0, 1: 8, 2: 16, 3: 24, 4: 32, 5: 40, 6: 40, 7: 40}


@dataclass(frozen=True)
class Marking:
    """A marking mode and its DSCP per priority class (module doc)."""

    mode: str = "p4"
    dscp: Mapping[int, int] = field(default_factory=lambda: dict(DEFAULT_DSCP))

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise HostError(f"unknown marking mode {self.mode!r}; choose from {', '.join(MODES)}")
        bad = {k: v for k, v in self.dscp.items() if not (0 <= k <= 7 and 0 <= v <= 63)}
        if bad or set(self.dscp) != set(range(8)):
            raise HostError(f"marking: dscp must map every priority 0..7 to a DSCP 0..63, got {dict(self.dscp)}")

    @property
    def per_packet(self) -> bool:
        return self.mode == "commodity"

    def control_tos(self, ecn: bool = True) -> int:
        """The socket's TOS byte: probes, bitmaps (and every packet in ``p4`` mode)."""
        dscp = self.dscp[7] if self.per_packet else 0
        return (dscp << 2) | (ECT0 if ecn else NOT_ECT)

    def data_tos(self, prio: int, eligible: np.ndarray, ecn_capable: bool = True) -> np.ndarray | None:
        """The TOS byte of each data packet of a message (None: the socket's, ``p4``)."""
        if not self.per_packet:
            return None
        ecn = np.where(eligible | (not ecn_capable), NOT_ECT, ECT0).astype(np.uint8)
        return (np.uint8(self.dscp[max(0, min(7, prio))] << 2) | ecn).astype(np.uint8)


def parse_marking(text: str | Marking | None) -> Marking:
    """A :class:`Marking` from a mode name (or one already made; None: ``p4``)."""
    if isinstance(text, Marking):
        return text
    return Marking(mode=text or "p4")
