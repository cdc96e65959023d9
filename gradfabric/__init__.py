"""gradfabric: in-network handling of distributed-training gradient traffic."""

__version__ = "0.1.0"
