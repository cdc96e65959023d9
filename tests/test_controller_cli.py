"""The control-plane subcommands against fake switches of a 2x2 leaf-spine fabric."""

from __future__ import annotations

from collections.abc import Iterator
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from controller.switch import SwitchSession, SwitchStatus
from gradfabric.command import cli
from gradfabric import fabric as fabric_mod
from gradfabric.paths import ROOT
from tests.controller_helpers import leaf_spine, schema
from tests.fake_p4runtime import FakeSwitch

S = schema()
DEFAULT_POLICY = ROOT / "controller" / "policies" / "default.yaml"


@pytest.fixture
def fabric(tmp_path: Path) -> Iterator[tuple[list[FakeSwitch], Path]]:
    fakes = [FakeSwitch(device_id=i + 1).start() for i in range(4)]
    description = leaf_spine(2, 2, addrs=[f.address for f in fakes], tmp=tmp_path)
    path = fabric_mod.save(description, tmp_path / "fabric.json")
    yield fakes, path
    for f in fakes:
        f.stop()


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_routes_then_again_writes_nothing(fabric, capsys) -> None:
    fakes, path = fabric
    code, out, _ = run(capsys, "routes", "--fabric", str(path))
    assert code == 0 and "update(s) written" in out
    assert len(fakes[0].entries()) == 4 + 2  # four host routes, two ECMP members
    assert len(fakes[2].entries()) == 4  # a spine: four direct next hops
    code, out, _ = run(capsys, "routes", "--fabric", str(path))
    assert code == 0 and "(0 updates)" in out
    assert (path.parent / "s1-controller.log").read_text().count("Write") == 1


def test_routes_dry_run_lists_the_updates_and_writes_nothing(fabric, capsys) -> None:
    fakes, path = fabric
    code, out, _ = run(capsys, "routes", "--fabric", str(path), "--dry-run")
    assert code == 0 and "would be written (dry run)" in out and "s1: INSERT" in out
    assert all(not f.entries() for f in fakes)


def test_policy_apply_is_idempotent_and_show_reads_it_back(fabric, capsys) -> None:
    fakes, path = fabric
    code, out, _ = run(capsys, "policy", "apply", str(DEFAULT_POLICY), "--fabric", str(path))
    assert code == 0 and "update(s) written" in out
    writes = [f.servicer.write_requests for f in fakes]
    code, out, _ = run(capsys, "policy", "apply", str(DEFAULT_POLICY), "--fabric", str(path))
    assert code == 0 and "(0 updates)" in out
    assert [f.servicer.write_requests for f in fakes] == writes
    code, out, _ = run(capsys, "policy", "show", "--fabric", str(path))
    assert code == 0
    assert "DlcpIngress.spray_mode hdr.dlcp.job_id=1 -> DlcpIngress.spray_random()" in out
    assert "policy entries on s1 (7 entries and the default entries):" in out
    assert "s4: 7 entries, same as s1" in out
    assert ("job 1: priority=on (3 layer rules)  dropping=on (2 classes)  ecn=on (depth >= 32)  "
            "spraying=random") in out
    assert "s1: " not in out  # the first switch is not compared with itself


def test_dry_run_writes_nothing(fabric, capsys) -> None:
    fakes, path = fabric
    code, out, _ = run(capsys, "policy", "apply", str(DEFAULT_POLICY), "--fabric", str(path), "--dry-run")
    assert code == 0 and "would be written (dry run)" in out and "s2: INSERT DlcpIngress.drop_class" in out
    assert all(f.servicer.write_requests == 0 for f in fakes)


def test_invalid_policy_is_exit_1_with_key_path(fabric, capsys, tmp_path: Path) -> None:
    _, path = fabric
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"jobs": [{"id": 1, "layers": [{"tensors": "0..3", "priority": 9}]}]}))
    code, _, err = run(capsys, "policy", "apply", str(bad), "--fabric", str(path))
    assert code == 1
    assert "jobs[0].layers[0].priority: must be 0..7, got 9" in err


