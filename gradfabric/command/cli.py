"""The `gradfabric` command: one entry point for fabric, controller, agents and simulator.

Each part of the project contributes its subcommands through a module with
``add_commands(subparsers)``; handlers import their heavy dependencies lazily so that
``gradfabric --help`` stays fast. A handler returns an exit code; a
:class:`GradfabricError` (or any part's own error type derived from it) becomes a one-line
message on stderr and exit code 1.
"""

from __future__ import annotations

import argparse
import importlib
import shlex
import sys
from collections.abc import Sequence

from gradfabric import __version__
from gradfabric.errors import GradfabricError
from p4switch.cli import reader_went_away, run_handler

#: Modules that add subcommands, in the order they appear in --help.
COMMAND_MODULES: tuple[str, ...] = (
    "gradfabric.command.lifecycle",
    "gradfabric.p4build",
    "controller.cli",
    "simulator.cli",
    "hosts.cli",
    "experiments.cli",
)
#: The module that adds each top-level command: ``gradfabric agent ...`` imports hosts.cli
#: alone (experiments.cli's parsers import torch, about 2 s of CPU at every start).
COMMANDS: dict[str, str] = {
    "run": "gradfabric.command.lifecycle", "stop": "gradfabric.command.lifecycle",
    "compile": "gradfabric.p4build",
    **dict.fromkeys(("routes", "policy", "show", "counters", "shell", "status"), "controller.cli"),
    "sim": "simulator.cli",
    "agent": "hosts.cli",
    "train": "experiments.cli", "experiment": "experiments.cli",
}


class HelpWithDefaults(argparse.HelpFormatter):
    """Help that names each option's default, unless its text already does or it has none."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if default in (None, False, argparse.SUPPRESS) or "default" in text or not action.option_strings:
            return text
        shown = ",".join(map(str, default)) if isinstance(default, (list, tuple)) else "%(default)s"
        return f"{text} (default: {shown})"


def parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """``parser`` and every subcommand's parser under it, depth first."""
    found = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):
                found += parsers(child)
    return found


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """Every command's parser; with ``command`` (a key of :data:`COMMANDS`), only the module
    that adds it is imported (the top-level help then lists its commands alone)."""
    parser = argparse.ArgumentParser(
        prog="gradfabric",
        description="Gradient-aware fabric: boot it, drive its switches, run agents and simulations.",
    )
    parser.add_argument("--version", action="version", version=f"gradfabric {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in (COMMANDS[command],) if command in COMMANDS else COMMAND_MODULES:
        importlib.import_module(name).add_commands(sub)
    for each in parsers(parser):
        each.formatter_class = HelpWithDefaults
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command `argv` (default: this process's arguments); handlers find the command
    line they were given, quoted for a shell, as ``args.command_line`` (results name it)."""
    words = list(sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser(words[0] if words else None).parse_args(words)
    except BrokenPipeError:  # `gradfabric ... --help | head`
        return reader_went_away()
    args.command_line = shlex.join(["gradfabric", *words])
    return run_handler("gradfabric", args, GradfabricError, 1)


if __name__ == "__main__":
    raise SystemExit(main())
