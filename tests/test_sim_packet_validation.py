"""The ns-3 validation table (simulator/packet/validation.py) on hand-made run records: pooled
ranks' percentiles, the error's sign, the network figures beside them and the ranking."""

from __future__ import annotations

import json
from pathlib import Path

from simulator.packet.validation import compare, write


def _run(folder: Path, name: str, config: str, iterations: list[float], rr: list[float], tcp: float) -> None:
    ranks = {str(r): {"records": [{"iteration_s": 9.0}] + [{"iteration_s": t} for t in iterations]} for r in (0, 1)}
    record = {"status": "ok", "scenario": "tcp", "config": config, "run_id": name, "port_pps": 20000,
              "jobs": {"1": {"ranks": ranks}},
              "background": [{"protocol": "rr", "fct_s": rr}, {"protocol": "tcp", "goodput_mbps": tcp}]}
    (folder / "runs").mkdir(parents=True, exist_ok=True)
    (folder / "runs" / f"{name}.json").write_text(json.dumps(record))


def test_rows_pool_every_rank_and_show_the_network_beside(tmp_path: Path) -> None:
    fabric, sim = tmp_path / "fabric", tmp_path / "sim"
    _run(fabric, "a", "gloo", [0.010, 0.030, 0.020], [0.004, 0.005, 0.006], 90.0)
    _run(fabric, "b", "qos", [0.040, 0.040, 0.040], [0.004], 80.0)
    _run(sim, "a", "gloo", [0.015, 0.015, 0.015], [0.001], 200.0)
    _run(sim, "b", "qos", [0.010, 0.010, 0.010], [0.002], 220.0)
    result = compare([fabric], [("m", sim)])
    rows = {r[3]: r for r in result["rows"]}
    # gloo: fabric iterations 10, 30, 20 ms on both ranks (iteration 0 left out): p50 20 ms.
    assert rows["gloo"][7:10] == ["20.0", "15.0", "-25%"]
    assert rows["gloo"][13:] == ["5.00 / 1.00", "90 / 200"]
    assert rows["qos"][7:10] == ["40.0", "10.0", "-75%"]
    # fabric: gloo (20) < qos (40); ns-3: qos (10) < gloo (15).
    assert result["rank_rows"] == [["cnn", "tcp", "20,000", "m", "gloo < qos", "qos < gloo", "no"]]
    assert sorted(result["errors"]["m"]) == [0.25, 0.75]
    md = write(tmp_path / "out", "cmd", [fabric], [("m", sim)])
    assert "median absolute p50 error 50% over 2 groups, 0 within 10%" in md
    assert (tmp_path / "out" / "validation.png").stat().st_size > 0


def test_folders_of_one_model_are_pooled(tmp_path: Path) -> None:
    fabric, one, two = tmp_path / "fabric", tmp_path / "one", tmp_path / "two"
    _run(fabric, "a", "gloo", [0.020, 0.020, 0.020], [0.004], 90.0)
    _run(one, "a", "gloo", [0.010, 0.010, 0.010], [0.001], 100.0)
    _run(two, "b", "gloo", [0.030, 0.030, 0.030, 0.030], [0.003], 300.0)
    result = compare([fabric], [("m", one), ("m", two)])
    # One row: 6 iterations of 10 ms and 8 of 30 ms pooled, p50 30 ms (+50%); the network
    # figures are the medians over both folders' flows (2 ms, 200 Mbit/s).
    assert [r[4:10] for r in result["rows"]] == [["m", "1", "1", "20.0", "30.0", "+50%"]]
    assert result["rows"][0][13:] == ["4.00 / 2.00", "90 / 200"]
    assert result["errors"] == {"m": [0.5]}


