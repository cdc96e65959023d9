"""Documented commands write nowhere tracked by default: run from a clean copy of the tree, they
leave ``git status`` clean (outputs go under the ignored build/, or where ``--out`` says).

The copy holds the working tree's files (tracked, and new ones git does not ignore) committed
into a fresh repository, so the check covers the code under test, not only what is committed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
GIT = shutil.which("git")
TRAINING = "experiments/results/training"

#: Cheap documented commands (README.md, experiments/README.md, simulator/README.md,
#: p4switch/README.md), each as run from the top of the tree without --out.
COMMANDS: list[list[str]] = [
    ["gradfabric", "compile"],
    ["gradfabric", "experiment", "report", f"{TRAINING}/20261124-222721", f"{TRAINING}/20261124-231711"],
    ["gradfabric", "sim", "run", "--trace", "simulator/data/traces/googlenet_k80_8nodes_caffe.csv",
     "--workers", "4", "--schedulers", "wfbp,mgwfbp", "--gbps", "10"],
    ["p4switch", "compile", "p4src/dlcp.p4"],
    ["p4switch", "stf", "p4src/dlcp.p4", "tests/stf/dlcp_flow_hash.stf"],
]


def git(*args: str, cwd: Path) -> str:
    done = subprocess.run([GIT, "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"git {' '.join(args)} in {cwd}: {done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def clean_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if GIT is None or not (ROOT / ".git").exists():
        pytest.skip("needs git and the project's repository (a source tree without .git has no status to keep)")
    copy = tmp_path_factory.mktemp("tree")
    # tracked files and new ones not ignored: the tree as it stands, without build outputs
    for name in git("ls-files", "-z", "--cached", "--others", "--exclude-standard", cwd=ROOT).split("\0"):
        source = ROOT / name
        if name and source.is_file():  # a tracked file deleted in the work tree is left out
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, copy / name)
    shutil.copy2(ROOT / ".gitignore", copy / ".gitignore")
    git("init", "-q", cwd=copy)
    git("add", "-A", cwd=copy)
    git("commit", "-q", "-m", "copy", cwd=copy)
    assert git("status", "--porcelain", cwd=copy) == ""
    return copy


@pytest.mark.parametrize("argv", COMMANDS, ids=lambda argv: " ".join(argv[:3]))
def test_documented_command_leaves_git_status_clean(clean_copy: Path, argv: list[str]) -> None:
    env = {k: v for k, v in os.environ.items() if k != "GRADFABRIC_WORKDIR"}
    env["PYTHONPATH"] = str(clean_copy)  # the copy's packages, not the installed tree's
    tool = {"gradfabric": "gradfabric.command.cli", "p4switch": "p4switch.cli"}[argv[0]]
    done = subprocess.run([sys.executable, "-m", tool, *argv[1:]], cwd=clean_copy, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{' '.join(argv)}: exit {done.returncode}\n{done.stderr[-2000:]}"
    assert git("status", "--porcelain", "--untracked-files=all", cwd=clean_copy) == "", \
        f"`{' '.join(argv)}` wrote into the tree (outside the ignored build/, logs/, pcaps/)"


def test_the_check_sees_a_command_that_writes_into_the_tree(clean_copy: Path) -> None:
    """A report pooled into the committed results folder does show in git status."""
    env = {**os.environ, "PYTHONPATH": str(clean_copy)}
    out = f"{TRAINING}/pooled-by-test"
    done = subprocess.run([sys.executable, "-m", "gradfabric.command.cli", "experiment", "report",
                           f"{TRAINING}/20261124-222721", "--out", out],
                          cwd=clean_copy, env=env, capture_output=True, text=True, timeout=300)
    try:
        assert done.returncode == 0, done.stderr[-2000:]
        assert f"?? {out}/" in git("status", "--porcelain", cwd=clean_copy)
    finally:
        shutil.rmtree(clean_copy / out, ignore_errors=True)


def test_training_results_default_to_build(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """`experiment training` without --out (too long to run here) writes under build/results/."""
    from experiments.cli import default_out

    monkeypatch.setenv("GRADFABRIC_WORKDIR", str(tmp_path))
    folder = default_out("")
    assert folder.parent == tmp_path / "build" / "results" / "training"
    assert folder.name[:8].isdigit() and folder.name[8] == "-", folder.name
    assert default_out("pooled-").name.startswith("pooled-")
