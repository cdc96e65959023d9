"""The control plane: a multi-switch P4Runtime client, fabric routing, DLCP policies."""
