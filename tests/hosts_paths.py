"""Runs a host test module on both data paths: the C one (hosts.fastpath) and the Python one.

Import the fixture into a test module (``from tests.hosts_paths import datapath``): every
test of the module then runs twice; the Python run sets ``GRADFABRIC_FASTPATH=0``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from hosts.fastpath import native


@pytest.fixture(params=["c", "python"], autouse=True)
def datapath(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    if request.param == "python":
        monkeypatch.setenv("GRADFABRIC_FASTPATH", "0")
    elif native() is None:
        pytest.skip("the C data path cannot be built here (see the hosts.fastpath log line)")
    yield request.param
