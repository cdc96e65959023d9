"""Errors of the embedded target; each names what failed and where."""


class P4SwitchError(Exception):
    """Base of every error the embedded target raises."""
