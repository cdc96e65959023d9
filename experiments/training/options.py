"""What a configuration of the experiment changes on the hosts (kept free of heavy imports).

The gradient scheduler (``wfbp``: one message per layer as it is ready, nothing
drop-eligible; ``dlcp``: front layers first, small-magnitude packets drop-eligible within
the bound) and the loss bounds (0: everything is retransmitted).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class TransportOptions:
    """How gradients and parameters travel (see the module doc)."""

    scheduler: str = "dlcp"
    grad_bound: float = 0.10  # DLCP's evaluation bound on lost gradient values
    param_bound: float = 0.002
    front_loss_bound: float = 0.10  # dlcp scheduler: drop-eligible share of front layers
    back_loss_bound: float = 0.05
    job_id: int = 1
    rate_pps: float = 50_000.0
    timeout_s: float = 60.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TransportOptions:
        return cls(**data)

    def scheduler_options(self) -> dict[str, Any]:
        if self.scheduler == "dlcp":
            return {"front_loss_bound": self.front_loss_bound, "back_loss_bound": self.back_loss_bound}
        return {}
