"""Experiments: training jobs over the DLCP transport, background traffic, the fabric experiment."""
