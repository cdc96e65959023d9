"""`gradfabric counters` for measuring: JSON snapshots, differences since one, drop reasons by
the program's names, what each target can report. Against fake switches of a 2x2 leaf-spine."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from controller.counters import SwitchCounters, drop_reason_names, from_json, to_json
from gradfabric import fabric as fabric_mod
from gradfabric.command import cli
from tests.controller_helpers import leaf_spine, schema
from tests.fake_p4runtime import FakeSwitch

S = schema()
#: The reasons p4src/dlcp.p4 declares (const bit<32> DROP_* = N), written out by hand.
PROGRAM_REASONS = {1: "no_route", 2: "ttl_expired", 3: "parser_error", 4: "not_ipv4", 5: "ipv4_checksum",
                   6: "magnitude_threshold"}


def fabric_of(tmp_path: Path, target: str) -> Iterator[tuple[list[FakeSwitch], Path]]:
    fakes = [FakeSwitch(device_id=i + 1).start() for i in range(4)]
    data = leaf_spine(2, 2, addrs=[f.address for f in fakes], tmp=tmp_path).to_dict()
    data["target"] = target
    path = fabric_mod.save(fabric_mod.from_dict(data), tmp_path / "fabric.json")
    assert cli.main(["routes", "--fabric", str(path)]) == 0  # loads the pipeline, as the launcher does
    yield fakes, path
    for f in fakes:
        f.stop()


@pytest.fixture
def fabric(tmp_path: Path) -> Iterator[tuple[list[FakeSwitch], Path]]:
    yield from fabric_of(tmp_path, "embedded")


@pytest.fixture
def bmv2_fabric(tmp_path: Path) -> Iterator[tuple[list[FakeSwitch], Path]]:
    yield from fabric_of(tmp_path, "bmv2")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def cell(counter: str, index: int) -> tuple[int, int]:
    return (S.counters[counter].id, index)


def test_drop_reasons_are_the_programs_names(tmp_path: Path) -> None:
    names = drop_reason_names()
    assert {i: names[i] for i in PROGRAM_REASONS} == PROGRAM_REASONS
    assert 8 not in names, "DROP_REASONS is the counter's size, not a reason"
    source = tmp_path / "other.p4"
    source.write_text("const bit<32> DROP_REASONS = 4;\nconst bit<32>  DROP_BAD_TAG = 2; /* x */\n"
                      "  const bit<8> DROP_EARLY = 3;\nconst bit<32> NOT_A_DROP = 1;\n")
    assert drop_reason_names(source) == {2: "bad_tag", 3: "magnitude_threshold"}


def test_every_ingress_drop_is_named_on_the_table_and_in_json(fabric, capsys) -> None:
    fakes, path = fabric
    servicer = fakes[0].servicer
    servicer.counters[cell("ingress_drops", 4)] = (3, 180)  # what BMv2 used to show as ingress_drops[4]
    servicer.counters[cell("ingress_drops", 5)] = (1, 60)
    code, out, _ = run(capsys, "counters", "--fabric", str(path), "--switch", "s1")
    assert code == 0 and "ingress_drops[" not in out
    rows = [[c.strip() for c in line.split("│")[1:-1]] for line in out.splitlines()]
    assert ["s1", "not_ipv4", "3", "180"] in rows and ["s1", "ipv4_checksum", "1", "60"] in rows
    code, out, _ = run(capsys, "counters", "--fabric", str(path), "--switch", "s1", "--json")
    drops = {d["reason"]: d["packets"] for d in json.loads(out)["switches"]["s1"]["drops"]}
    assert drops["not_ipv4"] == 3 and drops["ipv4_checksum"] == 1 and drops["no_route"] == 0


def test_since_a_snapshot_gives_the_differences_of_a_phase(fabric, capsys, tmp_path: Path) -> None:
    fakes, path = fabric
    servicer = fakes[0].servicer
    servicer.counters[cell("port_tx", 3 * 8 + 7)] = (40, 4000)
    servicer.counters[cell("port_tx", 1 * 8 + 0)] = (5, 500)
    servicer.counters[cell("ingress_drops", 6)] = (2, 200)
    fakes[0].control_stats = {"packets": {}, "queue_drops": {"3:7:queue_full": 10}}
    code, out, _ = run(capsys, "counters", "--fabric", str(path), "--switch", "s1", "--json")
    assert code == 0
    before = tmp_path / "before.json"
    before.write_text(out)
    assert json.loads(out)["switches"]["s1"]["queue_drops"] == [
        {"port": 3, "priority": 7, "reason": "queue_full", "packets": 10}]
    # the phase: port 3 priority 7 sends 12 more, 3 more early drops, 4 more tail drops; port 1 idle
    servicer.counters[cell("port_tx", 3 * 8 + 7)] = (52, 5200)
    servicer.counters[cell("ingress_drops", 6)] = (5, 500)
    servicer.counters[cell("early_drops", 9)] = (3, 300)
    fakes[0].control_stats = {"packets": {}, "queue_drops": {"3:7:queue_full": 14}}
    code, out, _ = run(capsys, "counters", "--fabric", str(path), "--switch", "s1", "--since", str(before), "--json")
    assert code == 0
    doc = json.loads(out)
    s1 = doc["switches"]["s1"]
    assert s1["ports"] == [{"port": 3, "priority": 7, "packets": 12, "bytes": 1200}], "port 1 did not change"
    assert s1["drops"] == [{"reason": "magnitude_threshold", "packets": 3, "bytes": 300}]
    assert s1["queue_drops"] == [{"port": 3, "priority": 7, "reason": "queue_full", "packets": 4}]
    assert s1["jobs"] == [{"job": 9, "received_packets": 0, "received_bytes": 0, "ecn_marked_packets": 0,
                           "ecn_marked_bytes": 0, "early_dropped_packets": 3, "early_dropped_bytes": 300}]
    assert doc["since"]["snapshot"] == str(before) and doc["since"]["seconds"] >= 0
    code, out, _ = run(capsys, "counters", "--fabric", str(path), "--switch", "s1", "--since", str(before))
    rows = [[c.strip() for c in line.split("│")[1:-1]] for line in out.splitlines()]
    assert ["s1", "3", "7", "12", "1,200"] in rows and f"since {before}" in out


def test_since_says_when_counters_went_backwards(fabric, capsys, tmp_path: Path) -> None:
    fakes, path = fabric
    servicer = fakes[0].servicer
    servicer.counters[cell("port_tx", 3 * 8 + 7)] = (40, 4000)
    _, out, _ = run(capsys, "counters", "--fabric", str(path), "--switch", "s1", "--json")
    (tmp_path / "before.json").write_text(out)
    servicer.counters[cell("port_tx", 3 * 8 + 7)] = (4, 400)  # a restarted switch counts from zero
    code, out, _ = run(capsys, "counters", "--fabric", str(path), "--switch", "s1",
                       "--since", str(tmp_path / "before.json"))
    assert code == 0 and "went backwards" in out and "s1" in out


def test_a_file_that_is_no_snapshot_is_a_clear_error(fabric, capsys, tmp_path: Path) -> None:
    _, path = fabric
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"switches": {}}))
    code, _, err = run(capsys, "counters", "--fabric", str(path), "--since", str(bad))
    assert code == 1 and "not a snapshot of `gradfabric counters --json`" in err
    code, _, err = run(capsys, "counters", "--fabric", str(path), "--since", str(tmp_path / "none.json"))
    assert code == 1 and "cannot read counters snapshot" in err


def test_bmv2_says_why_no_queue_drops_and_shows_what_it_counts(bmv2_fabric, capsys) -> None:
    fakes, path = bmv2_fabric
    servicer = fakes[0].servicer
    servicer.counters[cell("early_drops", 2)] = (6, 600)
    servicer.counters[cell("ecn_marks", 2)] = (4, 400)
    fakes[0].control_stats = {"packets": {}, "queue_drops": {"3:7:queue_full": 17}}  # never asked on BMv2
    code, out, _ = run(capsys, "counters", "--fabric", str(path), "--switch", "s1")
    assert code == 0 and "queue drops: not counted on BMv2" in out and "queue_full" not in out
    rows = [[c.strip() for c in line.split("│")[1:-1]] for line in out.splitlines()]
    assert ["s1", "2", "0", "4", "6"] in rows, "job 2: received, ECN-marked, early-dropped"
    code, out, _ = run(capsys, "counters", "--fabric", str(path), "--switch", "s1", "--json")
    doc = json.loads(out)
    assert doc["target"] == "bmv2" and doc["switches"]["s1"]["queue_drops"] is None
    assert any("not counted on BMv2" in note for note in doc["notes"])


def test_bmv2_shows_queue_depths_seen_by_packets_per_queue(bmv2_fabric, capsys, tmp_path: Path) -> None:
    """Traffic classes' ECN marks and RED drops per port and priority: what a packet saw of its
    queue's depth, counted by the program, so BMv2 reports them too."""
    if "DlcpEgress.queue_ecn_marks" not in {c.name for c in S.counters}:
        pytest.skip("this build of p4src/dlcp.p4 has no per-queue class counters")
    fakes, path = bmv2_fabric
    servicer = fakes[0].servicer
    servicer.counters[cell("queue_ecn_marks", 3 * 8 + 2)] = (7, 700)
    servicer.counters[cell("queue_red_drops", 3 * 8 + 2)] = (5, 500)
    servicer.counters[cell("queue_red_drops", 4 * 8 + 0)] = (1, 100)
    code, out, _ = run(capsys, "counters", "--fabric", str(path), "--switch", "s1")
    assert code == 0
    rows = [[c.strip() for c in line.split("│")[1:-1]] for line in out.splitlines()]
    assert ["s1", "3", "2", "7", "5"] in rows and ["s1", "4", "0", "0", "1"] in rows
    code, out, _ = run(capsys, "counters", "--fabric", str(path), "--switch", "s1", "--json")
    (tmp_path / "before.json").write_text(out)
    assert json.loads(out)["switches"]["s1"]["queues"][0] == {
        "port": 3, "priority": 2, "ecn_marked_packets": 7, "ecn_marked_bytes": 700,
        "red_dropped_packets": 5, "red_dropped_bytes": 500}
    servicer.counters[cell("queue_ecn_marks", 3 * 8 + 2)] = (9, 900)
    code, out, _ = run(capsys, "counters", "--fabric", str(path), "--switch", "s1", "--json",
                       "--since", str(tmp_path / "before.json"))
    assert json.loads(out)["switches"]["s1"]["queues"] == [
        {"port": 3, "priority": 2, "ecn_marked_packets": 2, "ecn_marked_bytes": 200,
         "red_dropped_packets": 0, "red_dropped_bytes": 0}]


