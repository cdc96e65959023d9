"""The prediction table: pooled percentiles and speed-ups against a baseline, computed by hand
on hand-made run records (no ns-3)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simulator.errors import SimulatorError
from simulator.packet.prediction import main, table


def _sweep(folder: Path, times: dict[str, list[float]], pps: float = 5000.0) -> Path:
    (folder / "runs").mkdir(parents=True)
    for i, (config, its) in enumerate(times.items()):
        record = {"status": "ok", "run_id": f"{i:03d}", "scenario": "multitenant", "config": config, "port_pps": pps,
                  "jobs": {"1": {"ranks": {"0": {"records": [{"iteration_s": 99.0}] + [{"iteration_s": t} for t in its]}}}}}
        (folder / "runs" / f"{i:03d}.json").write_text(json.dumps(record))
    return folder


def test_predicted_speedups_and_their_errors_against_the_fabric(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Iteration 0 (99 s) left out. ns-3: ddp-tcp 1, 2, 3 s (p50 2, p99 2.98), dlcp half of it:
    # 2.00x at both. Fabric: ddp-tcp 2 s, dlcp 4 s: 0.50x. Errors: ddp-tcp +0%, dlcp 1 / 4 - 1 =
    # -75% (p99 1.49 / 4), speed-up 2.00 / 0.50 - 1 = +300%.
    ns3 = _sweep(tmp_path / "ns3", {"ddp-tcp": [1.0, 2.0, 3.0], "dlcp": [0.5, 1.0, 1.5]})
    fabric = _sweep(tmp_path / "fabric", {"ddp-tcp": [2.0, 2.0, 2.0], "dlcp": [4.0, 4.0, 4.0]})
    alone = table([("ns-3", [ns3])])
    assert "| multitenant | 5,000 | ddp-tcp | ns-3 | 1 | 2,000.0 | 2,980.0 | 1.00x / 1.00x |" in alone
    assert "| multitenant | 5,000 | dlcp | ns-3 | 1 | 1,000.0 | 1,490.0 | 2.00x / 2.00x |" in alone
    both = table([("ns-3", [ns3])], [fabric])
    assert "| dlcp | ns-3 | 1 | 1,000.0 | 1,490.0 | 2.00x / 2.00x | 1 | 4,000.0 | 4,000.0 | 0.50x / 0.50x | " \
           "-75% | -63% | +300% |" in both
    assert "| ddp-tcp | ns-3 | 1 | 2,000.0 | 2,980.0 | 1.00x / 1.00x | 1 | 2,000.0 | 2,000.0 | 1.00x / 1.00x | " \
           "+0% | +49% | +0% |" in both
    assert main(["--model", f"ns-3={ns3}", "--fabric", str(fabric)]) == 0
    assert "+300%" in capsys.readouterr().out


def test_no_fabric_run_at_the_predicted_port_rate_is_an_error(tmp_path: Path) -> None:
    ns3 = _sweep(tmp_path / "ns3", {"ddp-tcp": [1.0]})
    fabric = _sweep(tmp_path / "fabric", {"ddp-tcp": [1.0]}, pps=20000.0)
    with pytest.raises(SimulatorError, match="was run on the fabric"):
        table([("ns-3", [ns3])], [fabric])
    with pytest.raises(SimulatorError, match="expected NAME=DIR"):
        main(["--model", str(ns3)])


def test_a_model_takes_some_configurations_of_a_folder_and_one_renamed(tmp_path: Path) -> None:
    # ddp-tcp from `bbr` (4 s), dlcp from `reno` (2 s; its ddp-tcp of 1 s not read), `cubic`'s
    # ddp-tcp as ddp-tcp-cubic (3 s): speed-ups against the 4 s baseline 2.00x and 1.33x.
    reno = _sweep(tmp_path / "reno", {"ddp-tcp": [1.0, 1.0], "dlcp": [2.0, 2.0]})
    bbr = _sweep(tmp_path / "bbr", {"ddp-tcp": [4.0, 4.0]})
    cubic = _sweep(tmp_path / "cubic", {"ddp-tcp": [3.0, 3.0]})
    out = table([("m", [f"{reno}::dlcp", str(bbr), f"{cubic}::ddp-tcp:ddp-tcp-cubic"])])
    assert "| multitenant | 5,000 | ddp-tcp | m | 1 | 4,000.0 | 4,000.0 | 1.00x / 1.00x |" in out
    assert "| multitenant | 5,000 | ddp-tcp-cubic | m | 1 | 3,000.0 | 3,000.0 | 1.33x / 1.33x |" in out
    assert "| multitenant | 5,000 | dlcp | m | 1 | 2,000.0 | 2,000.0 | 2.00x / 2.00x |" in out
    with pytest.raises(SimulatorError, match="one configuration, renamed"):
        table([("m", [f"{cubic}::ddp-tcp+dlcp:x"])])
