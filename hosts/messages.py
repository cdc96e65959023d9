"""What a DLCP message is: its key, its loss bound rule and what a receiver delivers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from hosts.wire import MsgType

#: Default loss bounds (fraction of a message's elements): parameters are aggregates and
#: get the stricter bound.
DEFAULT_BOUNDS: dict[MsgType, float] = {MsgType.GRADIENT: 0.01, MsgType.PARAMETER: 0.002}


class MessageKey(NamedTuple):
    """Identity of a message: (job, sender, iteration, tensor, kind of data)."""

    job_id: int
    worker_id: int
    iteration: int
    tensor_id: int
    kind: MsgType


def within_bound(missing: int, tensor_len: int, bound: float) -> bool:
    """True when `missing` of `tensor_len` elements is a tolerated loss (sender and receiver agree)."""
    return missing <= bound * tensor_len + 1e-9


@dataclass
class Delivered:
    """A completed message: values with lost ones zero-filled (or kept from before)."""

    key: MessageKey
    values: np.ndarray
    received: int
    source: tuple[str, int]
    #: indices of the values that never arrived (None: all did)
    lost: np.ndarray | None = None

    @property
    def loss_rate(self) -> float:
        return 1.0 - self.received / self.values.size if self.values.size else 0.0
