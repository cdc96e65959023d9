"""The error type every gradfabric command reports as a plain message."""


class GradfabricError(Exception):
    """A failure a user can act on; its message says what went wrong and where."""
