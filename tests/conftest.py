"""Shared test configuration.

Tests marked ``netns`` need root and network namespaces. CI runs as root, so there they
always run; on a developer machine without root they are skipped with the reason (and
with CI=true set, a missing root is an error, never a silent skip).
"""

from __future__ import annotations

import os

import pytest

from tests import netns


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if netns.is_root():
        return
    if os.environ.get("CI"):
        raise pytest.UsageError("CI must run as root: tests marked netns need network namespaces")
    skip = pytest.mark.skip(reason="needs root and network namespaces (run as root, as CI does)")
    for item in items:
        if "netns" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def lab():
    """Namespaces and veths for one test, removed afterwards."""
    with netns.lab() as made:
        yield made
