"""Errors of the host agents."""

from gradfabric.errors import GradfabricError


class HostError(GradfabricError):
    """A host agent failure a user can act on."""


class TransportError(HostError):
    """A message could not be packed, sent or completed."""


class ModelError(HostError):
    """A model description (trace CSV or tensor source) is unusable."""
