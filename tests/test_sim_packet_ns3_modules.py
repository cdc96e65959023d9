"""Which ns-3 libraries the packet simulation loads (simulator/packet/ns3_modules.py): each
after the ns-3 libraries it links, none it does not need; read from fake libraries here, and
from the ns3 wheel when it is installed."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator.packet.ns3_modules import MODULES, Ns3LoadError, libraries
from simulator.packet.runtime import missing_reason


def fake_wheel(root: Path, links: dict[str, list[str]]) -> Path:
    """``lib64/libns3.44-<module>.so`` files whose bytes name the libraries they link."""
    (root / "lib64").mkdir(parents=True)
    for module, needed in links.items():
        names = b"".join(b"\x00libns3.44-" + n.encode() + b".so\x00" for n in needed)
        (root / "lib64" / f"libns3.44-{module}.so").write_bytes(b"\x7fELF" + names + b"\x00libc.so.6\x00")
    return root


def test_each_library_follows_what_it_links_and_nothing_else_is_loaded(tmp_path: Path) -> None:
    root = fake_wheel(tmp_path, {"core": [], "stats": ["core"], "network": ["stats", "core"],
                                 "bridge": ["network", "core"], "internet": ["bridge", "network", "core"],
                                 "wifi": ["internet", "network", "core"], "internet-test": ["internet"]})
    got = [p.name.removeprefix("libns3.44-").removesuffix(".so") for p in libraries(("internet",), tmp_path)]
    assert got == ["core", "stats", "network", "bridge", "internet"]
    assert all(p.parent == root / "lib64" for p in libraries(("internet",), tmp_path))


def test_a_missing_module_or_library_is_named(tmp_path: Path) -> None:
    fake_wheel(tmp_path, {"core": [], "network": ["core", "stats"]})
    with pytest.raises(Ns3LoadError, match="module 'lte' has no library"):
        libraries(("core", "lte"), tmp_path)
    with pytest.raises(Ns3LoadError, match="libns3.44-network.so links libns3.44-stats.so, which is not in"):
        libraries(("network",), tmp_path)
    with pytest.raises(Ns3LoadError, match="no libns3"):
        libraries(("core",), tmp_path / "elsewhere")


def test_libraries_that_link_in_a_cycle_are_refused(tmp_path: Path) -> None:
    fake_wheel(tmp_path, {"core": ["network"], "network": ["core"]})
    with pytest.raises(Ns3LoadError, match="cycle: libns3.44-core.so -> libns3.44-network.so -> libns3.44-core.so"):
        libraries(("core",), tmp_path)


@pytest.mark.skipif(missing_reason() is not None, reason=str(missing_reason()))
def test_the_wheels_libraries_for_the_simulation_are_a_few_of_its_modules() -> None:
    from simulator.packet.ns3_modules import prefix

    got = [p.name for p in libraries()]
    assert len(got) == len(set(got))
    stems = [n.split("-", 1)[1].removesuffix(".so") for n in got]
    assert set(MODULES) <= set(stems) and stems[0] == "core"
    assert stems.index("network") < stems.index("internet") < stems.index("applications")
    assert not {"wifi", "lte", "mesh", "wimax"} & set(stems)
    every = list((prefix() / "lib64").glob("libns3*.so")) or list((prefix() / "lib").glob("libns3*.so"))
    assert len(got) < len(every) / 2
