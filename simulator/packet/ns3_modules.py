"""Loading only the ns-3 modules the packet simulation uses into cppyy.

The ns3 wheel's ``from ns3.ns import ns`` includes every module's umbrella header (wifi, LTE,
mesh, ... 42 modules: about 8 s of Cling parsing) and loads every library. The simulation
needs links, queues, IPv4/TCP/UDP and three applications: :data:`MODULES` and the ns-3
libraries they link against (:func:`libraries`). This module does what the wheel's loader
does (library and include paths, ``Ptr`` as a smart pointer, ``Time`` comparisons, nodes kept
alive until ns-3 destroys them, ``LookupByNameFailSafe``) for those alone.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Any

#: Whose umbrella headers are parsed: ours include core, network, internet and traffic-control;
#: the Python side builds links with point-to-point and traffic with applications' helpers.
MODULES = ("core", "network", "traffic-control", "point-to-point", "internet", "applications")


class Ns3LoadError(RuntimeError):
    """The ns3 wheel's libraries or headers are not where this module looks for them."""


def prefix() -> Path:
    """The ns3 wheel's folder (``include/`` and ``lib64/`` or ``lib/``)."""
    spec = importlib.util.find_spec("ns3")
    if spec is None or not spec.submodule_search_locations:
        raise Ns3LoadError("the ns3 package is not installed")
    return Path(list(spec.submodule_search_locations)[0])


def _library_dir(root: Path) -> Path:
    for variant in ("lib64", "lib"):
        if any((root / variant).glob("libns3*-core*.so")):
            return root / variant
    raise Ns3LoadError(f"no libns3*-core*.so under {root}/lib64 or {root}/lib")


def _needed(library: Path) -> list[str]:
    """The ns-3 libraries ``library`` links against (its ELF's names, as the wheel reads them)."""
    return sorted({m.decode() for m in re.findall(rb"\x00(libns3[^\x00/]*?\.so)", library.read_bytes())
                   if m.decode() != library.name})


def libraries(modules: tuple[str, ...] = MODULES, root: Path | None = None) -> list[Path]:
    """The libraries of ``modules`` and everything they link from ns-3, each after its
    dependencies."""
    lib_dir = _library_dir(root or prefix())
    by_module: dict[str, Path] = {}
    for path in lib_dir.glob("libns3*.so"):
        match = re.fullmatch(r"libns3[^-]*-(.+?)(-(?:default|debug|optimized|release))?\.so", path.name)
        if match and "test" not in match.group(1):
            by_module[match.group(1)] = path
    by_name = {p.name: p for p in by_module.values()}
    ordered: list[Path] = []

    def visit(path: Path, trail: tuple[str, ...]) -> None:
        if path in ordered:
            return
        if path.name in trail:
            raise Ns3LoadError(f"ns-3 libraries link in a cycle: {' -> '.join((*trail, path.name))}")
        for name in _needed(path):
            if name not in by_name:
                raise Ns3LoadError(f"{path.name} links {name}, which is not in {lib_dir}")
            visit(by_name[name], (*trail, path.name))
        ordered.append(path)

    for module in modules:
        if module not in by_module:
            raise Ns3LoadError(f"ns-3 module {module!r} has no library in {lib_dir}")
        visit(by_module[module], ())
    return ordered


def load_ns3(modules: tuple[str, ...] = MODULES) -> Any:
    """Parse ``modules``' headers, load their libraries; the ``ns3`` namespace (as ``ns``)."""
    import cppyy
    import libcppyy  # type: ignore[import-not-found]

    root = prefix()
    libs = libraries(modules, root)
    libcppyy.AddSmartPtrType("Ptr")
    cppyy.add_library_path(str(libs[0].parent))
    cppyy.add_include_path(str(root / "include"))
    for module in modules:
        cppyy.include(f"ns3/{module}-module.h")
    for library in libs:
        cppyy.load_library(library.name)
    ns3 = cppyy.gbl.ns3
    ns3.cppyy = cppyy
    cppyy.cppdef("""
        namespace gradfabric_ns3_py {
        using namespace ns3;
        bool Time_ge(Time& a, Time& b) { return a >= b; }
        bool Time_eq(Time& a, Time& b) { return a == b; }
        bool Time_ne(Time& a, Time& b) { return a != b; }
        bool Time_le(Time& a, Time& b) { return a <= b; }
        bool Time_gt(Time& a, Time& b) { return a > b; }
        bool Time_lt(Time& a, Time& b) { return a < b; }
        std::tuple<bool, TypeId> LookupByNameFailSafe(std::string name)
        {
            TypeId id;
            bool ok = TypeId::LookupByNameFailSafe(name, &id);
            return std::make_tuple(ok, id);
        }
        }""")
    helpers = cppyy.gbl.gradfabric_ns3_py
    for op in ("ge", "eq", "ne", "le", "gt", "lt"):
        setattr(ns3.Time, f"__{op}__", getattr(helpers, f"Time_{op}"))
    ns3.LookupByNameFailSafe = helpers.LookupByNameFailSafe
    # A Node is destroyed by ns-3 at Simulator::Destroy, not when Python drops its proxy.
    pending: list[Any] = []
    ns3.Node.__del__ = lambda self: pending.append(self)
    return ns3
