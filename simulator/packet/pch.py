"""A cached precompiled header of ns-3 and gradfabric's C++ pieces, so loading skips the parse.

Loading ns-3 (:mod:`simulator.packet.ns3_modules`: the modules the simulation uses) makes
cppyy's interpreter (Cling) parse their umbrella headers (about 1.5 s of CPU; the ns3 wheel's
own import parses all 42 modules', about 8 s), and :mod:`simulator.packet.runtime` then parses
``native/*.h`` (about 1 s more). Cling starts from one precompiled header (PCH),
``$CLING_STANDARD_PCH``, which by default holds the C++ standard library; this module builds
one that also holds the headers the load includes and ours, with cppyy's own builder
(``cppyy_backend/etc/dictpch/makepch.py``, rootcling). Started from it, the load's
``#include`` lines hit guards already defined and cost nothing.

The PCH lands in ``$GRADFABRIC_NS3_CACHE`` (default ``~/.cache/gradfabric/ns3``) as
``<sha256>.pch``: the hash of our headers (text and path), the ns3 wheel's version and module
libraries, the modules loaded, the cppyy packages' versions, Cling's flags
(``$EXTRA_CLING_ARGS``, by default ``-O2 -march=native``) and the CPU model
(``-march=native``). The newest :data:`KEEP` entries are kept. A build (about 1 min wall,
12 s CPU) runs in
subprocesses and is checked by loading it and running a two-host simulation before it enters
the cache; when any step fails the caller logs one line and loads without it.
``GRADFABRIC_NS3_PCH=0`` turns the cache off; a ``$CLING_STANDARD_PCH`` set elsewhere is
left alone.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import logging
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

from simulator.packet.ns3_modules import MODULES

log = logging.getLogger(__name__)

NATIVE = Path(__file__).resolve().parent / "native"
#: Ours, included after ns-3's module headers; each includes gradfabric_ns3.h.
HEADERS = (NATIVE / "gradfabric_transport.h", NATIVE / "gradfabric_tcp.h")
DEFAULT_CLING_ARGS = "-O2 -march=native"  # what cppyy_backend sets when $EXTRA_CLING_ARGS is unset
KEEP = 2
BUILD_TIMEOUT_S = 1800.0


class PchBuildError(RuntimeError):
    """A step of building or checking the precompiled header failed (the message says which)."""


def cache_dir() -> Path:
    env = os.environ.get("GRADFABRIC_NS3_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "gradfabric" / "ns3"


def enabled() -> bool:
    return os.environ.get("GRADFABRIC_NS3_PCH", "1") not in ("0", "", "false", "no")


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "absent"


def _package_dir(name: str) -> Path | None:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("model name", "flags")):
                return line
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cling_args() -> str:
    return os.environ.get("EXTRA_CLING_ARGS", DEFAULT_CLING_ARGS)


def key(headers: tuple[Path, ...] = HEADERS) -> str:
    """The cache key (module doc); cheap: reads our headers and lists ns-3's libraries."""
    parts: dict[str, object] = {
        "headers": {str(p): p.read_text() for p in sorted(NATIVE.glob("*.h"))} | {"order": [str(h) for h in headers]},
        "versions": {d: _version(d) for d in ("ns3", "cppyy", "cppyy-backend", "cppyy-cling", "CPyCppyy")},
        "cling_args": cling_args(),
        "modules": list(MODULES),
        "cpu": _cpu_model(),
    }
    ns3_dir = _package_dir("ns3")
    if ns3_dir is not None:
        parts["ns3_libraries"] = sorted(p.name for p in ns3_dir.glob("lib*/*.so*"))
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def cached(key_: str) -> Path | None:
    path = cache_dir() / f"{key_}.pch"
    return path if path.is_file() and path.stat().st_size > 0 else None


# The umbrella header is what loading ns-3 (simulator.packet.ns3_modules) does to Cling,
# recorded in a subprocess (its include directories come from the wheel it finds).
_RECORD = r"""
import json, sys, cppyy
calls = []
for name in ("cppexec", "include", "add_include_path"):
    def wrap(*a, _o=getattr(cppyy, name), _n=name):
        calls.append((_n, [str(x) for x in a]))
        return _o(*a)
    setattr(cppyy, name, wrap)
from simulator.packet.ns3_modules import load_ns3
load_ns3()
json.dump(calls, open(sys.argv[1], "w"))
"""

_CHECK = r"""
from simulator.packet.network import build
from simulator.packet.runtime import load
from simulator.packet.topology import Port, tiny
ns, gf = load()
net = build(tiny(1e9, 1e8, 1e-6, Port(rate_bps=1e8, queue_packets=4)))
sink = gf.RecordingSink(net.nodes["h2"], 9000)
gf.SendBurst(net.nodes["h1"], net.address("h2"), 9000, 3, 970, 0, 0.0, 0)
ns.Simulator.Stop(ns.Seconds(1))
ns.Simulator.Run()
assert [round(t * 1e6) for t in sink.times] == [90, 170, 250], list(sink.times)  # 8 + 1 + 80 + 1 us, then 80 us each
ns.Simulator.Destroy()
"""


