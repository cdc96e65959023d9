"""The native build cache is keyed by source, compiler and flags: another compiler (a
wrapper) or the sanitizer flags never load an object built another way."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from p4switch.native import build as native_build

pytestmark = pytest.mark.skipif(native_build.find_compiler() is None, reason="no C compiler on this machine")

SOURCE = "int gf_build_probe(void) { return 26; }\n"


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("P4SWITCH_NATIVE_CACHE", str(folder))
    monkeypatch.delenv("P4SWITCH_NATIVE_SANITIZE", raising=False)
    monkeypatch.delenv("P4SWITCH_NATIVE_CFLAGS", raising=False)
    return folder


def wrapper(tmp_path: Path, name: str) -> tuple[Path, Path]:
    """A compiler wrapper that logs each call, then runs the real compiler."""
    real = native_build.find_compiler()
    log = tmp_path / f"{name}.log"
    script = tmp_path / name
    script.write_text(f'#!/bin/sh\necho "$@" >> {log}\nexec {real} "$@"\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script, log


def test_the_same_build_is_a_cache_hit(cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cc, log = wrapper(tmp_path, "cc-a")
    monkeypatch.setenv("CC", str(cc))
    first = native_build.build(SOURCE)
    assert native_build.build(SOURCE) == first
    calls = [line for line in log.read_text().splitlines() if "program.c" in line]
    assert len(calls) == 1


def test_another_compiler_builds_its_own_object(cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plain = native_build.build(SOURCE)
    cc, log = wrapper(tmp_path, "cc-wrapped")
    monkeypatch.setenv("CC", str(cc))
    wrapped = native_build.build(SOURCE)
    assert wrapped != plain
    assert any("program.c" in line for line in log.read_text().splitlines())


def test_sanitizer_and_extra_flags_build_their_own_objects(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plain = native_build.build(SOURCE)
    assert b"__asan_" not in plain.read_bytes()
    monkeypatch.setenv("P4SWITCH_NATIVE_SANITIZE", "1")
    assert native_build.build_flags()[-len(native_build.SANITIZE_FLAGS):] == native_build.SANITIZE_FLAGS
    sanitized = native_build.build(SOURCE)
    assert sanitized != plain
    assert b"__asan_" in sanitized.read_bytes() or b"libasan" in sanitized.read_bytes()
    monkeypatch.delenv("P4SWITCH_NATIVE_SANITIZE")
    monkeypatch.setenv("P4SWITCH_NATIVE_CFLAGS", "-DGF_PROBE=1")
    assert native_build.build(SOURCE) not in (plain, sanitized)
    monkeypatch.delenv("P4SWITCH_NATIVE_CFLAGS")
    assert native_build.build(SOURCE) == plain


def test_a_failing_compiler_names_itself(cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    broken = tmp_path / "cc-broken"
    broken.write_text("#!/bin/sh\necho 'cc-broken: no luck' >&2\nexit 3\n")
    broken.chmod(broken.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("CC", str(broken))
    with pytest.raises(native_build.NativeBuildError, match="exit 3"):
        native_build.build(SOURCE)
    assert not any(cache.glob("*.so")) if cache.exists() else True
