"""The `p4switch` command: the embedded P4 target (compile, run, stf)."""

from __future__ import annotations

import argparse
import importlib
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


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except P4SwitchError as exc:
        print(f"p4switch {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
