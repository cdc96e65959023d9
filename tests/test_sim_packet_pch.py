"""ns-3's precompiled header cache (simulator/packet/pch.py): the key, the choice made before
cppyy is imported, and the fallback when a build fails. No PCH is built here (a build takes
about a minute); `python -m simulator.packet.pch` builds one and checks it with a two-host run."""

from __future__ import annotations

import logging
import shutil
import sys
from pathlib import Path

import pytest

from simulator.packet import pch


@pytest.fixture()
def native(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of native/ whose headers the test may edit, and an empty cache folder."""
    folder = tmp_path / "native"
    shutil.copytree(pch.NATIVE, folder)
    monkeypatch.setattr(pch, "NATIVE", folder)
    monkeypatch.setenv("GRADFABRIC_NS3_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("GRADFABRIC_NS3_PCH", "1")
    monkeypatch.delenv("CLING_STANDARD_PCH", raising=False)
    monkeypatch.delenv("EXTRA_CLING_ARGS", raising=False)
    monkeypatch.delitem(sys.modules, "cppyy", raising=False)
    return folder


def test_key_follows_every_header_and_clings_flags(native: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = pch.key()
    assert pch.key() == first
    header = native / "gradfabric_ns3.h"  # included by the others, never named directly
    header.write_text(header.read_text() + "\n// one more line\n")
    edited = pch.key()
    assert edited != first
    monkeypatch.setenv("EXTRA_CLING_ARGS", "-O2")
    assert pch.key() not in (first, edited)
    monkeypatch.setenv("EXTRA_CLING_ARGS", "-O2 -march=native")  # cppyy's default, stated
    assert pch.key() == edited


def test_cached_entry_is_chosen_before_cppyy_is_imported(native: Path) -> None:
    import os

    assert pch.select(build_missing=False) is None  # nothing cached, nothing built
    assert "CLING_STANDARD_PCH" not in os.environ
    entry = pch.cache_dir() / f"{pch.key()}.pch"
    entry.parent.mkdir(parents=True)
    entry.write_bytes(b"x")
    assert pch.select(build_missing=False) == entry
    assert os.environ["CLING_STANDARD_PCH"] == str(entry)


def test_too_late_once_cppyy_is_imported_and_off_when_asked(native: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    entry = pch.cache_dir() / f"{pch.key()}.pch"
    entry.parent.mkdir(parents=True)
    entry.write_bytes(b"x")
    monkeypatch.setitem(sys.modules, "cppyy", object())
    assert pch.select(build_missing=False) is None
    monkeypatch.delitem(sys.modules, "cppyy")
    monkeypatch.setenv("CLING_STANDARD_PCH", "/elsewhere/allDict.cxx.pch")  # chosen by the caller
    assert pch.select(build_missing=False) is None
    assert os.environ["CLING_STANDARD_PCH"] == "/elsewhere/allDict.cxx.pch"
    monkeypatch.delenv("CLING_STANDARD_PCH")
    monkeypatch.setenv("GRADFABRIC_NS3_PCH", "0")
    assert pch.select(build_missing=False) is None


def test_a_failed_build_falls_back_with_one_log_line(native: Path, monkeypatch: pytest.MonkeyPatch,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    import os

    def missing(name: str) -> Path | None:
        return None

    monkeypatch.setattr(pch, "_package_dir", missing)  # no cppyy_backend: makepch.py is absent
    with caplog.at_level(logging.WARNING, logger=pch.__name__):
        assert pch.select(build_missing=True) is None
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "makepch.py is not installed" in lines[0] and "not used" in lines[0]
    assert "CLING_STANDARD_PCH" not in os.environ
    assert not list(pch.cache_dir().glob("*.pch"))


def test_umbrella_keeps_the_imports_defines_before_its_includes_then_ours() -> None:
    calls = [("add_include_path", ["/x/ns3/include"]), ("cppexec", ["#define HAVE_SQLITE3 1"]),
             ("include", ["ns3/core-module.h"]), ("cppexec", ["#define NS3_CLICK 1"]),
             ("include", ["ns3/click-module.h"])]
    text, dirs = pch.umbrella(calls, (Path("/a/ours.h"),))
    lines = [x for x in text.splitlines() if not x.startswith("//")]
    assert lines == ["#define HAVE_SQLITE3 1", "#define NS3_CLICK 1", '#include "ns3/core-module.h"',
                     '#include "ns3/click-module.h"', '#include "/a/ours.h"']
    assert dirs == ["/x/ns3/include"]
