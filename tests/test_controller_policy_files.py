"""Policy files as careless operators and other tools produce them: alias bombs, repeated
keys, directories, binary files, broken traces; and a switch with another device id."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from controller.arbitration import ElectionId
from controller.errors import ArbitrationRefused, PolicyError
from controller.policy import load_policy
from controller.transport import Transport
from tests.test_p4runtime_server import DEVICE_ID, running_server

GOOD_JOB = "jobs:\n  - id: 1\n    name: j\n    spraying: random\n    layers: [{tensors: 0..9, priority: 7}]\n"


def refusal(path: Path) -> str:
    """The refusal's message. No clock: the bomb below, expanded and walked, costs 0.04 s of CPU,
    so a time bound could only fail from a loaded machine; the message shows where it stopped."""
    with pytest.raises(PolicyError) as err:
        load_policy(path)
    return str(err.value)


def test_alias_bomb_is_refused_at_once(tmp_path: Path) -> None:
    levels = ["a: &a [x, x, x, x, x, x, x, x, x]"]
    for i, name in enumerate("bcdef"):
        prev = "abcdef"[i]
        levels.append(f"{name}: &{name} [" + ", ".join([f"*{prev}"] * 9) + "]")
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("\n".join(levels) + "\n" + GOOD_JOB)
    assert "aliases" in refusal(bomb)


def test_duplicate_keys_are_refused_with_both_lines(tmp_path: Path) -> None:
    twice = tmp_path / "twice.yaml"
    twice.write_text("default_priority: 1\n" + GOOD_JOB + "default_priority: 5\n")
    text = refusal(twice)
    assert "duplicate key 'default_priority'" in text and "line 1" in text


def test_directories_and_binary_files_are_refused(tmp_path: Path) -> None:
    assert "is a directory" in refusal(tmp_path)
    binary = tmp_path / "policy.yaml"
    binary.write_bytes(bytes(range(256)) * 4)
    assert "binary" in refusal(binary)
    latin = tmp_path / "latin.yaml"
    latin.write_bytes("name: caf\u00e9\n".encode("latin-1"))
    assert "not UTF-8" in refusal(latin)


@pytest.mark.parametrize("rows, expected", [
    ("numel\n10\nnan\n", "row 3"),
    ("numel\n10\n-4\n", "row 3"),
    ("numel\n10\ninf\n", "row 3"),
    ("name,numel\na,10\nb\n", "row 3"),
    ("size_bytes\n40\nlots\n", "row 3"),
    ("numel\n1\x00\n", "binary"),
])
def test_broken_traces_are_refused_by_row(tmp_path: Path, rows: str, expected: str) -> None:
    (tmp_path / "trace.csv").write_text(rows)
    policy = tmp_path / "policy.yaml"
    policy.write_text("jobs:\n  - id: 1\n    name: j\n    spraying: random\n"
                      "    layers_from_trace: {file: trace.csv, priorities: [7, 5]}\n")
    text = refusal(policy)
    assert "trace" in text and expected in text


def test_a_wrong_device_id_is_reported_as_the_switch_answered() -> None:
    with running_server() as client:
        transport = Transport("s1", client.server.address, DEVICE_ID + 1)
        started = time.monotonic()
        with pytest.raises(ArbitrationRefused) as err:
            transport.open(ElectionId(0, 5), timeout=60)
        # the switch's answer, not the 60 s timeout; half of it is room for a loaded machine
        assert time.monotonic() - started < 30.0
        assert "NOT_FOUND" in str(err.value) and f"device id {DEVICE_ID + 1}" in str(err.value)
