"""p4c's own v1model STF files that needed the native backend's latest constructs (signed and
wide values, sub-parsers, controls applied by type, tuples, run-time-indexed arguments,
resubmit and recirculate) pass natively and on the Python pipeline. Needs p4c 1.2.4.17's
``testdata/p4_16_samples`` named by ``$GRADFABRIC_P4C_TESTDATA`` (the whole corpus:
``python -m tests.benchmarks.stf_corpus --corpus DIR``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from p4switch.native.build import find_compiler
from tests.benchmarks.stf_corpus import _one

CORPUS = Path(os.environ.get("GRADFABRIC_P4C_TESTDATA", "/nonexistent"))
FILES = ["arith1", "arith5", "gauntlet_various_ops", "runtime-index", "saturated", "gauntlet_int_casting",
         "ipv6-switch-ml", "issue1879", "gauntlet_action_return", "gauntlet_exit_combination_14",
         "gauntlet_switch_nested_table_apply", "gauntlet_index_8", "issue1566", "issue2488",
         "subparser-with-header-stack", "v1model-special-ops", "issue1814-1"]

pytestmark = [
    pytest.mark.skipif(not (CORPUS / "arith1-bmv2.stf").exists(),
                       reason="p4c's testdata/p4_16_samples not given ($GRADFABRIC_P4C_TESTDATA)"),
    pytest.mark.skipif(find_compiler() is None, reason="no C compiler on this machine"),
]


def test_corpus_files_pass_on_both_datapaths() -> None:
    results = [_one(CORPUS / f"{name}-bmv2.stf") for name in FILES]
    failed = [r for r in results if (r["python"], r["native"]) != ("pass", "pass")]
    assert not failed, failed
