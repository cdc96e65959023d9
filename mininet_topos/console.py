"""The Mininet CLI with the fabric's own commands: ``counters`` and ``policy``.

Both run the controller's ``gradfabric`` subcommands against this fabric's description, so
what the prompt shows is exactly what a script running ``gradfabric counters`` would see.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

from mininet.cli import CLI
from mininet.net import Mininet


#: Options of `gradfabric counters` followed by a value (anything else bare is a switch).
OPTIONS_WITH_VALUES = frozenset({"--interval", "--count", "--timeout", "--fabric", "--switch", "--since"})


def counters_args(line: str) -> list[str]:
    """The `gradfabric counters` arguments of a CLI line: bare words are switch names."""
    args = ["counters"]
    takes_value = False
    for word in shlex.split(line):
        if word.startswith("-") or takes_value:
            args.append(word)
            takes_value = word in OPTIONS_WITH_VALUES
        else:
            args += ["--switch", word]
    return args


def gradfabric_command(args: list[str], workdir: Path) -> int:
    """Run ``gradfabric ARGS`` for the fabric under ``workdir``; returns its exit code."""
    env = {**os.environ, "GRADFABRIC_WORKDIR": str(workdir)}
    return subprocess.run([sys.executable, "-m", "gradfabric.command.cli", *args], env=env,
                          check=False).returncode


class FabricCLI(CLI):
    """Mininet's CLI plus ``counters [SWITCH]`` and ``policy apply FILE | policy show``."""

    def __init__(self, mininet: Mininet, workdir: Path, **kwargs: object) -> None:
        self.workdir = workdir
        super().__init__(mininet, **kwargs)

    def do_counters(self, line: str) -> None:
        """counters [SWITCH ...] [--watch] [--json] [--since SNAPSHOT]: per port and priority, drops by reason, spraying balance."""
        gradfabric_command(counters_args(line), self.workdir)

    def do_policy(self, line: str) -> None:
        """policy apply FILE | policy show: push a DLCP policy to every switch, or show it."""
        args = shlex.split(line)
        if not args:
            print("usage: policy apply FILE | policy show")
            return
        gradfabric_command(["policy", *args], self.workdir)
