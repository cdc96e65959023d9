"""`gradfabric experiment trace`'s options reach the sweep's settings (the sweep itself is
replaced: it needs root and a fabric)."""

from __future__ import annotations

from typing import Any

import pytest

from experiments import trace_sweep
from gradfabric.command import cli


def _settings(monkeypatch: pytest.MonkeyPatch, *argv: str) -> Any:
    seen: list[Any] = []
    monkeypatch.setattr(trace_sweep, "run_trace_sweep", lambda settings: seen.append(settings))
    assert cli.main(["experiment", "trace", *argv]) == 0
    return seen[0]


def test_the_lossy_sweep_command_plans_its_pairs(monkeypatch: pytest.MonkeyPatch) -> None:
    s = _settings(monkeypatch, "--scenarios", "lossy-1", "--configs", "ddp-tcp,ddp-tcp-rto,p3-tcp,transport,"
                  "dropping,dlcp", "--repetitions", "10")
    assert s.sweep == {"lossy-1": ("ddp-tcp", "ddp-tcp-rto", "p3-tcp", "transport", "dropping", "dlcp")}
    runs = trace_sweep.plan_runs(s.sweep, s.repetitions)
    assert len(runs) == 60 and {r.seed for r in runs} == set(range(2000, 2010))
    assert s.starved_share == trace_sweep.STARVED == 0.5


def test_starved_share_is_an_option(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    assert _settings(monkeypatch, "--scenarios", "lossy-0.1", "--starved-share", "1").starved_share == 1.0
    assert cli.main(["experiment", "trace", "--starved-share", "0"]) != 0
    assert "--starved-share must be in (0, 1]" in capsys.readouterr().err
