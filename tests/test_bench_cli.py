"""`python -m tests.benchmarks NAME ...`: names are checked before anything runs."""

from __future__ import annotations

import pytest

from tests.benchmarks.__main__ import main


def test_help_lists_the_benchmarks_and_runs_none(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "transport" in out and "ddp_hook" in out
    assert "| benchmark |" not in out  # no table: nothing ran


def test_an_unknown_name_is_refused_with_the_known_ones(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["transport", "trasnport"]) == 2
    captured = capsys.readouterr()
    assert "no benchmark named 'trasnport'" in captured.err and "transport_switch" in captured.err
    assert "bench: bench_transport" not in captured.out  # refused before the valid name ran