def _run(argv: list[str], what: str, env: dict[str, str], cwd: Path | None = None) -> None:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd, timeout=BUILD_TIMEOUT_S,
                              check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        raise PchBuildError(f"{what}: {exc}") from exc
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr + proc.stdout).strip().splitlines()[-12:])
        raise PchBuildError(f"{what} failed (exit {proc.returncode}):\n{tail}")


def umbrella(calls: list[tuple[str, list[str]]], headers: tuple[Path, ...] = HEADERS) -> tuple[str, list[str]]:
    """(header text, include directories) from the recorded import: its defines, then its
    ``#include`` lines, then ours."""
    defines = [a[0] for n, a in calls if n == "cppexec"]
    includes = [f'#include "{a[0]}"' for n, a in calls if n == "include"]
    dirs = [a[0] for n, a in calls if n == "add_include_path"]
    ours = [f'#include "{h}"' for h in headers]
    return "\n".join(["// generated by simulator/packet/pch.py", *defines, *includes, *ours]) + "\n", dirs


def build(key_: str | None = None, say=lambda _m: None) -> Path:  # type: ignore[no-untyped-def]
    """Build, check and cache the PCH for ``key_`` (default: this installation's); its path."""
    key_ = key_ or key()
    hit = cached(key_)
    if hit is not None:
        return hit
    backend = _package_dir("cppyy_backend")
    if backend is None or not (backend / "etc" / "dictpch" / "makepch.py").is_file():
        raise PchBuildError("cppyy_backend's etc/dictpch/makepch.py is not installed")
    target = cache_dir() / f"{key_}.pch"
    target.parent.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "CLING_STANDARD_PCH"}
    env["EXTRA_CLING_ARGS"] = cling_args()
    with tempfile.TemporaryDirectory(prefix="gradfabric-pch-") as tmp:
        work = Path(tmp)
        say("  recording what importing ns-3 includes")
        _run([sys.executable, "-c", _RECORD, str(work / "calls.json")], "recording the ns3 import", env,
             cwd=Path(__file__).resolve().parents[2])
        text, dirs = umbrella([tuple(c) for c in json.loads((work / "calls.json").read_text())])  # type: ignore[misc]
        (work / "gradfabric_ns3_all.h").write_text(text)
        ns3_include = [d for d in dirs if d.endswith("ns3/include")]
        if not ns3_include:
            raise PchBuildError(f"the ns3 import added no .../ns3/include directory (it added {dirs})")
        say("  building the precompiled header (rootcling, about a minute)")
        partial = work / "gradfabric.pch"
        # makepch.py takes one flags argument, passed to rootcling as one word: one -I.
        _run([sys.executable, str(backend / "etc" / "dictpch" / "makepch.py"), str(partial), f"-I{ns3_include[0]}",
              str(work / "gradfabric_ns3_all.h")], "makepch.py", env, cwd=backend)
        say("  checking it: a two-host simulation loaded from it")
        _run([sys.executable, "-c", _CHECK], "the check run", {**env, "CLING_STANDARD_PCH": str(partial),
                                                               "GRADFABRIC_NS3_PCH": "0"},
             cwd=Path(__file__).resolve().parents[2])
        if key() != key_:
            raise PchBuildError("the headers changed while the precompiled header was built; not cached")
        staged = target.with_suffix(f".{os.getpid()}.tmp")
        staged.write_bytes(partial.read_bytes())
        os.replace(staged, target)  # atomic: concurrent builders agree
    _prune(target)
    return target


def _prune(keep: Path) -> None:
    entries = sorted(cache_dir().glob("*.pch"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in [p for p in entries if p != keep][KEEP - 1:]:
        old.unlink(missing_ok=True)


def select(build_missing: bool, say=lambda _m: None) -> Path | None:  # type: ignore[no-untyped-def]
    """Point Cling at the cached PCH before cppyy is imported; builds it first when
    ``build_missing``. None (with one log line where something failed) means load without."""
    if not enabled():
        return None
    own = os.environ.get("CLING_STANDARD_PCH")
    if own is not None and not own.startswith(str(cache_dir())):
        return None  # the caller chose Cling's header
    if "cppyy" in sys.modules:
        if "CLING_STANDARD_PCH" not in os.environ or not os.environ["CLING_STANDARD_PCH"].startswith(str(cache_dir())):
            log.info("ns-3 precompiled header not used: cppyy was imported earlier in this process")
        return None
    try:
        key_ = key()
        path = cached(key_)
        if path is None and build_missing:
            say(f"building ns-3's precompiled header once (cached in {cache_dir()})")
            path = build(key_, say)
    except (PchBuildError, OSError) as exc:
        log.warning("ns-3 precompiled header not used (loading parses the headers, about 10 s): %s",
                    str(exc).splitlines()[0])
        return None
    if path is not None:
        os.environ["CLING_STANDARD_PCH"] = str(path)
    return path


if __name__ == "__main__":  # python -m simulator.packet.pch: build the cache entry now
    print(build(say=print))
