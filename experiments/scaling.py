"""One scaling rule from a real cluster's link to the emulated fabric.

The experiment names a real link rate (25 or 100 Gbit/s) and a job measured on real GPUs
(the H100 traces). The emulated fabric's ports are far slower (``port_pps`` full frames per
second), so the real job cannot run unchanged; what must be kept is who waits for whom:
the ratio of communication to computation, and of queueing delays to both. The rule:

* every byte count is divided by ``b`` (a tensor of ``n`` values becomes ``ceil(n / b)``);
* every time is multiplied by ``k`` (compute, timers);
* ``b * k = real capacity / emulated capacity``, so a transfer of ``n / b`` bytes on the
  emulated port takes ``k`` times what ``n`` bytes take on the real link, exactly as the
  compute does: communication-to-computation stays the real job's.

What follows from it, and is applied by the experiment: a switch buffer of ``B`` real
bytes is ``B / b`` emulated bytes (the same ``k``-times-longer queueing delay); thresholds
in queue depth likewise; TCP's ``rto_min``, the DLCP probe timers and reorder allowances are
times, so they are multiplied by ``k``. ``k`` is chosen for the machine: large enough that
the emulated compute (sleeps) and the transports' per-packet costs are small against the
iteration, small enough that runs stay short. The ratio the run achieved is measured
(communication time over computation time per iteration) and recorded beside the target.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from experiments.errors import ExperimentError
from experiments.scenarios import PORT_PPS
from hosts import endpoint

#: Bytes of one full frame on the emulated fabric (what ``port_pps`` counts).
FRAME_BYTES = 1500
#: Gradient payload of one full DLCP packet (361 float32 values).
PAYLOAD_BYTES = 361 * 4
#: Linux's default TCP ``rto_min`` (200 ms) and a tuned one for data centres (1 ms), real time.
LINUX_RTO_MIN_S = 0.200
TUNED_RTO_MIN_S = 0.001
#: A real data-centre switch's buffer per port (bytes): 1 MB (shallow-buffer 25/100G parts
#: share 16-32 MB over 32 ports).
REAL_BUFFER_BYTES = 1_000_000


@dataclass(frozen=True)
class ScaleRule:
    """``b`` (bytes divisor) and ``k`` (time multiplier) with ``b * k`` = real / emulated capacity."""

    real_gbps: float
    port_pps: float
    k: float

    def __post_init__(self) -> None:
        if self.real_gbps <= 0 or self.port_pps <= 0 or self.k <= 0:
            raise ExperimentError(f"scaling rule needs positive rates and k (got real {self.real_gbps} Gbit/s, "
                                  f"port {self.port_pps} packets/s, k {self.k})")
        if self.b < 1:
            raise ExperimentError(f"k = {self.k:g} is larger than the capacity ratio {self.capacity_ratio:.1f}: "
                                  "bytes would have to grow (b < 1)")

    @property
    def emulated_bps(self) -> float:
        return self.port_pps * FRAME_BYTES * 8

    @property
    def capacity_ratio(self) -> float:
        """Real link capacity over the emulated port's."""
        return self.real_gbps * 1e9 / self.emulated_bps

    @property
    def b(self) -> float:
        return self.capacity_ratio / self.k

    def numel(self, real_numel: int) -> int:
        """Values of a tensor on the emulated fabric (at least one)."""
        return max(1, math.ceil(real_numel / self.b))

    def seconds(self, real_s: float) -> float:
        return real_s * self.k

    def queue_packets(self, real_bytes: float = REAL_BUFFER_BYTES) -> int:
        """A real buffer of ``real_bytes`` as emulated full frames."""
        return max(1, round(real_bytes / self.b / FRAME_BYTES))

    def rto_min_s(self, real_s: float) -> float:
        return real_s * self.k

    def real_comm_s(self, real_bytes: float) -> float:
        """Time ``real_bytes`` take on the real link (gradient payload, full packets)."""
        return real_bytes * (FRAME_BYTES / PAYLOAD_BYTES) * 8 / (self.real_gbps * 1e9)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "b": self.b, "capacity_ratio": self.capacity_ratio,
                "emulated_mbps": self.emulated_bps / 1e6}

    def describe(self) -> str:
        return (f"scaling: real link {self.real_gbps:g} Gbit/s, emulated port {self.port_pps:g} packets/s "
                f"({self.emulated_bps / 1e6:.0f} Mbit/s): capacity ratio {self.capacity_ratio:.1f} = b x k with "
                f"b = {self.b:.2f} (bytes divided), k = {self.k:g} (times multiplied); a real 1 MB port buffer is "
                f"{self.queue_packets()} emulated packets, rto_min 200 ms -> {self.rto_min_s(LINUX_RTO_MIN_S) * 1e3:g} ms, "
                f"1 ms -> {self.rto_min_s(TUNED_RTO_MIN_S) * 1e3:g} ms")


#: The port rate and ``k`` the trace experiment's fabric and timers were set at
#: (experiments/topologies/leafspine8_training.yaml; experiments/README.md): b = 13.02 at 25 Gbit/s.
#: The port rate is the fabric's (experiments.scenarios.PORT_PPS); the trace worker defaults to both.
REFERENCE_PORT_PPS = float(PORT_PPS)
REFERENCE_K = 8.0


def port_rule(real_gbps: float, port_pps: float, k: float | None = None) -> ScaleRule:
    """The rule at another port rate: without `k`, ``b`` stays the reference's (the same bytes
    per rank and queues in packets) and ``k`` grows as the port slows; with `k`, ``b`` follows."""
    if k is None:
        b = ScaleRule(real_gbps, REFERENCE_PORT_PPS, REFERENCE_K).b
        k = round(ScaleRule(real_gbps, port_pps, 1.0).capacity_ratio / b, 9)
    return ScaleRule(real_gbps, port_pps, k)


def time_factor(k: float) -> float:
    """How much longer the transport's fixed timers are than at the reference ``k``."""
    return k / REFERENCE_K


#: The DLCP endpoint's fixed timers at the reference k, its defaults (hosts.endpoint, the one place
#: that sets them): the probe timer before the first RTT sample and the reorder allowance; a run at
#: another k scales them.
PROBE_TIMEOUT_S: float = endpoint.PROBE_TIMEOUT
REORDER_GRACE_S: float = endpoint.REORDER_GRACE


def transport_timers(k: float) -> dict[str, float]:
    """The endpoint's fixed timers (keyword arguments of hosts.endpoint.Endpoint) at `k`."""
    f = time_factor(k)
    return {"probe_timeout": PROBE_TIMEOUT_S * f, "reorder_grace": REORDER_GRACE_S * f}
