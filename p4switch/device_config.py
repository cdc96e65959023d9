"""The embedded target's device config: JSON holding the preprocessed P4 source.

This is what `p4switch compile --out` writes and what SetForwardingPipelineConfig carries
as ``p4_device_config``; the switch rebuilds the pipeline from it (no file access needed).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from p4switch.errors import P4SwitchError
from p4switch.frontend import Program, program_from_preprocessed
from p4switch.frontend.preprocess import PreprocessedSource

FORMAT = "p4switch-device-config/1"


class DeviceConfigError(P4SwitchError):
    """The device config bytes are not a p4switch device config."""


def device_config_bytes(program: Program) -> bytes:
    source = program.source
    body = {
        "format": FORMAT,
        "program": program.name,
        "source_name": source.name,
        "sha256": hashlib.sha256(source.marked.encode()).hexdigest(),
        "source": source.marked,
    }
    return json.dumps(body, indent=1).encode()


def write_device_config(program: Program, path: Path) -> None:
    Path(path).write_bytes(device_config_bytes(program))


def program_from_device_config(data: bytes) -> Program:
    try:
        body = json.loads(data.decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DeviceConfigError(f"device config is not JSON: {exc}") from None
    if not isinstance(body, dict) or body.get("format") != FORMAT:
        fmt = body.get("format") if isinstance(body, dict) else None
        raise DeviceConfigError(f"device config format is {fmt!r}, expected {FORMAT!r} "
                                "(write it with `p4switch compile --out`)")
    source = PreprocessedSource.from_marked(body["source"], body.get("source_name", "program.p4"))
    return program_from_preprocessed(source)


def pipeline_from_device_config(data: bytes, seed: int = 0):
    """A fresh Pipeline for the program in a device config; ``seed`` seeds its ``random``
    extern (the switch passes its device id, so switches draw different sequences)."""
    from p4switch.pipeline import Pipeline

    return Pipeline(program_from_device_config(data), seed=seed)
