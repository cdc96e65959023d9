"""The simulator's error type."""

from gradfabric.errors import GradfabricError


class SimulatorError(GradfabricError):
    """Bad simulator input (trace, fit data, cluster) or a scheduler that stalls."""
