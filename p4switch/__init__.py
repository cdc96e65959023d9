"""p4switch: the embedded P4-16 (v1model) target with a P4Runtime server."""

__version__ = "0.1.0"
