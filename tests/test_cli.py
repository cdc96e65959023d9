"""The two console scripts answer and fail the way scripts can rely on."""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Callable

import pytest

from gradfabric.command import cli as gradfabric_cli
from p4switch import cli as p4switch_cli


def test_gradfabric_help_lists_run_and_stop(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        gradfabric_cli.main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "run" in out and "stop" in out


def test_unknown_subcommand_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        gradfabric_cli.main(["no-such-command"])
    assert exc.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


def test_p4switch_version() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "p4switch.cli", "--version"], capture_output=True, text=True
    )
    assert proc.returncode == 0
    assert proc.stdout.startswith("p4switch ")


def _raising(exc: BaseException) -> Callable[[argparse.Namespace], int]:
    def handler(args: argparse.Namespace) -> int:
        raise exc
    return handler


@pytest.mark.parametrize(
    ("error_type", "error_exit", "raised", "code", "message"),
    [
        (ValueError, 2, ValueError("bad port"), 2, "tool cmd: error: bad port"),
        (ValueError, 1, KeyboardInterrupt(), 130, "tool cmd: interrupted"),
    ],
)
def test_run_handler_turns_errors_into_one_line_and_exit_code(
    capsys: pytest.CaptureFixture[str], error_type: type[Exception], error_exit: int,
    raised: BaseException, code: int, message: str,
) -> None:
    args = argparse.Namespace(command="cmd", handler=_raising(raised))
    assert p4switch_cli.run_handler("tool", args, error_type, error_exit) == code
    assert capsys.readouterr().err.strip() == message


def test_run_handler_lets_other_errors_through() -> None:
    args = argparse.Namespace(command="cmd", handler=_raising(KeyError("x")))
    with pytest.raises(KeyError):
        p4switch_cli.run_handler("tool", args, ValueError, 1)


def test_every_option_says_what_it_does_and_its_default() -> None:
    import argparse

    from gradfabric.command.cli import build_parser, parsers

    silent = []
    for parser in parsers(build_parser()):
        for action in parser._actions:
            if isinstance(action, (argparse._HelpAction, argparse._VersionAction, argparse._SubParsersAction)):
                continue
            if not action.help or action.help == argparse.SUPPRESS:
                silent.append(f"{parser.prog} {'/'.join(action.option_strings) or action.dest}")
    assert not silent, f"options without help: {silent}"
    sim_run = next(p for p in parsers(build_parser()) if p.prog.endswith("sim run"))
    text = " ".join(sim_run.format_help().split())
    assert "retransmission timeout a reliable transfer waits after any loss, in ms (default: 5.0)" in text
    assert "(default: 4,8,16,32,64)" in text


def test_tables_are_not_cut_at_80_columns_when_piped() -> None:
    import subprocess
    import sys

    script = (
        "from rich.table import Table\n"
        "from gradfabric.console import console\n"
        "t = Table()\n"
        "for i in range(12):\n"
        "    t.add_column(f'column number {i}')\n"
        "t.add_row(*[f'value-{i}-long' for i in range(12)])\n"
        "console().print(t)\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert "column number 11" in proc.stdout and "value-11-long" in proc.stdout
    assert max(len(line) for line in proc.stdout.splitlines()) > 80


def test_each_command_is_added_by_the_module_its_table_names() -> None:
    import argparse
    import importlib

    from gradfabric.command.cli import COMMAND_MODULES, COMMANDS

    added: dict[str, str] = {}
    for name in COMMAND_MODULES:
        sub = argparse.ArgumentParser().add_subparsers()
        importlib.import_module(name).add_commands(sub)
        added.update(dict.fromkeys(sub.choices, name))
    assert added == COMMANDS
    assert set(COMMANDS.values()) == set(COMMAND_MODULES)


def test_a_command_parses_alike_with_its_module_alone_which_skips_the_others() -> None:
    import subprocess
    import sys

    from gradfabric.command.cli import build_parser

    words = ["agent", "send", "--to", "127.0.0.1:9", "--messages", "3", "--grad-bound", "0.05"]
    alone, every = build_parser("agent").parse_args(words), build_parser().parse_args(words)
    assert vars(alone) == vars(every) and alone.messages == 3
    script = ("import sys\nfrom gradfabric.command.cli import build_parser\nbuild_parser('agent')\n"
              "print(sorted(m for m in ('torch', 'experiments.cli', 'simulator.cli', 'hosts.cli') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert proc.stdout.split() == ["['hosts.cli']"]
