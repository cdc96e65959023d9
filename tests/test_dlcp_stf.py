"""The DLCP STF tests (tests/stf/dlcp_*.stf) pass on the embedded target, each in this
process on the program loaded once; `p4switch stf` is run on one passing and one broken file."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gradfabric.paths import P4SRC, ROOT
from p4switch.frontend import load_program
from p4switch.frontend.program import Program
from p4switch.pipeline import Pipeline
from p4switch.stf import run_stf as run_stf_text

PROGRAM = P4SRC / "dlcp.p4"
STF_FILES = sorted((ROOT / "tests" / "stf").glob("dlcp_*.stf"))


def run_stf(stf: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "p4switch.cli", "stf", str(PROGRAM), str(stf)],
        capture_output=True, text=True, timeout=120,
    )


def test_every_mechanism_has_an_stf_file() -> None:
    names = {f.stem for f in STF_FILES}
    assert {"dlcp_forwarding", "dlcp_flow_hash", "dlcp_priority", "dlcp_spray",
            "dlcp_threshold_calm", "dlcp_drop_congested", "dlcp_ecn_congested",
            "dlcp_traffic_class", "dlcp_commodity", "dlcp_link_loss_none", "dlcp_link_loss_all",
            "dlcp_hash_seed", "dlcp_hash_seed_zero"} <= names


@pytest.fixture(scope="module")
def dlcp() -> Program:
    return load_program(PROGRAM)


@pytest.mark.parametrize("stf", STF_FILES, ids=[f.stem for f in STF_FILES])
def test_stf_passes(dlcp: Program, stf: Path) -> None:
    result = run_stf_text(Pipeline(dlcp), stf.read_text())
    assert result.ok, f"{stf.name}: " + "\n".join(result.failures)
    assert not result.extensions, f"p4switch extensions used: {result.extensions}"
    assert result.packets_sent > 0


def test_the_command_passes_an_stf_file() -> None:
    proc = run_stf(ROOT / "tests" / "stf" / "dlcp_forwarding.stf")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_wrong_expectation_fails(tmp_path: Path) -> None:
    """The runner really compares: the forwarding test with one output byte changed fails."""
    text = (ROOT / "tests" / "stf" / "dlcp_forwarding.stf").read_text().splitlines()
    index = next(i for i, line in enumerate(text) if line.startswith("expect 2 "))
    line = text[index]
    text[index] = line[:-1] + ("0" if line[-1] != "0" else "1")
    broken = tmp_path / "dlcp_broken.stf"
    broken.write_text("\n".join(text) + "\n")
    proc = run_stf(broken)
    assert proc.returncode == 1, proc.stderr  # 1: a mismatch (2 would be a bad STF file)
    assert "FAILED" in proc.stderr
