"""`gradfabric compile`: the P4Info honours the control-plane contract; outputs land in build/."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from google.protobuf import text_format
from p4.config.v1 import p4info_pb2

from gradfabric.command import cli
from gradfabric.p4build import DEFAULT_SOURCE, P4BuildError, compile_program
from gradfabric.p4ref import ENV_PREFIX
from p4switch.device_config import pipeline_from_device_config

MF = p4info_pb2.MatchField

#: table -> [(key name, match type, bitwidth)], as the controller relies on them.
TABLE_KEYS = {
    "DlcpIngress.ipv4_lpm": [("hdr.ipv4.dstAddr", MF.LPM, 32)],
    "DlcpIngress.ecmp_member": [("meta.ecmp_group_id", MF.EXACT, 16),
                                ("meta.ecmp_member", MF.EXACT, 16)],
    "DlcpIngress.spray_mode": [("hdr.dlcp.job_id", MF.EXACT, 16)],
    "DlcpIngress.layer_priority": [("hdr.dlcp.job_id", MF.EXACT, 16),
                                   ("hdr.dlcp.tensor_id", MF.RANGE, 16),
                                   ("hdr.dlcp.mag_class", MF.RANGE, 8)],
    "DlcpIngress.drop_class": [("hdr.dlcp.job_id", MF.EXACT, 16),
                               ("hdr.dlcp.tensor_id", MF.RANGE, 16),
                               ("hdr.dlcp.mag_class", MF.RANGE, 8)],
    "DlcpIngress.switch_seed": [],
    "DlcpEgress.ecn_threshold": [("hdr.dlcp.job_id", MF.EXACT, 16)],
    "DlcpIngress.profile": [],
    "DlcpIngress.traffic_class": [("hdr.ipv4.dscp", MF.TERNARY, 6), ("hdr.ipv4.protocol", MF.TERNARY, 8),
                                  ("hdr.ipv4.srcAddr", MF.TERNARY, 32), ("hdr.ipv4.dstAddr", MF.TERNARY, 32),
                                  ("meta.l4_src", MF.TERNARY, 16), ("meta.l4_dst", MF.TERNARY, 16)],
    "DlcpIngress.queue_red": [("meta.dlcp_prio", MF.EXACT, 3)],
    "DlcpEgress.queue_ecn": [("meta.dlcp_prio", MF.EXACT, 3)],
    "DlcpEgress.link_loss": [("standard_metadata.egress_port", MF.EXACT, 9)],
    "DlcpIngress.hash_seed": [],
}
TABLE_ACTIONS = {
    "DlcpIngress.ipv4_lpm": {"DlcpIngress.set_nhop", "DlcpIngress.set_ecmp_group",
                             "DlcpIngress.drop_no_route"},
    "DlcpIngress.ecmp_member": {"DlcpIngress.set_nhop"},
    "DlcpIngress.spray_mode": {"DlcpIngress.spray_random", "DlcpIngress.spray_round_robin",
                               "DlcpIngress.flow_hash"},
    "DlcpIngress.layer_priority": {"DlcpIngress.set_priority"},
    "DlcpIngress.drop_class": {"DlcpIngress.drop_above"},
    "DlcpIngress.switch_seed": {"DlcpIngress.set_seed"},
    "DlcpEgress.ecn_threshold": {"DlcpEgress.mark_above"},
    "DlcpIngress.profile": {"DlcpIngress.profile_dlcp", "DlcpIngress.profile_commodity"},
    "DlcpIngress.traffic_class": {"DlcpIngress.set_traffic_class"},
    "DlcpIngress.queue_red": {"DlcpIngress.red_drop_above"},
    "DlcpEgress.queue_ecn": {"DlcpEgress.mark_above"},
    "DlcpEgress.link_loss": {"DlcpEgress.lose_on_link"},
    "DlcpIngress.hash_seed": {"DlcpIngress.set_hash_seed"},
}
ACTION_PARAMS = {
    "DlcpIngress.set_nhop": [("port", 9), ("smac", 48), ("dmac", 48)],
    "DlcpIngress.set_ecmp_group": [("group_id", 16), ("group_size", 16)],
    "DlcpIngress.drop_no_route": [],
    "DlcpIngress.spray_random": [],
    "DlcpIngress.spray_round_robin": [],
    "DlcpIngress.flow_hash": [],
    "DlcpIngress.set_priority": [("prio", 3), ("dscp", 6)],
    "DlcpIngress.drop_above": [("queue_threshold", 19)],
    "DlcpIngress.set_seed": [("seed", 32)],
    "DlcpEgress.mark_above": [("queue_threshold", 19)],
    "DlcpIngress.profile_dlcp": [],
    "DlcpIngress.profile_commodity": [],
    "DlcpIngress.set_traffic_class": [("prio", 3)],
    "DlcpIngress.red_drop_above": [("queue_threshold", 19)],
    "DlcpEgress.lose_on_link": [("threshold", 32)],
    "DlcpIngress.set_hash_seed": [("seed", 32)],
}
COUNTERS = {
    "DlcpEgress.port_tx": 4096,
    "DlcpIngress.ingress_drops": 8,
    "DlcpIngress.early_drops": 1024,
    "DlcpEgress.ecn_marks": 1024,
    "DlcpIngress.job_rx": 1024,
    "DlcpIngress.queue_red_drops": 4096,
    "DlcpEgress.queue_ecn_marks": 4096,
    "DlcpIngress.sprayed_member": 16384,
    "DlcpEgress.link_loss_drops": 512,
}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp("build")
    return compile_program(DEFAULT_SOURCE, out, use_p4c=False), out


@pytest.fixture(scope="module")
def p4info(built) -> p4info_pb2.P4Info:
    result, _ = built
    return text_format.Parse(result.embedded.p4info.read_text(), p4info_pb2.P4Info())


def test_outputs_are_written_under_the_build_folder(built) -> None:
    result, out = built
    assert result.embedded.p4info == out / "dlcp.p4info.txtpb"
    assert result.embedded.device_config == out / "dlcp.json"
    assert result.embedded.device_config.stat().st_size > 0
    assert result.bmv2 is None


def test_tables_keys_and_actions_follow_the_contract(p4info: p4info_pb2.P4Info) -> None:
    actions = {a.preamble.id: a.preamble.name for a in p4info.actions}
    tables = {t.preamble.name: t for t in p4info.tables}
    for name, keys in TABLE_KEYS.items():
        assert name in tables, f"missing table {name}"
        table = tables[name]
        assert [(m.name, m.match_type, m.bitwidth) for m in table.match_fields] == keys, name
        refs = {actions[r.id] for r in table.action_refs}
        assert TABLE_ACTIONS[name] <= refs, (name, refs)


def test_action_parameters_follow_the_contract(p4info: p4info_pb2.P4Info) -> None:
    actions = {a.preamble.name: a for a in p4info.actions}
    for name, params in ACTION_PARAMS.items():
        assert name in actions, f"missing action {name}"
        assert [(p.name, p.bitwidth) for p in actions[name].params] == params, name


def test_counters_follow_the_contract(p4info: p4info_pb2.P4Info) -> None:
    counters = {c.preamble.name: c for c in p4info.counters}
    for name, size in COUNTERS.items():
        assert name in counters, f"missing counter {name}"
        assert counters[name].size == size
        assert counters[name].spec.unit == p4info_pb2.CounterSpec.BOTH
    tables = {t.preamble.id: t.preamble.name for t in p4info.tables}
    direct = {c.preamble.name: c for c in p4info.direct_counters}
    assert "DlcpIngress.ecmp_member_counter" in direct
    member = direct["DlcpIngress.ecmp_member_counter"]
    assert tables[member.direct_table_id] == "DlcpIngress.ecmp_member"
    assert member.spec.unit == p4info_pb2.CounterSpec.BOTH
    assert {r.preamble.name for r in p4info.registers} <= {"DlcpIngress.rr_position", "queue_depth"}


def test_device_config_loads_into_a_pipeline(built) -> None:
    result, _ = built
    pipeline = pipeline_from_device_config(result.embedded.device_config.read_bytes())
    assert set(TABLE_KEYS) <= set(pipeline.tables)
    assert set(COUNTERS) <= set(pipeline.counters)


def test_cli_compiles_into_the_given_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["compile", "--no-p4c", "--out-dir", str(tmp_path)]) == 0
    assert (tmp_path / "dlcp.p4info.txtpb").is_file() and (tmp_path / "dlcp.json").is_file()
    assert "skipped (--no-p4c)" in capsys.readouterr().out


def test_cli_reports_a_missing_program(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["compile", str(tmp_path / "nope.p4"), "--out-dir", str(tmp_path)]) == 1
    assert "no P4 program at" in capsys.readouterr().err


def test_cli_reports_a_syntax_error_with_its_place(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.p4"
    bad.write_text("#include <core.p4>\nheader h_t { bit<8> a }\n")
    assert cli.main(["compile", str(bad), "--no-p4c", "--out-dir", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "embedded front end rejected" in err and "bad.p4:2" in err


def fake_p4c(folder: Path, body: str) -> None:
    script = folder / "p4c"
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(script.stat().st_mode | stat.S_IXUSR)


@pytest.mark.bmv2
def test_p4c_builds_bmv2_outputs_in_their_own_folder(tmp_path: Path) -> None:
    """The real p4c ($GRADFABRIC_P4REF/bin or PATH): BMv2 JSON and P4Info under bmv2/, the
    P4Info honouring the same contract as the embedded one."""
    out = tmp_path / "build"
    result = compile_program(DEFAULT_SOURCE, out, use_p4c=True)
    assert result.bmv2 is not None
    assert result.bmv2.device_config == out / "bmv2" / "dlcp.json"
    assert result.bmv2.p4info == out / "bmv2" / "dlcp.p4info.txtpb"
    assert result.embedded.device_config == out / "dlcp.json"  # the two builds never mix
    bmv2_json = json.loads(result.bmv2.device_config.read_text())
    assert {p["name"] for p in bmv2_json["pipelines"]} == {"ingress", "egress"}
    p4c_info = text_format.Parse(result.bmv2.p4info.read_text(), p4info_pb2.P4Info())
    test_tables_keys_and_actions_follow_the_contract(p4c_info)
    test_action_parameters_follow_the_contract(p4c_info)


def test_a_failing_p4c_is_reported_with_its_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_p4c(tmp_path, 'echo "dlcp.p4(12): error: something p4c dislikes" >&2\nexit 1\n')
    monkeypatch.delenv(ENV_PREFIX, raising=False)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(P4BuildError, match="something p4c dislikes"):
        compile_program(DEFAULT_SOURCE, tmp_path / "build")


def test_requiring_p4c_without_it_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(ENV_PREFIX, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(P4BuildError, match=r"p4c is neither under \$GRADFABRIC_P4REF/bin nor on PATH"):
        compile_program(DEFAULT_SOURCE, tmp_path / "build", use_p4c=True)
