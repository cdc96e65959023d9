"""Host agents: DLCP wire format, bounded-loss transport, gradient schedulers."""
