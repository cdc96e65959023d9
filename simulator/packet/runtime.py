"""Loading ns-3 (the optional ``ns3`` extra) and gradfabric's C++ pieces into this process.

ns-3's Python bindings compile C++ at run time through cppyy; importing them takes several
seconds, so it happens here, once, and only when a packet simulation is asked for. The
bindings' ``ns`` stub calls ``exit()`` when the wheel is missing: :func:`missing_reason`
checks first, so a missing extra is a :class:`PacketSimulationError` with the install line.
"""

from __future__ import annotations

import importlib.util
import os
import tempfile
from collections.abc import Callable
from typing import Any

from simulator.errors import SimulatorError
from simulator.packet import pch
from simulator.packet.ns3_modules import load_ns3

#: Compiled in this order; each includes gradfabric_ns3.h (switch port, ECMP, helpers).
HEADERS = pch.HEADERS
INSTALL_HINT = "pip install '.[ns3]' (the ns3 wheel, ns-3 3.44 with cppyy bindings)"

_loaded: tuple[Any, Any] | None = None


class PacketSimulationError(SimulatorError):
    """ns-3 is missing or refused a setup, or a packet simulation's input is bad."""


def missing_reason() -> str | None:
    """Why ns-3 cannot be loaded here (None: it can)."""
    if importlib.util.find_spec("ns3") is None:
        return f"the ns3 package is not installed: {INSTALL_HINT}"
    if importlib.util.find_spec("cppyy") is None:
        return f"cppyy (ns-3's Python bindings) is not installed: {INSTALL_HINT}"
    return None


def load(build_pch: bool = False, say: Callable[[str], None] = lambda _m: None) -> tuple[Any, Any]:
    """(``ns.ns3`` namespace, ``gradfabric`` C++ namespace); loads both on first use.

    Only the ns-3 modules the simulation uses are parsed and loaded
    (:mod:`simulator.packet.ns3_modules`). Cling starts from the cached precompiled header
    of those and our headers (:mod:`simulator.packet.pch`) where there is one; ``build_pch`` builds it first when it
    is missing (once, about a minute). The bindings print harmless static-initialiser
    warnings on stderr while loading; they are kept out of the way and shown only if
    loading fails.
    """
    global _loaded
    if _loaded is not None:
        return _loaded
    reason = missing_reason()
    if reason is not None:
        raise PacketSimulationError(reason)
    pch.select(build_pch, say)
    with tempfile.TemporaryFile() as captured:
        saved = os.dup(2)
        os.dup2(captured.fileno(), 2)
        try:
            import cppyy

            ns = load_ns3()
            for header in HEADERS:
                cppyy.include(str(header))
            gf = cppyy.gbl.gradfabric
            gf.PortQueueDisc, gf.DlcpEndpoint, gf.TcpPipe  # noqa: B018  (compiles the classes now, not mid-run)
        except Exception as exc:
            os.dup2(saved, 2)
            captured.seek(0)
            tail = captured.read().decode(errors="replace")[-2000:]
            raise PacketSimulationError(f"loading ns-3 or {', '.join(h.name for h in HEADERS)} failed: {exc}\n{tail}") from exc
        finally:
            os.dup2(saved, 2)
            os.close(saved)
    _loaded = (ns, gf)
    return _loaded
