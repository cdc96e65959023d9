"""A disk cache of the calibration's curves (``sim validate --cache DIR``): every run's predicted
p50 on the grid of host costs is a function of the run's record, the model's code and the
settings alone (its draws are seeded per run), so a rerun after new sweeps land computes only
theirs. The key of a cache file is a digest of the code (the model's modules, the schedulers and the
trace reader it runs) and the settings; a run's entry is keyed by a digest of its
parsed record. Only speed changes: the table is the same with or without it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path

from simulator.errors import SimulatorError
from simulator.fabric_runs import Run

_ROOT = Path(__file__).resolve().parent
#: The code a curve depends on: the modules :func:`simulator.run_model.predict_run` runs (not the
#: reports, the command line or the packet-level model), the schedulers and the trace reader.
CODE = (*(_ROOT / f"{name}.py" for name in ("engine", "errors", "fabric_model", "fabric_runs", "host_model", "traces",
                                            "run_model")),
        *sorted((_ROOT.parent / "hosts" / "schedulers").glob("*.py")), _ROOT.parent / "gradfabric" / "traces.py")


def fingerprint(settings: Sequence[str], code: Sequence[Path] = CODE) -> str:
    """A digest of the ``code`` files' contents and the ``settings`` (reprs of what else the
    curves depend on: CPU measure, terms left out, job trace, host baseline, cost grid)."""
    digest = hashlib.sha256()
    for path in code:
        try:
            digest.update(path.read_bytes())
        except OSError as exc:
            raise SimulatorError(f"calibration cache: cannot read {path}: {exc.strerror}") from None
    for text in settings:
        digest.update(b"\0" + text.encode())
    return digest.hexdigest()[:32]


def run_key(run: Run) -> str:
    """A digest of everything the run's record gave the model (its parsed fields)."""
    return hashlib.sha256(repr(run).encode()).hexdigest()[:32]


class CurveCache:
    """The curves of one fingerprint under ``folder`` (None: no cache, nothing kept)."""

    def __init__(self, folder: Path | None, key: str) -> None:
        self.path = folder / f"curves-{key}.json" if folder is not None else None
        self.curves: dict[str, list[float]] = {}
        self.new = 0
        if self.path is not None and self.path.exists():
            try:
                self.curves = json.loads(self.path.read_text())
            except (OSError, ValueError) as exc:
                raise SimulatorError(f"calibration cache {self.path}: {exc}") from None

    def get(self, run: Run) -> list[float] | None:
        return self.curves.get(run_key(run))

    def put(self, run: Run, curve: list[float]) -> None:
        if self.path is not None:
            self.curves[run_key(run)] = curve
            self.new += 1

    def save(self) -> None:
        """Write the curves back (only when some were added)."""
        if self.path is not None and self.new:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(json.dumps(self.curves))
            tmp.replace(self.path)


__all__ = ["CODE", "CurveCache", "fingerprint", "run_key"]
