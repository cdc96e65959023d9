"""`gradfabric compile` (`make p4`): build the P4 program's P4Info and device config.

The embedded front end always compiles the program (its P4Info and device config are what
the embedded switches load); when ``p4c`` is on PATH the program is also compiled for BMv2
(``--target bmv2 --arch v1model``), into a subfolder so the two device configs never mix::

    build/dlcp.p4info.txtpb        embedded target: P4Info (text format)
    build/dlcp.json                embedded target: device config
    build/bmv2/dlcp.p4info.txtpb   p4c: P4Info (text format)
    build/bmv2/dlcp.json           p4c: BMv2 JSON (the p4_device_config of simple_switch_grpc)

The launcher calls :func:`compile_program` before it boots the fabric.
"""

from __future__ import annotations

import argparse
import subprocess
from dataclasses import dataclass
from pathlib import Path

from gradfabric.errors import GradfabricError
from gradfabric.p4ref import find_tool
from gradfabric.paths import P4SRC, build_dir

DEFAULT_SOURCE = P4SRC / "dlcp.p4"
BMV2_SUBDIR = "bmv2"
P4C_TIMEOUT_S = 300


class P4BuildError(GradfabricError):
    """The program could not be compiled; the message carries the compiler's own words."""


@dataclass(frozen=True)
class Artifacts:
    """The files one compiler wrote for one program."""

    p4info: Path
    device_config: Path


@dataclass(frozen=True)
class BuildResult:
    """What :func:`compile_program` wrote: always the embedded build, the BMv2 one if p4c ran."""

    source: Path
    embedded: Artifacts
    bmv2: Artifacts | None


def artifact_paths(source: Path, out_dir: Path) -> Artifacts:
    """Where the P4Info and device config of `source` go inside `out_dir`."""
    stem = source.stem
    return Artifacts(p4info=out_dir / f"{stem}.p4info.txtpb", device_config=out_dir / f"{stem}.json")


def compile_embedded(source: Path, out_dir: Path) -> Artifacts:
    """Compile `source` with the embedded front end; write its P4Info and device config."""
    from p4switch.device_config import write_device_config
    from p4switch.errors import P4SwitchError
    from p4switch.frontend import load_program
    from p4switch.p4info import build_p4info, write_p4info

    out = artifact_paths(source, out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        program = load_program(source)
        p4info = build_p4info(program)
        write_device_config(program, out.device_config)
        write_p4info(p4info, out.p4info)
    except P4SwitchError as exc:
        raise P4BuildError(f"embedded front end rejected {source}: {exc}") from exc
    return out


def find_p4c() -> str | None:
    """The p4c executable under $GRADFABRIC_P4REF/bin or on PATH, or None."""
    found = find_tool("p4c")
    return str(found) if found else None


def compile_p4c(source: Path, out_dir: Path, p4c: str = "p4c") -> Artifacts:
    """Compile `source` with p4c for BMv2's v1model; write the BMv2 JSON and the P4Info."""
    out = artifact_paths(source, out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    command = [
        p4c, "--target", "bmv2", "--arch", "v1model",
        "--p4runtime-files", str(out.p4info),
        "-o", str(out_dir), str(source),
    ]
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=P4C_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise P4BuildError(f"could not run {' '.join(command)}: {exc}") from exc
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-20:])
        raise P4BuildError(f"p4c failed (exit {proc.returncode}) on {source}:\n{tail}")
    if not out.device_config.is_file():
        raise P4BuildError(f"p4c succeeded but wrote no {out.device_config}")
    return out


def compile_program(
    source: Path = DEFAULT_SOURCE, out_dir: Path | None = None, use_p4c: bool | None = None
) -> BuildResult:
    """Compile `source` into `out_dir` (default build/).

    `use_p4c`: None runs p4c when it is on PATH, True requires it, False skips it.
    """
    source = Path(source)
    if not source.is_file():
        raise P4BuildError(f"no P4 program at {source}")
    out_dir = build_dir() if out_dir is None else Path(out_dir)
    p4c = find_p4c() if use_p4c is not False else None
    if use_p4c and p4c is None:
        raise P4BuildError("p4c is neither under $GRADFABRIC_P4REF/bin nor on PATH (install p4lang's p4c, or drop --p4c)")
    embedded = compile_embedded(source, out_dir)
    bmv2 = compile_p4c(source, out_dir / BMV2_SUBDIR, p4c) if p4c else None
    return BuildResult(source=source, embedded=embedded, bmv2=bmv2)


def add_commands(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "compile", help="compile the P4 program (embedded front end, and p4c when on PATH)"
    )
    parser.add_argument("source", nargs="?", type=Path, default=DEFAULT_SOURCE,
                        help=f"P4 program (default: {DEFAULT_SOURCE.relative_to(P4SRC.parent)})")
    parser.add_argument("--out-dir", type=Path, default=None, help="output folder (default: build/)")
    choice = parser.add_mutually_exclusive_group()
    choice.add_argument("--p4c", dest="use_p4c", action="store_true", default=None,
                        help="fail when p4c is not on PATH")
    choice.add_argument("--no-p4c", dest="use_p4c", action="store_false",
                        help="compile with the embedded front end only")
    parser.set_defaults(handler=_compile)


def _compile(args: argparse.Namespace) -> int:
    result = compile_program(args.source, args.out_dir, args.use_p4c)
    print(f"embedded: {result.embedded.p4info} {result.embedded.device_config}")
    if result.bmv2 is not None:
        print(f"bmv2:     {result.bmv2.p4info} {result.bmv2.device_config}")
    else:
        reason = "skipped (--no-p4c)" if args.use_p4c is False else "skipped: p4c not on PATH"
        print(f"bmv2:     {reason}")
    return 0
