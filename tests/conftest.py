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
    _skip_bmv2_without_tools(items)
    if netns.is_root():
        return
    if os.environ.get("CI"):
        raise pytest.UsageError("CI must run as root: tests marked netns need network namespaces")
    skip = pytest.mark.skip(reason="needs root and network namespaces (run as root, as CI does)")
    for item in items:
        if "netns" in item.keywords:
            item.add_marker(skip)


def _skip_bmv2_without_tools(items: list[pytest.Item]) -> None:
    """Tests marked ``bmv2`` need p4c and BMv2; without them they are skipped with the reason.

    Under CI with $GRADFABRIC_P4REF set (``make test`` sets it when ../shared/p4ref exists),
    a missing tool is an error, never a silent skip.
    """
    from gradfabric.p4ref import ENV_PREFIX, missing_tools

    if not any("bmv2" in item.keywords for item in items):
        return
    missing = missing_tools()
    if not missing:
        return
    if os.environ.get("CI") and os.environ.get(ENV_PREFIX):
        raise pytest.UsageError(f"${ENV_PREFIX} is set but these tools are missing: {missing}")
    reason = f"needs p4c and BMv2 (missing: {', '.join(missing)}; set ${ENV_PREFIX} or PATH)"
    skip = pytest.mark.skip(reason=reason)
    for item in items:
        if "bmv2" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def lab():
    """Namespaces and veths for one test, removed afterwards."""
    with netns.lab() as made:
        yield made
