"""`p4switch compile` and `p4switch stf`: the language side of the embedded target."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from p4switch.device_config import write_device_config
from p4switch.frontend import load_program
from p4switch.p4info import build_p4info, write_p4info


def _defines(values: list[str]) -> dict[str, str]:
    result = {}
    for item in values:
        key, _, value = item.partition("=")
        result[key] = value
    return result


def _add_source_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("program", type=Path, help="P4-16 source (v1model)")
    parser.add_argument("-I", dest="include", action="append", default=[], type=Path,
                        metavar="DIR", help="add DIR to the #include search path")
    parser.add_argument("-D", dest="define", action="append", default=[], metavar="NAME[=VALUE]",
                        help="define a preprocessor macro")


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    compile_parser = subparsers.add_parser(
        "compile", help="check a P4 program and write its P4Info and device config")
    _add_source_options(compile_parser)
    compile_parser.add_argument("--p4runtime-files", type=Path, metavar="P4INFO",
                                help="write P4Info (protobuf text format) here")
    compile_parser.add_argument("--out", "-o", type=Path, metavar="DEVICE_CONFIG",
                                help="write the device config (JSON) here")
    compile_parser.set_defaults(handler=run_compile)

    stf_parser = subparsers.add_parser(
        "stf", help="run an STF test (exit 0 pass, 1 mismatch, 2 unsupported or bad input)")
    _add_source_options(stf_parser)
    stf_parser.add_argument("stf", type=Path, help="the .stf test file")
    stf_parser.add_argument("-v", "--verbose", action="store_true", help="print a summary on success")
    stf_parser.set_defaults(handler=run_stf_command)


def run_compile(args: argparse.Namespace) -> int:
    program = load_program(args.program, args.include, _defines(args.define))
    if args.p4runtime_files:
        args.p4runtime_files.parent.mkdir(parents=True, exist_ok=True)
        write_p4info(build_p4info(program), args.p4runtime_files)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        write_device_config(program, args.out)
    info = program.info
    print(f"p4switch compile: {args.program}: {len(info.tables)} table(s), "
          f"{len(info.actions)} action(s), {len(info.counters)} counter(s), "
          f"{len(info.registers)} register(s)")
    return 0


def run_stf_command(args: argparse.Namespace) -> int:
    from p4switch.pipeline import Pipeline
    from p4switch.stf import run_stf

    program = load_program(args.program, args.include, _defines(args.define))
    try:
        text = args.stf.read_text()
    except OSError as exc:
        print(f"p4switch stf: error: cannot read {args.stf}: {exc.strerror}", file=sys.stderr)
        return 2
    result = run_stf(Pipeline(program), text)
    for note in result.extensions:
        print(f"p4switch stf: {args.stf}: p4switch extension, {note}", file=sys.stderr)
    if result.ok:
        if args.verbose:
            print(f"p4switch stf: {args.stf}: passed ({result.packets_sent} packet(s) in, "
                  f"{result.packets_received} out)")
        return 0
    print(f"p4switch stf: {args.stf}: FAILED", file=sys.stderr)
    for failure in result.failures:
        print(failure, file=sys.stderr)
    return 1