def test_refusal_rolls_back_and_exits_1(fabric, capsys) -> None:
    fakes, path = fabric
    thresholds = S.tables["drop_class"].id
    fakes[1].servicer.refuse = lambda u: "RESOURCE_EXHAUSTED: full" if u.entity.table_entry.table_id == thresholds else None
    code, _, err = run(capsys, "policy", "apply", str(DEFAULT_POLICY), "--fabric", str(path))
    assert code == 1 and "s2 refused 2 update(s)" in err and "rolled back" in err
    assert all(f.entries() == [] for f in fakes)


def test_show_prints_entries_in_shell_syntax(fabric, capsys) -> None:
    _, path = fabric
    run(capsys, "routes", "--fabric", str(path))
    code, out, _ = run(capsys, "show", "s1", "ipv4_lpm", "--fabric", str(path))
    assert code == 0
    assert "DlcpIngress.ipv4_lpm: 4 entries and the default entry" in out
    assert "  DlcpIngress.ipv4_lpm default" in out
    assert ("DlcpIngress.ipv4_lpm hdr.ipv4.dstAddr=10.0.1.1/32 -> DlcpIngress.set_nhop("
            "port=1, smac=00:00:00:00:01:01, dmac=00:00:0a:00:01:01)") in out
    assert "hdr.ipv4.dstAddr=10.0.2.1/32 -> DlcpIngress.set_ecmp_group(group_id=1, group_size=2)" in out
    code, _, err = run(capsys, "show", "s9", "--fabric", str(path))
    assert code == 1 and "no switch named 's9'" in err


def test_status_exit_codes(fabric, capsys) -> None:
    fakes, path = fabric
    run(capsys, "routes", "--fabric", str(path))
    code, out, _ = run(capsys, "status", "--fabric", str(path))
    assert code == 0 and out.count("yes") == 12
    fakes[3].stop()
    code, out, err = run(capsys, "status", "--fabric", str(path), "--timeout", "0.5")
    assert code == 3 and "NO" in out and err == ""
    for f in fakes[:3]:
        f.stop()
    code, out, err = run(capsys, "status", "--fabric", str(path), "--timeout", "0.2")
    assert code == 3 and f"no switch of {path} answers; is the fabric up?" in err


def test_counters_show_drops_and_spraying_balance(fabric, capsys) -> None:
    fakes, path = fabric
    run(capsys, "routes", "--fabric", str(path))
    servicer = fakes[0].servicer
    servicer.counters[(S.counters["ingress_drops"].id, 6)] = (5, 500)
    servicer.counters[(S.counters["port_tx"].id, 3 * 8 + 7)] = (42, 4200)
    members = [k for k, e in servicer.entries.items() if e.table_id == S.tables["ecmp_member"].id]
    for key, packets in zip(sorted(members), (30, 10)):
        servicer.direct_counts[key] = (packets, packets * 100)
    fakes[0].control_stats = {"packets": {}, "queue_drops": {"3:7:queue_full": 17, "4:0:queue_full": 2}}
    code, out, _ = run(capsys, "counters", "--fabric", str(path), "--switch", "s1")
    assert code == 0
    assert "magnitude_threshold" in out and "75.0%" in out and "25.0%" in out
    rows = [[cell.strip() for cell in line.split("│")[1:-1]] for line in out.splitlines()]
    assert ["s1", "3", "7", "queue_full", "17"] in rows and ["s1", "4", "0", "queue_full", "2"] in rows
    rows = [[cell.strip() for cell in line.split("│")[1:-1]] for line in out.splitlines()]
    assert ["s1", "3", "7", "42", "4,200"] in rows, "port 3, priority 7 comes from port_tx index 3 * 8 + 7"

def test_counters_watch_shows_rates_and_leaves_out_empty_tables(fabric, capsys, monkeypatch) -> None:
    fakes, path = fabric
    run(capsys, "routes", "--fabric", str(path))
    servicer = fakes[0].servicer
    cell = (S.counters["port_tx"].id, 3 * 8 + 7)
    servicer.counters[cell] = (42, 4200)
    real_sleep = time.sleep
    ticks = iter([(52, 5200), (52, 5200)])

    def sleep_then_count(seconds: float) -> None:  # 10 packets, 1000 bytes in each 0.5 s interval
        real_sleep(0.01)
        servicer.counters[cell] = next(ticks)

    monkeypatch.setattr(time, "sleep", sleep_then_count)
    watch = ["--watch", "--interval", "0.5", "--count", "2"]
    code, out, _ = run(capsys, "counters", "--fabric", str(path), "--switch", "s1", *watch)
    assert code == 0
    first, second = out.split("refresh 2 at")
    rows = [[cell.strip() for cell in line.split("│")[1:-1]] for line in first.splitlines()]
    assert ["s1", "3", "7", "20.0", "2,000.0"] in rows, "10 packets and 1,000 bytes in 0.5 s"
    assert "drops by reason" not in first, "an empty table is left out"
    assert "no traffic in the last 0.5 s" in second and "transmitted" not in second


