"""Trace-based simulator of data-parallel iteration time, driving the schedulers of
:mod:`hosts.schedulers` in simulated time. See simulator/README.md for the model."""
