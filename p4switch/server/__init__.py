"""P4Runtime server of the embedded target: servicer, arbitration, entity translation, wire
format of the bulk messages, request log."""

from p4switch.server.servicer import P4RuntimeServer, P4RuntimeServicer

__all__ = ["P4RuntimeServer", "P4RuntimeServicer"]
