"""Errors of the host agents."""

from gradfabric.errors import GradfabricError


class HostError(GradfabricError):
    """A host agent failure a user can act on."""


class TransportError(HostError):
    """A message could not be packed, sent or completed."""


class ModelError(HostError):
    """A model description (trace CSV or tensor source) is unusable."""


class PeerGoneError(TransportError):
    """A peer of the job was silent (no datagram of any kind) for longer than allowed."""

    def __init__(self, message: str, peer: tuple[str, int]) -> None:
        super().__init__(message)
        self.peer = peer
