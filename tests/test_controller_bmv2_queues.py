"""BMv2 queue settings go through simple_switch_CLI with the right Thrift port and commands."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from controller.bmv2_queues import QueueSetting, apply_queue_settings
from controller.errors import ControllerError


def test_commands_follow_simple_switch_cli_syntax() -> None:
    assert QueueSetting(port=2, rate_pps=1000, depth_packets=64).commands() == [
        "set_queue_rate 1000 2",
        "set_queue_depth 64 2",
    ]
    assert QueueSetting(port=3, rate_pps=500, priority=7).commands() == ["set_queue_rate 500 3 7"]


def test_cli_gets_thrift_port_and_commands(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    record = tmp_path / "record.txt"
    cli = tmp_path / "simple_switch_CLI"
    cli.write_text(f'#!/bin/sh\necho "args: $*" > {record}\ncat >> {record}\necho "RuntimeCmd: "\n')
    cli.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    apply_queue_settings(9091, [QueueSetting(port=1, rate_pps=2000), QueueSetting(port=1, depth_packets=16, priority=0)])
    assert record.read_text().splitlines() == ["args: --thrift-port 9091", "set_queue_rate 2000 1", "set_queue_depth 16 1 0"]


def test_missing_cli_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ControllerError, match="simple_switch_CLI not found on PATH"):
        apply_queue_settings(9090, [QueueSetting(port=1, rate_pps=1)])
