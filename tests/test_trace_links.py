"""The trace experiment's per-run switch state (experiments/trace_links.py): flow-hash seeds
and lossy links written to every switch of a fabric (fake P4Runtime switches of a 2x2
leaf-spine), the drop counters read back, and the lossy scenarios' links."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from experiments import trace_links
from experiments.errors import ExperimentError
from experiments.trace_configs import FULL, TOPOLOGY8, trace_scenario
from gradfabric import fabric as fabric_mod
from gradfabric.command import cli
from tests.controller_helpers import leaf_spine, schema
from tests.fake_p4runtime import FakeSwitch

S = schema()


@pytest.fixture
def fabric(tmp_path: Path) -> Iterator[tuple[list[FakeSwitch], Path]]:
    fakes = [FakeSwitch(device_id=i + 1).start() for i in range(4)]
    data = leaf_spine(2, 2, addrs=[f.address for f in fakes], tmp=tmp_path).to_dict()
    path = fabric_mod.save(fabric_mod.from_dict(data), tmp_path / "fabric.json")
    assert cli.main(["routes", "--fabric", str(path)]) == 0
    yield fakes, path
    for f in fakes:
        f.stop()


def _loss_entries(fake: FakeSwitch) -> dict[int, int]:
    """egress port -> threshold of the fake switch's link_loss entries."""
    table = S.tables[trace_links.LINK_LOSS].id
    out = {}
    for e in fake.entries():
        if e.table_id == table:
            port = int.from_bytes(e.match[0].exact.value, "big")
            out[port] = int.from_bytes(e.action.action.params[0].value, "big")
    return out


def _seed(fake: FakeSwitch) -> int | None:
    default = fake.servicer.defaults.get(S.tables[trace_links.HASH_SEED].id)
    return None if default is None else int.from_bytes(default.action.action.params[0].value, "big")


def test_thresholds_by_hand() -> None:
    assert trace_links.loss_threshold(0.0) == 0
    assert trace_links.loss_threshold(1.0) == 0xFFFFFFFF
    assert trace_links.loss_threshold(0.01) == 42949673  # 4,294,967,295 / 100 = 42,949,672.95
    with pytest.raises(ExperimentError, match="within"):
        trace_links.loss_threshold(1.5)


def test_the_lossy_scenarios_name_both_ends_of_a_spine_link() -> None:
    links = [SimpleNamespace(a=x["a"], a_port=x.get("a_port", 0), b=x["b"], b_port=x.get("b_port", 0))
             for x in yaml.safe_load(TOPOLOGY8.read_text())["links"]]
    for name, share in (("lossy-0.1", 0.001), ("lossy-1", 0.01)):
        sc = trace_scenario(name)
        assert sc.link_loss == pytest.approx(share)
        # leafspine8_training.yaml: {a: l2, a_port: 5, b: s1, b_port: 2}
        assert trace_links.lossy_ports(links, sc.lossy_links) == {"l2": [5], "s1": [2]}
        assert "ddp-tcp" in FULL[name] and "dlcp" in FULL[name]
    control = trace_scenario("lossy-0")  # the same fabric and placement with the link's loss off
    assert control.link_loss == 0.0 and trace_links.loss_threshold(control.link_loss) == 0
    assert (control.jobs, control.background, control.lossy_links) == (sc.jobs, sc.background, sc.lossy_links)
    assert "lossy-0" not in FULL
    with pytest.raises(ExperimentError, match="no link s1-s2"):
        trace_links.lossy_ports(links, [("s1", "s2")])


def test_hash_seeds_are_paired_and_vary_by_round() -> None:
    names = ["l1", "l2", "s1", "s2"]
    a = trace_links.draw_hash_seeds(names, "multitenant", 2000)
    assert a == trace_links.draw_hash_seeds(list(reversed(names)), "multitenant", 2000)
    assert all(0 < s < 1 << 32 for s in a.values()) and len(set(a.values())) == 4
    assert a != trace_links.draw_hash_seeds(names, "multitenant", 2001)


def test_a_run_state_is_written_and_the_next_one_replaces_it(fabric) -> None:
    fakes, path = fabric
    spec = fabric_mod.load(path)
    lossy = trace_links.lossy_ports(spec.links, [("s2", "s3")])  # leaf s2, spine s3
    seeds = {"s1": 11, "s2": 22, "s3": 33, "s4": 44}
    trace_links.set_run_state(path, seeds, lossy, 0.01)
    by_name = {sw.name: fake for sw, fake in zip(spec.switches, fakes)}
    assert {n: _seed(f) for n, f in by_name.items()} == seeds
    assert {n: _loss_entries(f) for n, f in by_name.items() if _loss_entries(f)} == {
        n: {p: 42949673 for p in ports} for n, ports in lossy.items()}
    assert sorted(lossy) == ["s2", "s3"]

    trace_links.set_run_state(path, {"s1": 5}, {}, 0.0)  # the next run: no loss, other seeds
    assert all(not _loss_entries(f) for f in fakes)
    assert {n: _seed(f) for n, f in by_name.items()} == {"s1": 5, "s2": 0, "s3": 0, "s4": 0}


def test_link_drops_are_read_per_port(fabric) -> None:
    fakes, path = fabric
    counter = S.counters[trace_links.LINK_LOSS_DROPS].id
    fakes[1].servicer.counters[(counter, 3)] = (7, 700)
    before = trace_links.link_drops(path, {"s2": [3, 4]})
    assert before == {"s2": {3: 7, 4: 0}}
    fakes[1].servicer.counters[(counter, 3)] = (19, 1900)
    fakes[1].servicer.counters[(counter, 4)] = (2, 200)
    after = trace_links.link_drops(path, {"s2": [3, 4]})
    assert trace_links.drops_between(before, after) == {"s2:3": 12, "s2:4": 2}
