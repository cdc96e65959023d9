"""The `p4switch` command: the embedded P4 target (compile, run, stf)."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from p4switch import __version__
from p4switch.errors import P4SwitchError

#: Modules that add subcommands through ``add_commands(subparsers)``.
COMMAND_MODULES: tuple[str, ...] = (
    "p4switch.run_commands",
    "p4switch.lang_commands",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="p4switch", description="Embedded P4-16 v1model target.")
    parser.add_argument("--version", action="version", version=f"p4switch {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMAND_MODULES:
        importlib.import_module(name).add_commands(sub)
    return parser


def run_handler(prog: str, args: argparse.Namespace, error_type: type[Exception], error_exit: int) -> int:
    """Run the parsed subcommand's handler and return its exit code.

    An ``error_type`` becomes a one-line ``PROG COMMAND: error: ...`` on stderr and
    ``error_exit``; an interrupt becomes exit code 130. Both command-line tools dispatch here.
    """
    try:
        return int(args.handler(args) or 0)
    except error_type as exc:
        print(f"{prog} {args.command}: error: {exc}", file=sys.stderr)
        return error_exit
    except KeyboardInterrupt:
        print(f"{prog} {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return reader_went_away()


def reader_went_away() -> int:
    """The reader of stdout went away (`... | head`): stop quietly as other Unix tools do (exit
    141), and keep Python from complaining again when it flushes stdout at exit."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return 141


def main(argv: Sequence[str] | None = None) -> int:
    # Exit 2 for errors: 1 is taken by `p4switch stf` for a test that ran and failed.
    return run_handler("p4switch", build_parser().parse_args(argv), P4SwitchError, 2)


if __name__ == "__main__":
    raise SystemExit(main())
