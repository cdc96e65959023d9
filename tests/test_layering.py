"""The import layers of the project, read from the source (every ``import``, lazy ones too).

The rule, from the bottom up (README.md, "Layout"):

- ``p4switch`` (the embedded target) stands alone: it imports no other part of the project;
- the foundation (``gradfabric`` minus ``gradfabric.command``) may use ``p4switch`` (the P4
  build compiles with its front end) and nothing above: never ``controller``, ``hosts``,
  ``mininet_topos``, ``simulator``, ``experiments`` or ``gradfabric.command``;
- ``hosts`` never imports ``simulator``, ``controller``, ``p4switch``, ``mininet_topos`` or
  ``experiments``;
- ``controller`` reaches a target only through P4Runtime and its own client of the embedded
  switch's control channel: it never imports ``p4switch``, ``hosts``, ``simulator``,
  ``mininet_topos`` or ``experiments``;
- ``simulator`` never imports ``controller``, ``p4switch``, ``mininet_topos`` or ``experiments``;
- ``mininet_topos`` never imports ``simulator`` or ``experiments``;
- ``gradfabric.command`` is the top: nothing imports it; and no part imports ``tests``;
- no import circle between modules.

An import of ``pkg.mod`` counts as an arrow to that module (``from pkg import mod`` too when
``mod`` is a module); ``importlib.import_module("literal")`` counts as well, and so does an
import under ``if TYPE_CHECKING:``: naming the other module's types is knowing it (a circle
through type annotations is still two modules that cannot be read apart).
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parent.parent
PARTS = ("gradfabric", "p4switch", "controller", "hosts", "mininet_topos", "simulator", "experiments", "tests")
COMMAND = "gradfabric.command"

#: Layer -> layers it must never import.
FORBIDDEN: dict[str, frozenset[str]] = {
    "p4switch": frozenset(PARTS) - {"p4switch"} | {COMMAND},
    "gradfabric": frozenset({"controller", "hosts", "mininet_topos", "simulator", "experiments", COMMAND, "tests"}),
    "hosts": frozenset({"simulator", "controller", "p4switch", "mininet_topos", "experiments", COMMAND, "tests"}),
    "controller": frozenset({"p4switch", "hosts", "simulator", "mininet_topos", "experiments", COMMAND, "tests"}),
    "simulator": frozenset({"controller", "p4switch", "mininet_topos", "experiments", COMMAND, "tests"}),
    "mininet_topos": frozenset({"simulator", "experiments", COMMAND, "tests"}),
    "experiments": frozenset({COMMAND, "tests"}),
    COMMAND: frozenset({"tests"}),
}

#: Offences known and being fixed elsewhere, each with its reason. Delete an entry when its fix
#: lands: test_known_offenders_still_exist fails on an entry that no longer matches anything.
KNOWN_UPWARD: dict[tuple[str, str], str] = {}
KNOWN_CIRCLES: dict[frozenset[str], str] = {}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules() -> dict[str, Path]:
    found = {}
    for part in PARTS:
        if part == "tests":
            continue
        for path in (ROOT / part).rglob("*.py"):
            found[module_name(path)] = path
    return found


def imported(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules (or packages) that ``name`` imports, anywhere in its body."""
    tree = ast.parse(path.read_text(), str(path))
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            submodules = {f"{source}.{alias.name}" for alias in node.names} & modules.keys()
            out.update(submodules)
            if len(submodules) < len(node.names):
                out.add(source)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "import_module" and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            out.add(node.args[0].value)
    return {m for m in out if m.split(".")[0] in PARTS}


def layer(module: str) -> str:
    if module == COMMAND or module.startswith(COMMAND + "."):
        return COMMAND
    return module.split(".")[0]


def resolve(target: str, modules: dict[str, Path]) -> str:
    """The module an import names: itself, or its nearest enclosing module (``pkg.Class``)."""
    while target and target not in modules:
        target = target.rpartition(".")[0]
    return target


@pytest.fixture(scope="module")
def graph() -> nx.DiGraph:
    modules = project_modules()
    g = nx.DiGraph()
    g.add_nodes_from(modules)
    for name, path in modules.items():
        for target in imported(name, path, modules):
            g.add_edge(name, resolve(target, modules) or target)
    return g


def upward(g: nx.DiGraph) -> set[tuple[str, str]]:
    return {(a, b) for a, b in g.edges if layer(b) in FORBIDDEN.get(layer(a), ())}


def circles(g: nx.DiGraph) -> list[frozenset[str]]:
    plain = nx.DiGraph((a, b) for a, b in g.edges if a != b)
    return [frozenset(c) for c in nx.strongly_connected_components(plain) if len(c) > 1]


def test_the_walker_sees_lazy_relative_and_from_imports(tmp_path: Path) -> None:
    """Imports inside functions, ``from pkg import module`` and relative imports all count."""
    source = tmp_path / "probe.py"
    source.write_text("from . import errors\n"
                      "def later():\n    from controller import counters\n    import hosts.wire\n"
                      "    importlib.import_module('simulator.cli')\n")
    modules = {"gradfabric.probe": source, "gradfabric.errors": source, "controller.counters": source}
    found = imported("gradfabric.probe", source, modules)
    assert found == {"gradfabric.errors", "controller.counters", "hosts.wire", "simulator.cli"}
    assert layer("gradfabric.command.cli") == COMMAND and layer("gradfabric.paths") == "gradfabric"


def test_the_rules_catch_an_upward_arrow_and_a_circle() -> None:
    g = nx.DiGraph([("controller.counters", "p4switch.server.control"), ("gradfabric.fabric", "controller.cli"),
                    ("hosts.a", "hosts.b"), ("hosts.b", "hosts.a"), ("experiments.x", "controller.cli")])
    assert upward(g) == {("controller.counters", "p4switch.server.control"), ("gradfabric.fabric", "controller.cli")}
    assert circles(g) == [frozenset({"hosts.a", "hosts.b"})]


def test_no_upward_import(graph: nx.DiGraph) -> None:
    found = upward(graph) - KNOWN_UPWARD.keys()
    lines = [f"{a} imports {b} ({layer(a)} must not import {layer(b)})" for a, b in sorted(found)]
    assert not lines, "upward imports (rule in tests/test_layering.py):\n" + "\n".join(lines)


def test_no_import_circle(graph: nx.DiGraph) -> None:
    found = [c for c in circles(graph) if c not in KNOWN_CIRCLES]
    lines = [" <-> ".join(sorted(c)) for c in found]
    assert not lines, "import circles:\n" + "\n".join(lines)


def test_nothing_imports_the_command(graph: nx.DiGraph) -> None:
    users = sorted(a for a, b in graph.edges if layer(b) == COMMAND and layer(a) != COMMAND)
    assert not users, f"the gradfabric command is the top; these import it: {users}"


def test_known_offenders_still_exist(graph: nx.DiGraph) -> None:
    """An allow-list entry whose offence is gone must be deleted, so the list only shrinks."""
    gone = [f"{a} -> {b}" for a, b in KNOWN_UPWARD if (a, b) not in graph.edges]
    present = circles(graph)
    gone += [" <-> ".join(sorted(c)) for c in KNOWN_CIRCLES if c not in present]
    assert not gone, f"fixed; delete from KNOWN_UPWARD / KNOWN_CIRCLES in tests/test_layering.py: {gone}"