def test_a_models_folder_may_be_read_for_some_configurations_only(tmp_path: Path) -> None:
    from simulator.packet.validation import parse_model

    fabric, old, new = tmp_path / "fabric", tmp_path / "old", tmp_path / "new"
    _run(fabric, "a", "gloo", [0.020, 0.020, 0.020], [0.004], 90.0)
    _run(fabric, "b", "qos", [0.040, 0.040, 0.040], [0.004], 90.0)
    _run(old, "a", "gloo", [0.030, 0.030, 0.030], [0.001], 100.0)
    _run(old, "b", "qos", [0.080, 0.080, 0.080], [0.001], 100.0)  # not read: qos only from `new`
    _run(new, "b", "qos", [0.044, 0.044, 0.044], [0.003], 300.0)
    models = [parse_model(f"m={old}::gloo"), parse_model(f"m={new}")]
    assert models[0] == ("m", old, frozenset({"gloo"}), "")
    rows = {r[3]: r for r in compare([fabric], models)["rows"]}
    assert (rows["gloo"][9], rows["qos"][9], rows["qos"][14]) == ("+50%", "+10%", "90 / 300")


def test_tagged_sweeps_of_one_scenario_stay_apart_each_against_its_own_model(tmp_path: Path) -> None:
    from simulator.packet.validation import parse_fabric, parse_model

    loaded, quiet, sim_loaded, sim_quiet = (tmp_path / n for n in ("loaded", "quiet", "sl", "sq"))
    _run(loaded, "a", "gloo", [0.040, 0.040, 0.040], [0.008], 90.0)
    _run(quiet, "a", "gloo", [0.020, 0.020, 0.020], [0.004], 90.0)
    _run(sim_loaded, "a", "gloo", [0.044, 0.044, 0.044], [0.002], 100.0)
    _run(sim_quiet, "a", "gloo", [0.030, 0.030, 0.030], [0.001], 100.0)
    fabric = [parse_fabric(f"loaded={loaded}"), parse_fabric(f"quiet={quiet}")]
    assert fabric[0] == (loaded, "loaded") and parse_fabric(str(quiet)) == (quiet, "")
    models = [parse_model(f"m={sim_loaded}@loaded"), parse_model(f"m={sim_quiet}::gloo@quiet")]
    assert models[1] == ("m", sim_quiet, frozenset({"gloo"}), "quiet")
    rows = {r[1]: r for r in compare(fabric, models)["rows"]}
    # Two groups: loaded 40 ms against 44 (+10%), rr 8 / 2 ms; quiet 20 against 30 (+50%), 4 / 1 ms.
    assert (rows["tcp (loaded)"][9], rows["tcp (loaded)"][13]) == ("+10%", "8.00 / 2.00")
    assert (rows["tcp (quiet)"][9], rows["tcp (quiet)"][13]) == ("+50%", "4.00 / 1.00")
    assert len(rows) == 2


def test_a_why_file_gives_the_groups_outside_10_percent_their_cause(tmp_path: Path) -> None:
    from simulator.packet.validation import read_why

    fabric, sim = tmp_path / "fabric", tmp_path / "sim"
    _run(fabric, "a", "gloo", [0.020, 0.020, 0.020], [0.004], 90.0)
    _run(fabric, "b", "qos", [0.040, 0.040, 0.040], [0.004], 90.0)
    _run(fabric, "c", "dlcp", [0.050, 0.050, 0.050], [0.004], 90.0)
    _run(sim, "a", "gloo", [0.021, 0.021, 0.021], [0.001], 100.0)  # +5%: within 10%
    _run(sim, "b", "qos", [0.060, 0.060, 0.060], [0.001], 100.0)  # +50%: its cause from the file
    _run(sim, "c", "dlcp", [0.030, 0.030, 0.030], [0.001], 100.0)  # -40%: none given
    (tmp_path / "why.csv").write_text("model,scenario,configuration,why\nm,tcp,qos,\"the switch, off\"\nx,tcp,gloo,other\n")
    why = read_why(tmp_path / "why.csv")
    rows = {r[3]: r for r in compare([fabric], [("m", sim)], why)["rows"]}
    assert (rows["gloo"][-1], rows["qos"][-1], rows["dlcp"][-1]) == ("-", "the switch, off", "not given")
    md = write(tmp_path / "out", "cmd", [fabric], [("m", sim)], why=why)
    assert "| why not within 10% |" in md and "the switch, off |" in md
    assert (tmp_path / "out" / "validation.csv").read_text().splitlines()[0].endswith(",why not within 10%")
