"""Errors of the experiments."""

from gradfabric.errors import GradfabricError


class ExperimentError(GradfabricError):
    """A training job or an experiment could not run; the message says what and where."""
