"""The configurations of the training experiment: a switch policy plus host transport options.

Each configuration is one DLCP mechanism set on or off, on the same fabric:

============  =================  ==================  =============  ==========================
name          queues (switch)    dropping (switch)   ECMP (switch)  hosts
============  =================  ==================  =============  ==========================
baseline      one queue (0)      none                per flow       WFBP order, all resent
priority      by layer (7/5/3)   none                per flow       front layers first, all resent
dropping      one queue (0)      magnitude threshold per flow       WFBP order, bounded loss
spraying      one queue (0)      none                per packet     WFBP order, all resent
dlcp          by layer (7/5/3)   magnitude threshold per packet     front first, bounded loss
============  =================  ==================  =============  ==========================

Background traffic is not DLCP and always goes to queue 0, so in the configurations with
one queue the job's packets share a FIFO with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from experiments.errors import ExperimentError
from experiments.training.options import TransportOptions

JOB_ID = 1

#: Layer rules of the prioritised configurations: the first layer's weight and bias
#: (tensors 0 and 1) most urgent, the next layer's next, any further ones after.
LAYER_PRIORITIES = [{"tensors": "0..1", "priority": 7}, {"tensors": "2..3", "priority": 6},
                    {"tensors": "4..65535", "priority": 5}]
ONE_QUEUE = [{"tensors": "0..65535", "priority": 0}]
#: Drop drop-eligible packets of magnitude class below MAG_THRESHOLD (2^(t-128)) in ingress
#: once the queue they would join holds QUEUE_THRESHOLD packets: half of its 32 packets (the
#: experiment fabric's queue depth). The depth is the packet's own priority queue (BMv2's
#: model), so a full background queue beside it does not count.
MAG_THRESHOLD = 124
QUEUE_THRESHOLD = 16

RELIABLE = dict(grad_bound=0.0, param_bound=0.0, front_loss_bound=0.0, back_loss_bound=0.0)
BOUNDED = dict(grad_bound=0.10, param_bound=0.002, front_loss_bound=0.10, back_loss_bound=0.05)


@dataclass(frozen=True)
class Configuration:
    name: str
    description: str
    priority: bool
    dropping: bool
    spraying: bool
    ecn: bool = False  # ECN marks (the sender's AIMD cuts its rate): a knob of its own

    def policy(self) -> dict[str, Any]:
        """The controller policy (YAML document) of this configuration."""
        job: dict[str, Any] = {
            "id": JOB_ID, "name": f"training-{self.name}", "workers": [],
            "spraying": "random" if self.spraying else "off",
            "layers": LAYER_PRIORITIES if self.priority else ONE_QUEUE,
        }
        if self.dropping:
            job["dropping"] = {"classes": [{"mag_class": f"0..{MAG_THRESHOLD - 1}", "queue_threshold": QUEUE_THRESHOLD}]}
        if self.ecn:
            job["ecn"] = {"queue_threshold": QUEUE_THRESHOLD}
        return {"version": 1, "default_priority": 0, "jobs": [job]}

    def transport(self, timeout_s: float) -> TransportOptions:
        """Host side: front-first order with the priorities, bounded loss with the dropping."""
        bounds = BOUNDED if self.dropping else RELIABLE
        return TransportOptions(scheduler="dlcp" if self.priority else "wfbp", job_id=JOB_ID,
                                timeout_s=timeout_s, **bounds)

    def write_policy(self, folder: Path) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{self.name}.yaml"
        header = f"# Policy of the '{self.name}' configuration of `gradfabric experiment training`: {self.description}\n"
        path.write_text(header + yaml.safe_dump(self.policy(), sort_keys=False))
        return path


CONFIGURATIONS: tuple[Configuration, ...] = (
    Configuration("baseline", "one queue, no dropping, per-flow ECMP, WFBP order, everything retransmitted",
                  priority=False, dropping=False, spraying=False),
    Configuration("priority", "priority queues by layer and front-first order only", True, False, False),
    Configuration("dropping", "magnitude-threshold dropping within the loss bound only", False, True, False),
    Configuration("spraying", "per-packet ECMP spraying only", False, False, True),
    Configuration("dlcp", "full DLCP: priority by layer, bounded-loss dropping, ECN marks, per-packet spraying",
                  True, True, True, ecn=True),
)


def select(names: str | None) -> list[Configuration]:
    """Configurations by comma-separated names (None: all, in the table's order)."""
    if not names:
        return list(CONFIGURATIONS)
    known = {c.name: c for c in CONFIGURATIONS}
    chosen = []
    for name in (n.strip() for n in names.split(",") if n.strip()):
        if name not in known:
            raise ExperimentError(f"unknown configuration {name!r}; choose from {', '.join(known)}")
        chosen.append(known[name])
    return chosen
