"""Policy knobs for any traffic (traffic classes, queue steps), the commodity profile, and how
problems and held state are reported (one problem a line; jobs with every mechanism off)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from controller.errors import PolicyError
from controller.policy import (
    DROP_CLASS, LAYER_PRIORITY, PROFILE, QUEUE_ECN, QUEUE_RED, SPRAY_MODE, TRAFFIC_CLASS,
    describe_held, load_policy, parse_policy, policy_entries,
)
from controller.policy_classes import commodity_plan
from controller.values import Exact, Ternary
from gradfabric.paths import ROOT
from tests.controller_helpers import schema
from tests.test_controller_cli import fabric, run  # noqa: F401  (fixture)

S = schema()
POLICIES = ROOT / "controller" / "policies"


def job(**overrides) -> dict:
    base = {"id": 1, "name": "j", "layers": [{"tensors": "0..9", "priority": 7, "dscp": 46},
                                             {"tensors": "10..65535", "priority": 2, "dscp": 10}]}
    base.update(overrides)
    return base


def problems(data) -> list[str]:
    with pytest.raises(PolicyError) as err:
        parse_policy(data, "p.yaml")
    return err.value.problems


def by_table(entries, table: str) -> list:
    return [e for e in entries if e.table == table and not e.is_default]


def test_traffic_classes_become_ternary_entries_first_class_winning() -> None:
    policy = parse_policy({"jobs": [], "traffic_classes": [
        {"name": "gloo", "dscp": 18, "protocol": "tcp", "priority": 6},
        {"src": "10.0.1.0/24", "dst": "10.0.2.2", "protocol": 17, "dst_port": 5201, "priority": 1},
    ]})
    classes = by_table(policy_entries(policy, S), TRAFFIC_CLASS)
    assert [dict(e.params)["prio"] for e in classes] == [6, 1]
    assert classes[0].priority > classes[1].priority
    gloo, iperf = dict(classes[0].match), dict(classes[1].match)
    assert gloo == {"hdr.ipv4.dscp": Ternary(18, 0x3F), "hdr.ipv4.protocol": Ternary(6, 0xFF)}
    assert iperf["hdr.ipv4.srcAddr"] == Ternary(0x0A000100, 0xFFFFFF00)
    assert iperf["hdr.ipv4.dstAddr"] == Ternary(0x0A000202, 0xFFFFFFFF)
    assert iperf["meta.l4_dst"] == Ternary(5201, 0xFFFF) and "meta.l4_src" not in iperf


def test_queue_steps_write_red_and_ecn_entries_as_asked() -> None:
    policy = parse_policy({"jobs": [], "queues": [
        {"priority": 6, "queue_threshold": 20}, {"priority": 2, "queue_threshold": 9, "drop": "off"}]})
    entries = policy_entries(policy, S)
    red = {dict(e.match)["meta.dlcp_prio"]: dict(e.params)["queue_threshold"] for e in by_table(entries, QUEUE_RED)}
    ecn = {dict(e.match)["meta.dlcp_prio"]: dict(e.params)["queue_threshold"] for e in by_table(entries, QUEUE_ECN)}
    assert red == {Exact(6): 20}
    assert ecn == {Exact(6): 20, Exact(2): 9}


def test_the_profile_is_a_default_entry_dlcp_unless_asked() -> None:
    (dlcp,) = [e for e in policy_entries(parse_policy({"jobs": [job()]}), S) if e.table == PROFILE]
    assert dlcp.is_default and dlcp.action == "DlcpIngress.profile_dlcp"
    entries = policy_entries(parse_policy({"profile": "commodity", "jobs": [job(spraying="random")]}), S)
    (commodity,) = [e for e in entries if e.table == PROFILE]
    assert commodity.action == "DlcpIngress.profile_commodity"
    # The jobs' own tables are not written: their layers become DSCP classes.
    assert not by_table(entries, SPRAY_MODE) and not by_table(entries, LAYER_PRIORITY)
    classes = by_table(entries, TRAFFIC_CLASS)
    assert [(dict(e.match)["hdr.ipv4.dscp"].value, dict(e.params)["prio"]) for e in classes] == [(46, 7), (10, 2)]


def test_the_commodity_view_gives_each_job_queue_one_threshold() -> None:
    """Queue 7 holds tensors 0..9: only the front-layer class (24) shares its layers; queue 2
    the small-magnitude class (16); ECN at 32 is above both."""
    policy = parse_policy({"profile": "commodity", "jobs": [job(
        dropping={"classes": [{"tensors": "0..9", "queue_threshold": 24},
                              {"tensors": "10..65535", "mag_class": "0..117", "queue_threshold": 16}]},
        ecn={"queue_threshold": 32})],
        "queues": [{"priority": 4, "queue_threshold": 5, "ecn": "off"}]})
    plan = commodity_plan(policy)
    assert {(q.priority, q.queue_threshold, q.drop, q.ecn) for q in plan.queues} == {
        (7, 24, True, True), (2, 16, True, True), (4, 5, True, False)}
    assert plan.dscp_map() == {46: 7, 10: 2}
    ecn_only = commodity_plan(parse_policy({"jobs": [job(ecn={"queue_threshold": 12})]}))
    assert {(q.priority, q.queue_threshold, q.drop, q.ecn) for q in ecn_only.queues} == {
        (7, 12, False, True), (2, 12, False, True)}


def test_the_commodity_policy_file_is_the_default_in_the_commodity_profile() -> None:
    default, commodity = load_policy(POLICIES / "default.yaml"), load_policy(POLICIES / "commodity.yaml")
    assert (default.profile, commodity.profile) == ("dlcp", "commodity")
    assert default.jobs == commodity.jobs
    dscps = {r.priority: r.dscp for r in default.jobs[0].layers}
    assert len(set(dscps.values())) == len(dscps), "one DSCP a queue, or a DSCP switch cannot tell them apart"


@pytest.mark.parametrize(("data", "expected"), [
    ({"jobs": [], "profile": "p4"}, "profile: must be dlcp or commodity, got 'p4'"),
    ({"jobs": [], "traffic_classes": [{"priority": 3}]}, "traffic_classes[0]: matches nothing"),
    ({"jobs": [], "traffic_classes": [{"priority": 3, "dst_port": 80}]},
     "traffic_classes[0]: ports need protocol: tcp or udp"),
    ({"jobs": [], "traffic_classes": [{"priority": 3, "src": "10.0.1.1/24"}]}, "traffic_classes[0].src: must be an IPv4 prefix"),
    ({"jobs": [], "traffic_classes": [{"priority": 3, "protocol": "sctp"}]}, "traffic_classes[0].protocol: must be tcp, udp"),
    ({"jobs": [], "traffic_classes": [{"priority": 8, "dscp": 64}]}, "traffic_classes[0].dscp: must be 0..63, got 64"),
    ({"jobs": [], "queues": [{"priority": 1, "queue_threshold": 3}, {"priority": 1, "queue_threshold": 4}]},
     "queues[1].priority: queue 1 is already set by queues[0]"),
    ({"profile": "commodity", "jobs": [job(layers=[{"tensors": "0..9", "priority": 7, "dscp": 46},
                                                   {"tensors": "10..99", "priority": 2, "dscp": 46}])]},
     "jobs[0].layers[1].dscp: DSCP 46 already goes to queue 7 (jobs[0].layers[0])"),
    ({"profile": "commodity", "jobs": [job(layers=[{"tensors": "0..9", "priority": 7, "mag_class": "0..100"}])]},
     "jobs[0].layers[0].mag_class: a commodity switch classes by DSCP only"),
])
def test_class_and_profile_problems_have_key_paths(data: dict, expected: str) -> None:
    found = problems(data)
    assert any(p.startswith(expected) for p in found), found


def test_an_invalid_drop_class_reports_its_own_problem_only() -> None:
    found = problems({"jobs": [job(dropping={"classes": [{"mag_class": "0..300", "queue_threshold": 10}]})]})
    assert found == ["jobs[0].dropping.classes[0].mag_class: must be lo..hi with 0 <= lo <= hi <= 255, got '0..300'"]


@pytest.mark.parametrize("dropping", ["on", {"enabled": True}, {"classes": []}])
def test_dropping_on_without_classes_says_so(dropping) -> None:
    assert problems({"jobs": [job(dropping=dropping)]}) == [
        "jobs[0].dropping.classes: dropping is on but lists no drop-eligible class"]


def test_several_problems_come_one_a_line() -> None:
    with pytest.raises(PolicyError) as err:
        parse_policy({"jobs": [job(id=5000, spraying="x")], "version": 3}, "p.yaml")
    lines = str(err.value).splitlines()
    assert lines[0] == "p.yaml: 3 problems"
    assert sorted(line.strip().split(":")[0] for line in lines[1:]) == ["jobs[0].id", "jobs[0].spraying", "version"]


def test_a_job_with_every_mechanism_off_is_held_and_shown() -> None:
    entries = policy_entries(parse_policy({"jobs": [job(id=3, priority="off", spraying="off")]}), S)
    held = [e for e in entries if not e.is_default]
    assert [(e.table, e.action) for e in held] == [(SPRAY_MODE, "DlcpIngress.flow_hash")]
    profile = next(e for e in entries if e.table == PROFILE)
    lines = describe_held(held, profile)
    assert lines[0].startswith("profile: dlcp")
    assert lines[1].startswith("  job 3: every mechanism off")


def test_policy_show_names_the_profile_classes_and_an_all_off_job(fabric, capsys, tmp_path: Path) -> None:  # noqa: F811
    _, path = fabric
    policy = tmp_path / "p.yaml"
    policy.write_text(yaml.safe_dump({"profile": "dlcp", "jobs": [job(id=2, priority="off")],
                                      "traffic_classes": [{"dscp": 18, "protocol": "tcp", "priority": 6}],
                                      "queues": [{"priority": 6, "queue_threshold": 20}]}))
    code, out, err = run(capsys, "policy", "apply", str(policy), "--fabric", str(path))
    assert code == 0, err
    code, out, _ = run(capsys, "policy", "show", "--fabric", str(path))
    assert code == 0
    assert "profile: dlcp" in out
    assert "job 2: every mechanism off" in out
    assert "traffic class: dscp=18, protocol=6 -> queue 6" in out
    assert "queue 6: drop Not-ECT at depth >= 20, mark ECT at depth >= 20" in out
    policy.write_text((POLICIES / "commodity.yaml").read_text())
    code, out, err = run(capsys, "policy", "apply", str(policy), "--fabric", str(path))
    assert code == 0, err
    code, out, _ = run(capsys, "policy", "show", "--fabric", str(path))
    assert "profile: commodity" in out and "traffic class: dscp=46 -> queue 7" in out
    assert "job 2" not in out and DROP_CLASS not in out
