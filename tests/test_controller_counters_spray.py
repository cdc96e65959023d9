"""`gradfabric counters` shows the spraying balance of DLCP packets apart from flow-hashed
traffic: a 50/50 DLCP split stays 50/50 when a TCP flow loads one member (fake switches)."""

from __future__ import annotations

import json
from pathlib import Path

from controller.counters import SwitchCounters, from_json, to_json
from tests.test_controller_counters import S, cell, fabric, run  # noqa: F401  (fixture)


def test_sprayed_share_is_shown_apart_from_the_members_total(fabric, capsys) -> None:  # noqa: F811
    fakes, path = fabric
    servicer = fakes[0].servicer
    member_table = S.tables["ecmp_member"].id
    members = {}
    for key, entry in servicer.entries.items():
        if entry.table_id == member_table:
            group, member = (int.from_bytes(m.exact.value, "big") for m in entry.match)
            members[member] = (key, group)
    assert sorted(members) == [0, 1]
    # 30 DLCP packets sprayed 15/15; a TCP flow of 970 packets hashed onto member 1
    for member, total in ((0, 15), (1, 15 + 970)):
        key, group = members[member]
        servicer.direct_counts[key] = (total, total * 100)
        servicer.counters[cell("sprayed_member", group * 16 + member)] = (15, 1500)
    code, out, _ = run(capsys, "counters", "--fabric", str(path), "--switch", "s1")
    assert code == 0
    rows = [[c.strip() for c in line.split("│")[1:-1]] for line in out.splitlines()]
    group = members[0][1]
    assert ["s1", str(group), "0", "15", "1.5%", "15", "50.0%"] in rows, out
    assert ["s1", str(group), "1", "985", "98.5%", "15", "50.0%"] in rows, out
    code, out, _ = run(capsys, "counters", "--fabric", str(path), "--switch", "s1", "--json")
    ecmp = json.loads(out)["switches"]["s1"]["ecmp"]
    assert [(r["member"], r["packets"], r["sprayed_packets"]) for r in ecmp] == [(0, 15, 15), (1, 985, 15)]


def test_sprayed_counts_survive_json_and_differences(tmp_path: Path) -> None:
    before = SwitchCounters(ecmp={(3, 0): (10, 100), (3, 1): (20, 200)}, sprayed={(3, 0): (10, 100)})
    after = SwitchCounters(ecmp={(3, 0): (16, 160), (3, 1): (26, 260)}, sprayed={(3, 0): (16, 160), (3, 1): (6, 60)})
    assert from_json(to_json(after)) == after
    delta = after.minus(before)
    assert delta.sprayed == {(3, 0): (6, 60), (3, 1): (6, 60)}
    assert after.minus(SwitchCounters(sprayed={(3, 0): (99, 990)})).went_backwards()
