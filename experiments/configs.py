"""The configurations of the training experiment: how the job communicates, and the switch policy.

Every configuration trains the same DDP job (:mod:`experiments.training.ddp_worker`); only
the communication differs. The switch policy knobs are those of ``controller/policy.py``:
layer priorities, magnitude/queue thresholds (dropping), spraying.

==========  ==============  ==============================  ==========  ========  ============
name        communication   queues (switch)                 dropping    ECMP      loss bound
==========  ==============  ==============================  ==========  ========  ============
gloo        DDP gloo (TCP)  one FIFO with the background    none        per flow  (TCP)
reliable    DDP + DLCP hook one FIFO with the background    none        per flow  0
qos         DDP + DLCP hook whole job one class above bg    none        per flow  0
priority    DDP + DLCP hook by layer (7, 6, 5), above bg    none        per flow  0
dropping    DDP + DLCP hook one FIFO with the background    magnitude   per flow  10% gradients
spraying    DDP + DLCP hook one FIFO with the background    none        per pkt   0
dlcp        DDP + DLCP hook by layer (7, 6, 5), above bg    magnitude   per pkt   10% gradients
==========  ==============  ==============================  ==========  ========  ============

Background traffic is not DLCP and always goes to queue 0.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from experiments.errors import ExperimentError

#: Layer rules with per-layer priority: the CNN's first conv layer (tensors 0-1) most
#: urgent, the other conv layers next, the fully connected layers after; all above 0.
LAYER_PRIORITIES = [{"tensors": "0..1", "priority": 7}, {"tensors": "2..5", "priority": 6},
                    {"tensors": "6..65535", "priority": 5}]
#: QoS isolation: the whole job one class above the background, nothing else.
JOB_CLASS = [{"tensors": "0..65535", "priority": 5}]
ONE_QUEUE = [{"tensors": "0..65535", "priority": 0}]
#: Drop drop-eligible packets of magnitude class below MAG_THRESHOLD (2^(t-128)) in ingress
#: once the queue they would join holds QUEUE_THRESHOLD packets: half of its 32 packets (the
#: experiment fabric's queue depth). The depth is the packet's own priority queue (BMv2's
#: model), so a full background queue beside it does not count. ECN marks from the same depth.
MAG_THRESHOLD = 124
QUEUE_THRESHOLD = 16
#: DLCP's evaluation bound on lost gradient values (reduce stage); the gather stage carries
#: averaged values and stays reliable.
GRAD_BOUND = 0.10


@dataclass(frozen=True)
class Configuration:
    name: str
    description: str
    comm: str  # "gloo" or "dlcp"
    queues: str  # "fifo", "job" (one class above background) or "layer"
    dropping: bool = False
    spraying: bool = False
    ecn: bool = False  # ECN marks (the sender cuts its rate on the echo): a knob of its own

    @property
    def grad_bound(self) -> float:
        return GRAD_BOUND if self.dropping else 0.0

    def policy(self, job_ids: Sequence[int]) -> dict[str, Any]:
        """The controller policy (YAML document) of this configuration for these jobs."""
        layers = {"fifo": ONE_QUEUE, "job": JOB_CLASS, "layer": LAYER_PRIORITIES}[self.queues]
        jobs = []
        for job_id in job_ids:
            job: dict[str, Any] = {"id": job_id, "name": f"training-{job_id}-{self.name}", "workers": [],
                                   "spraying": "random" if self.spraying else "off",
                                   "layers": copy.deepcopy(layers)}  # no YAML aliases
            if self.dropping:
                job["dropping"] = {"classes": [{"mag_class": f"0..{MAG_THRESHOLD - 1}",
                                                "queue_threshold": QUEUE_THRESHOLD}]}
            if self.ecn:
                job["ecn"] = {"queue_threshold": QUEUE_THRESHOLD}
            jobs.append(job)
        return {"version": 1, "default_priority": 0, "jobs": jobs}

    def write_policy(self, folder: Path, job_ids: Sequence[int]) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{self.name}.yaml"
        header = f"# Policy of the '{self.name}' configuration of `gradfabric experiment training`: {self.description}\n"
        path.write_text(header + yaml.safe_dump(self.policy(job_ids), sort_keys=False))
        return path


CONFIGURATIONS: tuple[Configuration, ...] = (
    Configuration("gloo", "PyTorch DDP over gloo (TCP), one FIFO with the background, per-flow ECMP: the reference",
                  "gloo", "fifo"),
    Configuration("reliable", "DDP with the DLCP hook, loss bound 0, one FIFO, per-flow ECMP", "dlcp", "fifo"),
    Configuration("qos", "QoS isolation: DLCP hook, loss bound 0, the whole job one class above the background",
                  "dlcp", "job"),
    Configuration("priority", "per-layer priority queues only (front layers first), loss bound 0", "dlcp", "layer"),
    Configuration("dropping", "magnitude-threshold dropping with a 10% gradient loss bound only", "dlcp", "fifo",
                  dropping=True),
    Configuration("spraying", "per-packet ECMP spraying only, loss bound 0", "dlcp", "fifo", spraying=True),
    Configuration("dlcp", "full DLCP: per-layer priority, bounded-loss dropping, ECN marks, per-packet spraying",
                  "dlcp", "layer", dropping=True, spraying=True, ecn=True),
)


def select(names: str | Sequence[str] | None) -> list[Configuration]:
    """Configurations by name (comma-separated or a list; None: all, in the table's order)."""
    if not names:
        return list(CONFIGURATIONS)
    known = {c.name: c for c in CONFIGURATIONS}
    wanted = names.split(",") if isinstance(names, str) else list(names)
    chosen = []
    for name in (n.strip() for n in wanted if n.strip()):
        if name not in known:
            raise ExperimentError(f"unknown configuration {name!r}; choose from {', '.join(known)}")
        chosen.append(known[name])
    return chosen
