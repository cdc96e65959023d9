"""Errors of the control plane; each names the switch, entity or key it is about."""

from __future__ import annotations

from gradfabric.errors import GradfabricError


class ControllerError(GradfabricError):
    """Base of every control-plane error."""


class SchemaError(ControllerError):
    """A name that the P4Info does not define, or defines more than once."""


class EncodingError(ControllerError):
    """A value that does not parse or does not fit its field."""


class ConnectionFailed(ControllerError):
    """A switch that cannot be reached, or that did not make us primary."""


class ArbitrationRefused(ConnectionFailed):
    """A switch that ended the stream instead of answering the arbitration (wrong device id, say);
    trying again does not help."""


class NotPrimary(ConnectionFailed):
    """Another controller holds a higher election id on a switch: it has taken over, and this
    controller must neither write there nor undo what the other wrote."""


class RpcError(ControllerError):
    """A P4Runtime call that the switch answered with an error."""


class WriteRefused(RpcError):
    """A Write that the switch refused; ``failures`` names each refused update."""

    def __init__(self, switch: str, failures: list[str]) -> None:
        self.switch = switch
        self.failures = failures
        shown = "; ".join(failures[:3]) + (f"; and {len(failures) - 3} more" if len(failures) > 3 else "")
        super().__init__(f"{switch} refused {len(failures)} update(s): {shown}")


class PolicyError(ControllerError):
    """A policy file that does not validate; ``problems`` are 'key.path: reason' lines."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.problems = problems
        if len(problems) == 1:
            super().__init__(f"{source}: {problems[0]}")
        else:  # one problem a line, each with its key path
            super().__init__(f"{source}: {len(problems)} problems\n" + "\n".join(f"  {p}" for p in problems))


class FabricRoutingError(ControllerError):
    """A fabric whose routes cannot be computed (disconnected switch, clashing address)."""
