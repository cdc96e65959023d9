"""Policy YAML: validation messages with key paths, trace-derived layers, table entries."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from controller.errors import PolicyError
from controller.policy import (
    DROP_CLASS,
    ECN_THRESHOLD,
    LAYER_PRIORITY,
    PROFILE,
    SPRAY_MODE,
    LayerRule,
    layers_by_volume,
    load_policy,
    mechanisms_held,
    parse_policy,
    policy_entries,
)
from controller.values import Range
from gradfabric.paths import ROOT
from tests.controller_helpers import schema

S = schema()
DEFAULT = ROOT / "controller" / "policies" / "default.yaml"


def job(**overrides) -> dict:
    base = {"id": 1, "name": "j", "spraying": "random", "layers": [{"tensors": "0..9", "priority": 7}]}
    base.update(overrides)
    return base


def problems(data) -> list[str]:
    with pytest.raises(PolicyError) as err:
        parse_policy(data, "p.yaml", hosts={"h1", "h2"})
    return err.value.problems


def test_default_policy_is_valid_and_front_layers_come_first() -> None:
    policy = load_policy(DEFAULT)
    assert policy.jobs[0].spraying == "random"
    layers = policy.jobs[0].layers
    assert layers[0].tensors[0] == 0 and layers[0].priority == max(r.priority for r in layers)
    entries = policy_entries(policy, S)
    assert {e.table for e in entries} == {SPRAY_MODE, LAYER_PRIORITY, DROP_CLASS, ECN_THRESHOLD, PROFILE}


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"jobs": [job(layers=[{"tensors": 0, "priority": 7}, {"tensors": 1, "priority": 3}, {"tensors": 2, "priority": 9}])]},
         "jobs[0].layers[2].priority: must be 0..7, got 9"),
        ({"jobs": [job(), job()]}, "jobs[1].id: 1 is already used by jobs[0]"),
        ({"jobs": [job(id=2000)]}, "jobs[0].id: must be 0..1023, got 2000"),
        ({"jobs": [job(spraying="sometimes")]}, "jobs[0].spraying: must be random, round_robin or off, got 'sometimes'"),
        ({"jobs": [job(layers=[{"tensors": "9..3", "priority": 1}])]}, "jobs[0].layers[0].tensors: must be lo..hi"),
        ({"jobs": [job(workers=["h1", "h7"])]}, "jobs[0].workers[1]: no host named 'h7' in the fabric"),
        ({"jobs": [job(dropping={"classes": [{"mag_class": "0..300", "queue_threshold": 10}]})]},
         "jobs[0].dropping.classes[0].mag_class: must be lo..hi with 0 <= lo <= hi <= 255"),
        ({"jobs": [job(dropping={"classes": [{"mag_class": "0..100"}]})]},
         "jobs[0].dropping.classes[0].queue_threshold: is required"),
        ({"jobs": [job(dropping={"enabled": True, "classes": []})]},
         "jobs[0].dropping.classes: dropping is on but lists no drop-eligible class"),
        ({"jobs": [job(ecn="on")]}, "jobs[0].ecn.queue_threshold: is required when ecn is on"),
        ({"jobs": [job(ecn={"queue_threshold": -1})]}, "jobs[0].ecn.queue_threshold: must be 0..524287"),
        ({"jobs": [job(priority="maybe")]}, "jobs[0].priority: must be on or off"),
        ({"jobs": [job(thresholds=[])]}, "jobs[0].thresholds: unknown key"),
        ({"jobs": [job(layer=[])]}, "jobs[0].layer: unknown key"),
        ({"jobs": [{"name": "x"}]}, "jobs[0].id: is required"),
        ({"jobs": [job()], "version": 2}, "version: must be 1, got 2"),
    ],
)
def test_validation_messages_give_key_path_and_reason(data: dict, expected: str) -> None:
    found = problems(data)
    assert any(p.startswith(expected) for p in found), found


def test_every_problem_is_reported_at_once() -> None:
    found = problems({"jobs": [job(id=-1, spraying=3, layers=[{"tensors": 1, "priority": 8}])]})
    assert len(found) == 3


def test_bad_yaml_names_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("jobs:\n  - id: 1\n   name: x\n")
    with pytest.raises(PolicyError, match="line 3"):
        load_policy(bad)


def test_layers_by_volume_puts_front_layers_first() -> None:
    rules = layers_by_volume([10, 10, 10, 10, 40, 20], [7, 5, 3])
    # cumulative volume before each tensor: 0 10 20 30 | 40 | 80 of 100, thirds at 33 and 67
    assert rules == (LayerRule((0, 3), 7), LayerRule((4, 4), 5), LayerRule((5, 0xFFFF), 3))


def test_layers_from_trace_file(tmp_path: Path) -> None:
    trace = tmp_path / "model.csv"
    trace.write_text("layer,allreduce_bytes\nconv1,400\nconv2,400\nfc,800\n")
    policy_file = tmp_path / "p.yaml"
    from_trace = {"file": "model.csv", "priorities": [6, 2]}
    policy_file.write_text(yaml.safe_dump({"jobs": [{"id": 3, "layers_from_trace": from_trace}]}))
    layers = load_policy(policy_file).jobs[0].layers
    assert layers == (LayerRule((0, 1), 6), LayerRule((2, 0xFFFF), 2))
    with_dscps = {**from_trace, "dscps": [46, 10]}
    policy_file.write_text(yaml.safe_dump({"profile": "commodity", "jobs": [{"id": 3, "layers_from_trace": with_dscps}]}))
    assert load_policy(policy_file).jobs[0].layers == (LayerRule((0, 1), 6, 46), LayerRule((2, 0xFFFF), 2, 10))
    policy_file.write_text(yaml.safe_dump({"jobs": [{"id": 3, "layers_from_trace": {**from_trace, "dscps": [46]}}]}))
    with pytest.raises(PolicyError, match=r"jobs\[0\].layers_from_trace.dscps: must be a list of 2 DSCPs"):
        load_policy(policy_file)
    policy_file.write_text(yaml.safe_dump({"jobs": [{"id": 3, "layers_from_trace": {"file": "nope.csv", "priorities": [6]}}]}))
    with pytest.raises(PolicyError, match=r"jobs\[0\].layers_from_trace.file: cannot use trace"):
        load_policy(policy_file)


def test_entries_first_rule_wins_and_classes_in_order() -> None:
    policy = parse_policy(
        {
            "default_priority": 1,
            "jobs": [
                job(
                    id=4,
                    spraying="off",
                    layers=[{"tensors": "0..3", "priority": 7, "mag_class": "0..100"}, {"tensors": "0..99", "priority": 2}],
                    dropping={"classes": [{"tensors": "0..3", "queue_threshold": 40},
                                          {"mag_class": "0..117", "queue_threshold": 20}]},
                    ecn={"queue_threshold": 12},
                )
            ],
        }
    )
    entries = policy_entries(policy, S)
    (spray,) = [e for e in entries if e.table == SPRAY_MODE]
    assert spray.action == "DlcpIngress.flow_hash", "spraying off names the job with the flow-hash default"
    layer = [e for e in entries if e.table == LAYER_PRIORITY and not e.is_default]
    assert [e.priority for e in layer] == [2, 1]
    assert dict(layer[0].match)["hdr.dlcp.mag_class"] == Range(0, 100)
    assert dict(layer[0].params)["prio"] == 7
    default = [e for e in entries if e.is_default and e.table == LAYER_PRIORITY]
    assert dict(default[0].params)["prio"] == 1
    drops = [e for e in entries if e.table == DROP_CLASS]
    assert [dict(e.params)["queue_threshold"] for e in drops] == [40, 20]
    assert drops[0].priority > drops[1].priority
    assert dict(drops[0].match)["hdr.dlcp.tensor_id"] == Range(0, 3)
    assert dict(drops[1].match)["hdr.dlcp.mag_class"] == Range(0, 117)
    (ecn,) = [e for e in entries if e.table == ECN_THRESHOLD]
    assert dict(ecn.params)["queue_threshold"] == 12


DROPPING = {"classes": [{"mag_class": "0..117", "queue_threshold": 8}]}
ECN = {"queue_threshold": 16}


@pytest.mark.parametrize(
    ("knobs", "tables"),
    [
        ({"priority": "off"}, {SPRAY_MODE}),
        ({"priority": "off", "spraying": "off", "dropping": DROPPING}, {DROP_CLASS}),
        ({"priority": "off", "spraying": "off", "ecn": ECN}, {ECN_THRESHOLD}),
        ({"spraying": "off"}, {LAYER_PRIORITY}),
        ({"priority": "off", "spraying": "off"}, set()),
        ({"dropping": DROPPING, "ecn": ECN}, {SPRAY_MODE, LAYER_PRIORITY, DROP_CLASS, ECN_THRESHOLD}),
        ({"dropping": {**DROPPING, "enabled": False}, "ecn": {**ECN, "enabled": "off"}}, {SPRAY_MODE, LAYER_PRIORITY}),
    ],
)
def test_each_mechanism_writes_only_its_own_table(knobs: dict, tables: set[str]) -> None:
    """A knob turned on writes its table and nothing else; off writes nothing (none implies another)."""
    entries = policy_entries(parse_policy({"jobs": [job(**knobs)]}), S)
    # spray_mode names every job: flow_hash (its default) when spraying is off
    written = {e.table for e in entries if e.table != PROFILE and e.action != "DlcpIngress.flow_hash"}
    assert written == tables
    assert {e.action for e in entries if e.table == SPRAY_MODE} <= {"DlcpIngress.spray_random", "DlcpIngress.flow_hash"}
    held = mechanisms_held(entries)[1]
    assert (held["dropping"] != "off") == (DROP_CLASS in tables)
    assert (held["ecn"] != "off") == (ECN_THRESHOLD in tables)
    assert (held["priority"] != "off") == (LAYER_PRIORITY in tables)
    assert (held["spraying"] == "random") == (SPRAY_MODE in tables)


def test_mechanisms_held_reads_back_the_default_policy() -> None:
    held = mechanisms_held(policy_entries(load_policy(DEFAULT), S))
    assert held == {1: {"priority": "on (3 layer rules)", "dropping": "on (2 classes)",
                        "ecn": "on (depth >= 32)", "spraying": "random"}}
