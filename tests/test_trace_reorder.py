"""experiments.trace_reorder: queue drops by port kind and queue, window cuts, on hand-made records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments.errors import ExperimentError
from experiments.trace_reorder import main, port_kinds, queue_drops, table

TOPOLOGY = {
    "switches": [{"name": "l1", "role": "leaf"}, {"name": "l2", "role": "leaf"}, {"name": "s1", "role": "spine"}],
    "links": [{"a": "l1", "a_port": 1, "b": "h1"}, {"a": "l2", "a_port": 1, "b": "h5"},
              {"a": "l1", "a_port": 5, "b": "s1", "b_port": 1}, {"a": "l2", "a_port": 5, "b": "s1", "b_port": 2}],
}


def test_ports_are_told_apart_by_what_they_face() -> None:
    kinds = port_kinds(TOPOLOGY)
    assert kinds == {("l1", 1): "host", ("l2", 1): "host", ("l1", 5): "uplink", ("s1", 1): "spine",
                     ("l2", 5): "uplink", ("s1", 2): "spine"}


def test_queue_drops_split_into_long_flows_and_the_job() -> None:
    drops = queue_drops({"queue_drops_by_queue": {"gtl1:1:5": 7, "gtl1:1:0": 2, "gtl2:5:6": 3, "gts1:2:7": 1,
                                                  "gts1:1:0": 4, "gtl1:5:3": 100}}, port_kinds(TOPOLOGY))
    assert drops == {"host q0": 2, "host q5-7": 7, "uplink q0": 0, "uplink q5-7": 3, "spine q0": 4, "spine q5-7": 1}
    with pytest.raises(ExperimentError, match="gtl1:9:0"):
        queue_drops({"queue_drops_by_queue": {"gtl1:9:0": 1}}, port_kinds(TOPOLOGY))


def _record(config: str, p50: float, reordered: int, cuts: tuple[int, int, int] | None) -> dict:
    totals = {"reordered": reordered, "retransmitted": 2, "lost": 0}
    if cuts is not None:
        totals.update(window_cuts=cuts[0], window_cuts_undone=cuts[1], window_cuts_deferred=cuts[2])
    ranks = {"0": {"role": "worker", "totals": totals,
                   "records": [{"iteration_s": 9.0, "compute_s": 1.0, "forward_wait_s": 0.0}]
                   + [{"iteration_s": p50, "compute_s": 1.0, "forward_wait_s": 0.0}] * 3}}
    return {"config": config, "status": "ok", "jobs": {"1": {"ranks": ranks}},
            "switch": {"queue_drops_by_queue": {"gtl1:1:5": reordered}}}


def test_table_takes_medians_over_runs_and_leaves_cuts_empty_where_not_recorded(tmp_path: Path,
                                                                                capsys: pytest.CaptureFixture) -> None:
    (tmp_path / "runs").mkdir()
    (tmp_path / "topology.yaml").write_text(json.dumps(TOPOLOGY))  # YAML reads JSON
    records = [_record("dlcp", 2.0, 10, (4, 6, 1)), _record("dlcp", 3.0, 30, (6, 2, 3)),
               _record("dlcp", 4.0, 20, (5, 4, 2)), _record("old", 1.0, 1, None)]
    for i, r in enumerate(records):
        (tmp_path / "runs" / f"{i:03d}.json").write_text(json.dumps(r))
    lines = table(tmp_path).splitlines()
    assert lines[2] == "| dlcp (3) | 3,000 | 20 | 2 | 0 | 5 | 4 | 2 | 0 | 20 | 0 | 0 | 0 | 0 |"
    assert lines[3] == "| old (1) | 1,000 | 1 | 2 | 0 |  |  |  | 0 | 1 | 0 | 0 | 0 | 0 |"
    assert main([str(tmp_path)]) == 0 and "dlcp (3)" in capsys.readouterr().out
    with pytest.raises(ExperimentError, match="topology"):
        table(tmp_path / "runs")
