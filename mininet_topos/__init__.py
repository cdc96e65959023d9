"""Emulated fabrics: declarative topologies and the Mininet launcher."""
