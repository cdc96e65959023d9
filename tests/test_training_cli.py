"""`gradfabric train`: the parameter server and the workers as processes on loopback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from gradfabric.command import cli


def test_train_runs_a_job_of_processes_over_loopback(tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    logs = tmp_path / "logs"
    done = subprocess.run(
        [sys.executable, "-m", "gradfabric.command.cli", "train", "--workers", "2", "--iterations", "40", "--eval-every",
         "10", "--target", "0.5", "--json", str(out), "--logs", str(logs)],
        capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    run = json.loads(out.read_text())
    assert run["iterations"] == 40
    assert [round(t) for t, _ in run["accuracy_curve"]] == sorted(round(t) for t, _ in run["accuracy_curve"])
    assert len(run["accuracy_curve"]) == 4
    assert run["final_accuracy"] > 0.6  # 40 steps of SGD on the digits, from 10% at random
    assert run["time_to_target_s"] is not None
    # 2 workers x 40 iterations x 4 tensors pushed, and as many pulled: every one arrived.
    assert run["packets_sent"] > 2 * 40 * 4 * 2
    assert run["dropped"] == 0
    assert sorted(p.name for p in logs.iterdir()) == ["ps.log", "worker0.log", "worker1.log"]


def test_train_role_errors_are_one_line(capsys) -> None:  # noqa: ANN001
    assert cli.main(["train", "--role", "worker", "--workers", "2"]) == 1
    assert "needs --ps IP:PORT and --rank" in capsys.readouterr().err
    assert cli.main(["train", "--role", "worker", "--workers", "2", "--rank", "2", "--ps", "127.0.0.1:1"]) == 1
    assert "--rank 2 is not in 0..1" in capsys.readouterr().err
    assert cli.main(["train", "--scheduler", "fastest"]) == 1
    assert "unknown scheduler 'fastest'" in capsys.readouterr().err
    assert cli.main(["train", "--hidden", "64,x"]) == 1
    assert "--hidden" in capsys.readouterr().err
