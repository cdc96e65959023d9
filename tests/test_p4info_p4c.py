"""The P4Info p4switch writes equals p4c's, field by field, for p4src/dlcp.p4 and every test
program p4c compiles (features.p4 uses division by a run-time value, which p4c's BMv2 back end
rejects, so it is embedded-only; the programs p4c refuses are listed in
tests/test_stf_bmv2.py's P4C_REFUSES, which checks that refusal)."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from gradfabric.p4build import Artifacts, compile_embedded
from gradfabric.paths import P4SRC, ROOT
from tests.p4c_builds import p4c_build
from tests.p4info_diff import load, p4info_diff
from tests.test_stf_bmv2 import P4C_REFUSES

PROGRAMS = [P4SRC / "dlcp.p4"] + sorted(
    p for p in (ROOT / "tests" / "p4programs").glob("*.p4") if p.stem != "features" and p.stem not in P4C_REFUSES)


@pytest.fixture(scope="module")
def p4c_ahead() -> Iterator[dict[Path, Future[Artifacts]]]:
    """p4c's builds of every program (shared with the other tests that need them), two at a
    time in the background while the tests compile with the embedded front end."""
    with ThreadPoolExecutor(2) as pool:
        yield {p: pool.submit(p4c_build, p) for p in PROGRAMS}
        pool.shutdown(cancel_futures=True)


@pytest.mark.bmv2
@pytest.mark.parametrize("program", PROGRAMS, ids=[p.stem for p in PROGRAMS])
def test_p4info_equals_p4c(program: Path, tmp_path: Path, p4c_ahead: dict[Path, Future[Artifacts]]) -> None:
    ours = compile_embedded(program, tmp_path / "embedded")
    theirs = p4c_ahead[program].result()
    expected, actual = load(theirs.p4info), load(ours.p4info)
    diff = p4info_diff(expected, actual)
    assert not diff, f"{program.name}: P4Info differs from p4c's:\n" + "\n".join(diff)
    assert len(actual.actions) == len(expected.actions)


def test_the_diff_names_what_differs() -> None:
    """A renamed action parameter and a changed bit width show up by entity and field."""
    from p4switch.frontend import load_program
    from p4switch.p4info import build_p4info

    info = build_p4info(load_program(P4SRC / "dlcp.p4"))
    changed = type(info)()
    changed.CopyFrom(info)
    action = next(a for a in changed.actions if a.params)
    action.params[0].bitwidth += 1
    diff = p4info_diff(info, changed)
    assert len(diff) == 1 and diff[0].startswith(f"actions {action.preamble.name}:")
    assert f"-  bitwidth: {action.params[0].bitwidth - 1}" in diff[0]
