"""Program a booted fabric through the controller: pipeline, base routes, default policy.

The launcher goes through the controller's own commands (``gradfabric routes``,
``gradfabric policy apply``), so booting programs the switches exactly the way a user or a
script would; their one-line summaries become part of the boot output.
"""

from __future__ import annotations

from pathlib import Path

from gradfabric.errors import GradfabricError
from gradfabric.paths import ROOT

#: The policy `make run` pushes after the routes.
DEFAULT_POLICY = ROOT / "controller" / "policies" / "default.yaml"
#: Seconds the controller waits for each switch.
SWITCH_TIMEOUT_S = 20.0


class ProgrammingError(GradfabricError):
    """The controller could not program the fabric (its own message is printed above)."""


def controller_command(args: list[str]) -> None:
    from controller.cli import run

    try:
        code = run(args)
    except GradfabricError as exc:
        raise ProgrammingError(f"`gradfabric {' '.join(args)}` failed: {exc}") from exc
    if code != 0:
        raise ProgrammingError(f"`gradfabric {' '.join(args)}` failed (exit {code}); its message is above")


def program_fabric(description_path: Path, policy: Path | None) -> None:
    """Load the pipeline and install routes on every switch, then apply ``policy`` (if any).

    The controller's sessions close afterwards; the switches keep their state, and the
    controller CLI (``gradfabric policy apply``, ``counters``) connects anew when used.
    """
    common = ["--fabric", str(description_path), "--timeout", str(SWITCH_TIMEOUT_S)]
    controller_command(["routes", *common])
    if policy is not None:
        controller_command(["policy", "apply", str(policy), *common])