def test_watch_json_prints_one_difference_a_line(fabric, capsys, monkeypatch) -> None:
    fakes, path = fabric
    servicer = fakes[0].servicer
    port = cell("port_tx", 3 * 8 + 7)
    servicer.counters[port] = (42, 4200)
    real_sleep = time.sleep
    ticks = iter([(52, 5200), (52, 5200)])

    def sleep_then_count(seconds: float) -> None:
        real_sleep(0.01)
        servicer.counters[port] = next(ticks)

    monkeypatch.setattr(time, "sleep", sleep_then_count)
    code, out, _ = run(capsys, "counters", "--fabric", str(path), "--switch", "s1", "--json",
                       "--watch", "--interval", "0.5", "--count", "2")
    assert code == 0
    first, second = (json.loads(line) for line in out.splitlines())
    assert first["switches"]["s1"]["ports"] == [{"port": 3, "priority": 7, "packets": 10, "bytes": 1000}]
    assert second["switches"]["s1"]["ports"] == [] and first["interval_s"] == 0.5


def test_json_round_trip() -> None:
    c = SwitchCounters(port_prio={(3, 7): (5, 50)}, drops={"no_route": (0, 0), "not_ipv4": (1, 60)},
                       ecn_marks={2: (1, 10)}, job_rx={2: (9, 90), 4: (1, 10)}, ecmp={(1, 0): (3, 30)},
                       queue_drops={(3, 7, "queue_full"): 2}, early_drops={4: (2, 20)},
                       queue_red={(3, 1): (4, 40)}, queue_marks={(3, 1): (1, 10), (2, 0): (6, 60)})
    assert from_json(json.loads(json.dumps(to_json(c)))) == c
    assert from_json(to_json(SwitchCounters())) == SwitchCounters()


def test_the_mininet_cli_passes_a_snapshot_through() -> None:
    pytest.importorskip("mininet", reason="the Mininet CLI needs Debian's mininet module")
    from mininet_topos.console import counters_args

    assert counters_args("l1 --since before.json --json") == [
        "counters", "--switch", "l1", "--since", "before.json", "--json"]