def test_status_policy_show_and_counters_report_every_switch(fabric, capsys, monkeypatch) -> None:
    fakes, path = fabric
    run(capsys, "policy", "apply", str(DEFAULT_POLICY), "--fabric", str(path))
    fakes[0].stop()
    fakes[2].stop()
    # Parallel probing as an event, not a time: each probe waits until all four are under way,
    # which probes made one after another never reach (the barrier then breaks after 60 s).
    all_probing = threading.Barrier(len(fakes), timeout=60)
    probe = SwitchSession.status

    def probe_when_all_probe(session: SwitchSession) -> SwitchStatus:
        all_probing.wait()
        return probe(session)

    monkeypatch.setattr(SwitchSession, "status", probe_when_all_probe)
    code, out, _ = run(capsys, "status", "--fabric", str(path), "--timeout", "1")
    assert code == 3 and out.count("NO") >= 2 * 3
    assert not all_probing.broken, "dead switches are probed in parallel, not one after another"
    monkeypatch.undo()
    code, out, _ = run(capsys, "policy", "show", "--fabric", str(path), "--timeout", "0.5")
    assert code == 1
    assert "s1: UNREACHABLE" in out and "s3: UNREACHABLE" in out
    assert "policy entries on s2" in out and "s4: 7 entries, same as s2" in out
    code, out, _ = run(capsys, "counters", "--fabric", str(path), "--timeout", "0.5")
    assert code == 1 and "s1: UNREACHABLE" in out and "s3: UNREACHABLE" in out


def test_shell_execs_p4runtime_shell(fabric, capsys, monkeypatch) -> None:
    _, path = fabric
    seen: list[list[str]] = []
    monkeypatch.setattr("os.execv", lambda exe, argv: seen.append(argv))
    code, _, _ = run(capsys, "shell", "s2", "--fabric", str(path))
    assert code == 0
    argv = seen[0]
    assert argv[1:3] == ["-m", "p4runtime_sh"]
    fabric_desc = fabric_mod.load(path)
    assert argv[argv.index("--grpc-addr") + 1] == fabric_desc.switch("s2").grpc_addr
    assert argv[argv.index("--device-id") + 1] == "2"
    assert "--config" not in argv, "the shell must not reload the pipeline (that would wipe the tables)"


def test_missing_fabric_is_a_clear_error(capsys, tmp_path: Path) -> None:
    code, _, err = run(capsys, "routes", "--fabric", str(tmp_path / "nope.json"))
    assert code == 1 and "boot the fabric first" in err


def test_policy_show_into_a_closed_pipe_ends_quietly(fabric, capsys, monkeypatch) -> None:
    """`gradfabric policy show | head -1`: the reader leaves early; no traceback, exit 141."""
    _, path = fabric
    run(capsys, "routes", "--fabric", str(path))
    read_end, write_end = os.pipe()
    os.close(read_end)
    with os.fdopen(write_end, "w", buffering=1) as closed_pipe:
        monkeypatch.setattr(sys, "stdout", closed_pipe)
        code = cli.main(["policy", "show", "--fabric", str(path)])
        monkeypatch.undo()
    assert code == 141
    assert "Traceback" not in capsys.readouterr().err


def test_make_run_passes_pcap_and_args_through() -> None:
    proc = subprocess.run(["make", "--no-print-directory", "-n", "run", "PCAP=1", "ARGS=--policy x.yaml"],
                          cwd=ROOT, capture_output=True, text=True, check=True)
    line = next(l for l in proc.stdout.splitlines() if "gradfabric run" in l)
    assert line.endswith("gradfabric run --topo leafspine --target embedded --pcap --policy x.yaml"), line
