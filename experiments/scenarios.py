"""The contention scenarios of the training experiment: where the jobs run, what else runs.

The fabric (``topologies/leafspine_training.yaml``): two leaves, two spines, three hosts per
leaf (h1-h3 on l1, h4-h6 on l2); every switch port forwards 20,000 packets/s from a
32-packet queue per priority (module doc of ``experiments/README.md`` explains the scale).

* ``tcp``: a 2-rank ring (h1, h4) beside two long TCP flows into the job's host ports
  (h2->h4, h5->h1) and short request/response flows across the spines (h3 asks h6).
* ``udp``: the same with two unresponsive UDP flows at half a port's rate instead of TCP.
* ``multitenant``: two 2-rank jobs with the same configuration (job 1 h1-h4, job 2 h2-h5)
  sharing the leaf uplinks and spines, plus the request/response flows (h3 asks h6).
* ``incast``: a parameter server on h1 (star collective, rank 0) with three workers
  (h4, h5, h6) plus a long TCP flow h2->h1 into the server's port and request/response
  flows h3 asks h1. (DDP/gloo keeps its own ring all-reduce here: what users run.)
"""

from __future__ import annotations

from dataclasses import dataclass, field

from experiments.background import Flow
from experiments.errors import ExperimentError

#: The fabric's port rate and queue depth (topologies/leafspine_training.yaml).
PORT_PPS = 20_000
QUEUE_PACKETS = 32
UDP_DATAGRAM = 1200
#: UDP background at half a port: 10,000 datagrams/s of 1,200 bytes.
UDP_MBPS = PORT_PPS * 0.5 * UDP_DATAGRAM * 8 / 1e6
RR_RESPONSE = 8000  # bytes: about 6 full packets
RR_INTERVAL = 0.05  # s between requests


@dataclass(frozen=True)
class JobPlacement:
    job_id: int
    hosts: tuple[str, ...]  # rank order
    collective: str = "ring"  # DLCP hook: "ring" or "star"


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    jobs: tuple[JobPlacement, ...]
    background: tuple[Flow, ...] = field(default_factory=tuple)

    @property
    def job_ids(self) -> list[int]:
        return [j.job_id for j in self.jobs]


def _rr(client: str, server: str) -> Flow:
    return Flow(client, server, "rr", packet_bytes=RR_RESPONSE, interval_s=RR_INTERVAL)


SCENARIOS: dict[str, Scenario] = {s.name: s for s in (
    Scenario("tcp", "2-rank ring h1-h4; long TCP h2->h4 and h5->h1; request/response h3 asks h6",
             (JobPlacement(1, ("h1", "h4")),),
             (Flow("h2", "h4", "tcp"), Flow("h5", "h1", "tcp"), _rr("h3", "h6"))),
    Scenario("udp", f"2-rank ring h1-h4; UDP {UDP_MBPS:g} Mbit/s (half a port) h2->h4 and h5->h1; "
             "request/response h3 asks h6",
             (JobPlacement(1, ("h1", "h4")),),
             (Flow("h2", "h4", "udp", UDP_MBPS, UDP_DATAGRAM), Flow("h5", "h1", "udp", UDP_MBPS, UDP_DATAGRAM),
              _rr("h3", "h6"))),
    Scenario("multitenant", "two 2-rank rings, job 1 h1-h4 and job 2 h2-h5, same configuration; "
             "request/response h3 asks h6",
             (JobPlacement(1, ("h1", "h4")), JobPlacement(2, ("h2", "h5"))),
             (_rr("h3", "h6"),)),
    Scenario("incast", "parameter server h1 (rank 0 of a star) and workers h4, h5, h6; long TCP h2->h1; "
             "request/response h3 asks h1",
             (JobPlacement(1, ("h1", "h4", "h5", "h6"), collective="star"),),
             (Flow("h2", "h1", "tcp"), _rr("h3", "h1"))),
)}


def scenario(name: str) -> Scenario:
    if name not in SCENARIOS:
        raise ExperimentError(f"unknown scenario {name!r}; choose from {', '.join(SCENARIOS)}")
    return SCENARIOS[name]
