"""The two console scripts answer and fail the way scripts can rely on."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gradfabric import cli as gradfabric_cli
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
