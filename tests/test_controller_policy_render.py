"""`gradfabric policy render`: the SONiC fragment against a schema written from SONiC's YANG
models, and the Linux tc script on the kernel (or, without prio/red, through tc's own parser)."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml

from controller.policy import load_policy, parse_policy
from controller.render.linux import render_linux
from controller.render.sonic import render_sonic
from gradfabric.command import cli
from gradfabric.paths import ROOT
from tests import netns

POLICIES = ROOT / "controller" / "policies"

# -- a schema of the config_db tables, from sonic-net/sonic-buildimage src/sonic-yang-models --
# (sonic-dscp-tc-map, sonic-tc-queue-map, sonic-scheduler, sonic-wred-profile, sonic-queue,
# sonic-port-qos-map and sonic-types' tc_type). YANG patterns match the whole value.
MAP_NAME = r"[a-zA-Z0-9]{1}([-a-zA-Z0-9_]{0,31})"        # map and WRED profile names, length 1..32
DSCP = r"6[0-3]|[1-5][0-9]?|[0-9]?"                       # DSCP_TO_TC_MAP key
QINDEX = r"[0-9]?"                                        # TC_TO_QUEUE_MAP qindex
PORT = r"Ethernet[0-9]+"                                  # a PORT name (leafref to PORT_LIST)
ECN = {"ecn_none", "ecn_green", "ecn_yellow", "ecn_red", "ecn_green_yellow", "ecn_green_red",
       "ecn_yellow_red", "ecn_all"}


def uint(low: int, high: int) -> Callable[[str], bool]:
    return lambda v: re.fullmatch(r"[0-9]+", v) is not None and low <= int(v) <= high


def pattern(p: str) -> Callable[[str], bool]:
    return lambda v: re.fullmatch(p, v) is not None


def enum(values: set[str]) -> Callable[[str], bool]:
    return lambda v: v in values


TC = uint(0, 15)                                          # stypes:tc_type
UINT64 = uint(0, 2**64 - 1)
BOOLEAN = enum({"true", "false"})

#: table -> (key check, {field: check}) for tables whose rows are records.
RECORDS: dict[str, tuple[Callable[[str], bool], dict[str, Callable[[str], bool]]]] = {
    "SCHEDULER": (lambda k: bool(k), {
        "type": enum({"DWRR", "WRR", "STRICT"}), "weight": uint(1, 100), "priority": uint(0, 9),
        "meter_type": enum({"packets", "bytes"}), "cir": UINT64, "pir": UINT64,
        "cbs": uint(0, 2**32 - 1), "pbs": uint(0, 2**32 - 1)}),
    "WRED_PROFILE": (pattern(MAP_NAME), {
        **{f"{c}_{m}_threshold": UINT64 for c in ("green", "yellow", "red") for m in ("min", "max")},
        "ecn": enum(ECN),
        **{f"wred_{c}_enable": BOOLEAN for c in ("green", "yellow", "red")},
        **{f"{c}_drop_probability": uint(0, 100) for c in ("green", "yellow", "red")}}),
    "QUEUE": (lambda k: re.fullmatch(rf"({PORT}|CPU)\|[0-9]+(-[0-9]+)?", k) is not None,
              {"scheduler": lambda v: bool(v), "wred_profile": lambda v: bool(v)}),
    "PORT_QOS_MAP": (lambda k: k == "global" or re.fullmatch(PORT, k) is not None, {
        "dscp_to_tc_map": lambda v: bool(v), "tc_to_queue_map": lambda v: bool(v),
        "tc_to_pg_map": lambda v: bool(v), "scheduler": lambda v: bool(v),
        "pfc_enable": pattern(r"([0-7](,[0-7])*)?")}),
}
#: table -> (entry key check, value check) for the maps (name -> {key: value}).
MAPS = {
    "DSCP_TO_TC_MAP": (pattern(DSCP), TC),
    "TC_TO_QUEUE_MAP": (TC, pattern(QINDEX)),
}
#: leafrefs: (table, field) -> the table whose row names it must name.
REFERENCES = {
    ("QUEUE", "scheduler"): "SCHEDULER", ("QUEUE", "wred_profile"): "WRED_PROFILE",
    ("PORT_QOS_MAP", "dscp_to_tc_map"): "DSCP_TO_TC_MAP", ("PORT_QOS_MAP", "tc_to_queue_map"): "TC_TO_QUEUE_MAP",
    ("PORT_QOS_MAP", "scheduler"): "SCHEDULER",
}


def schema_problems(fragment: dict[str, Any]) -> list[str]:
    """Every table, key and field of a config_db fragment checked against the schema above."""
    problems: list[str] = []
    for table, rows in fragment.items():
        if not isinstance(rows, dict):
            problems.append(f"{table}: not a mapping")
            continue
        if table in MAPS:
            key_ok, value_ok = MAPS[table]
            for name, entries in rows.items():
                if not pattern(MAP_NAME)(name) or len(name) > 32:
                    problems.append(f"{table}|{name}: bad map name")
                for k, v in entries.items():
                    if not isinstance(v, str) or not key_ok(k) or not value_ok(v):
                        problems.append(f"{table}|{name}: bad entry {k!r}: {v!r}")
        elif table in RECORDS:
            key_ok, fields = RECORDS[table]
            for key, record in rows.items():
                if not key_ok(key):
                    problems.append(f"{table}|{key}: bad key")
                for field_name, value in record.items():
                    if field_name not in fields:
                        problems.append(f"{table}|{key}: unknown field {field_name}")
                    elif not isinstance(value, str) or not fields[field_name](value):
                        problems.append(f"{table}|{key}.{field_name}: bad value {value!r}")
                    elif (table, field_name) in REFERENCES and value not in fragment.get(REFERENCES[(table, field_name)], {}):
                        problems.append(f"{table}|{key}.{field_name}: {value!r} names no "
                                        f"{REFERENCES[(table, field_name)]} row")
                if table == "WRED_PROFILE":
                    for color in ("green", "yellow", "red"):
                        low, high = record.get(f"{color}_min_threshold"), record.get(f"{color}_max_threshold")
                        if low and high and UINT64(low) and UINT64(high) and int(high) < int(low):
                            problems.append(f"{table}|{key}: {color} max threshold below min")
        else:
            problems.append(f"{table}: not a table of the schema")
    return problems


def render_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[str, str]:
    assert cli.main(["policy", "render", *argv]) == 0
    out = capsys.readouterr()
    return out.out, out.err


def test_the_default_policy_renders_a_fragment_the_schema_accepts(capsys) -> None:
    out, err = render_cli(capsys, str(POLICIES / "default.yaml"), "--for", "sonic")
    fragment = json.loads(out)
    assert schema_problems(fragment) == []
    assert set(fragment) == {"DSCP_TO_TC_MAP", "TC_TO_QUEUE_MAP", "SCHEDULER", "WRED_PROFILE", "QUEUE", "PORT_QOS_MAP"}
    dscp = fragment["DSCP_TO_TC_MAP"]["GRADFABRIC"]
    assert len(dscp) == 64 and (dscp["46"], dscp["34"], dscp["26"], dscp["0"], dscp["18"]) == ("7", "5", "3", "0", "0")
    # default.yaml: queue 7 (tensors 0..15) at the front-layer class's 24 packets, 5 and 3 at 16; 1,500 bytes each
    wred = fragment["WRED_PROFILE"]
    assert wred["GRADFABRIC_Q7"] == {"wred_green_enable": "true", "ecn": "ecn_green", "green_min_threshold": "36000",
                                     "green_max_threshold": "36000", "green_drop_probability": "100"}
    assert wred["GRADFABRIC_Q5"]["green_min_threshold"] == wred["GRADFABRIC_Q3"]["green_min_threshold"] == "24000"
    assert fragment["QUEUE"]["Ethernet60|7"] == {"scheduler": "GRADFABRIC_STRICT", "wred_profile": "GRADFABRIC_Q7"}
    assert fragment["QUEUE"]["Ethernet0|0"] == {"scheduler": "GRADFABRIC_BEST_EFFORT"}
    assert fragment["SCHEDULER"]["GRADFABRIC_STRICT"] == {"type": "STRICT"}
    assert len(fragment["PORT_QOS_MAP"]) == 16
    assert "WRED counters" in err and "differs between ASICs" in err


def test_the_schema_check_finds_what_the_models_refuse() -> None:
    fragment = json.loads(render_sonic(load_policy(POLICIES / "default.yaml"), ("Ethernet0",)).text)
    fragment["DSCP_TO_TC_MAP"]["GRADFABRIC"]["64"] = "1"
    fragment["TC_TO_QUEUE_MAP"]["GRADFABRIC"]["3"] = "12"
    fragment["WRED_PROFILE"]["GRADFABRIC_Q7"]["ecn"] = "ecn_sometimes"
    fragment["WRED_PROFILE"]["GRADFABRIC_Q5"]["green_max_threshold"] = "10"
    fragment["QUEUE"]["Ethernet0|3"]["scheduler"] = "NOPE"
    fragment["SCHEDULER"]["GRADFABRIC_BEST_EFFORT"]["weight"] = "0"
    fragment["PORT_QOS_MAP"]["eth0"] = {"dscp_to_tc_map": "GRADFABRIC"}
    found = schema_problems(fragment)
    assert len(found) == 7, found


def test_classes_the_maps_cannot_express_are_noted_and_left_out(tmp_path: Path, capsys) -> None:
    policy = tmp_path / "p.yaml"
    policy.write_text(yaml.safe_dump({"jobs": [], "traffic_classes": [
        {"name": "gloo", "dscp": 18, "priority": 6}, {"name": "iperf", "protocol": "tcp", "dst_port": 5201, "priority": 2}],
        "queues": [{"priority": 6, "queue_threshold": 10, "drop": "off"}]}))
    out, err = render_cli(capsys, str(policy), "--for", "sonic", "--ports", "Ethernet0,Ethernet8", "--packet-bytes", "9000")
    fragment = json.loads(out)
    assert schema_problems(fragment) == []
    assert fragment["DSCP_TO_TC_MAP"]["GRADFABRIC"]["18"] == "6"
    assert set(fragment["DSCP_TO_TC_MAP"]["GRADFABRIC"].values()) == {"0", "6"}
    assert fragment["WRED_PROFILE"]["GRADFABRIC_Q6"]["green_min_threshold"] == "90000"
    assert set(fragment["PORT_QOS_MAP"]) == {"Ethernet0", "Ethernet8"}
    assert "traffic_classes[1] (iperf): matches more than DSCP" in err
    assert "queue 6: marks ECN-capable packets but drops no Not-ECT packet early" in err


def test_render_refuses_what_dscp_classes_cannot_tell_apart(tmp_path: Path, capsys) -> None:
    policy = tmp_path / "p.yaml"
    policy.write_text(yaml.safe_dump({"profile": "commodity", "jobs": [{"id": 1, "layers": [
        {"tensors": "0..9", "priority": 7}, {"tensors": "10..99", "priority": 3}]}]}))
    assert cli.main(["policy", "render", str(policy), "--for", "sonic"]) == 1
    assert "jobs[0].layers[1].dscp: DSCP 0 already goes to queue 7" in capsys.readouterr().err
    # in the dlcp profile the policy applies (the switch writes the DSCP), but it cannot be rendered
    policy.write_text(policy.read_text().replace("profile: commodity", "profile: dlcp"))
    assert load_policy(policy).profile == "dlcp"
    assert cli.main(["policy", "render", str(policy), "--for", "linux"]) == 1
    assert "DSCP 0 already goes to queue 7" in capsys.readouterr().err


# -- Linux --------------------------------------------------------------------------------
GLOO = {"jobs": [], "traffic_classes": [
    {"name": "gloo", "dscp": 18, "protocol": "tcp", "priority": 6},
    {"name": "bulk", "src": "10.9.0.0/16", "dst_port": 5201, "protocol": "tcp", "priority": 1}],
    "queues": [{"priority": 6, "queue_threshold": 20}, {"priority": 1, "queue_threshold": 8, "ecn": "off"}]}


def tc_lines(script: str, dev: str) -> list[list[str]]:
    """The tc commands of a rendered script, with its variables filled in."""
    lines = []
    for line in script.splitlines():
        if line.startswith("tc ") and "2>/dev/null" not in line:
            lines.append(shlex.split(line.replace('"$DEV"', dev).replace('"$RATE"', "1gbit")))
    return lines


def test_the_linux_script_maps_dscp_to_bands_and_red_per_band() -> None:
    script = render_linux(parse_policy(GLOO)).text
    lines = [" ".join(words) for words in tc_lines(script, "d0")]
    assert lines[0] == "tc qdisc replace dev d0 root handle 1: prio bands 8 priomap " + " ".join(["7"] * 16)
    # queue 6 is band 1 (class 1:2), queue 1 band 6 (1:7); 20 and 8 packets of 1,500 bytes
    assert ("tc qdisc replace dev d0 parent 1:2 handle 11: red limit 126000 min 30000 max 31500 avpkt 1500 "
            "burst 20 probability 1.0 bandwidth 1gbit ecn") in lines
    assert any(line.startswith("tc qdisc replace dev d0 parent 1:7 handle 16: red limit 96000 min 12000 max 13500")
               and not line.endswith("ecn") for line in lines)
    assert ("tc filter add dev d0 parent 1: protocol ip prio 1 u32 match ip dsfield 0x48 0xfc "
            "match ip protocol 6 0xff flowid 1:2") in lines
    assert ("tc filter add dev d0 parent 1: protocol ip prio 2 u32 match ip protocol 6 0xff "
            "match ip src 10.9.0.0/16 match ip dport 5201 0xffff flowid 1:7") in lines
    assert subprocess.run(["sh", "-n"], input=script, text=True).returncode == 0


def kernel_has(ns: str, dev: str, kind: str) -> bool:
    proc = netns.in_ns(ns, "tc", "qdisc", "add", "dev", dev, "root", "handle", "9:", kind, check=False)
    netns.in_ns(ns, "tc", "qdisc", "del", "dev", dev, "root", check=False)
    return proc.returncode == 0


@pytest.mark.netns
def test_the_linux_script_runs_on_a_kernel_with_prio_and_red(lab) -> None:
    host, _ = lab.add_host(1, "10.9.0.1")
    missing = [kind for kind in ("prio", "red limit 100000 avpkt 1500") if not kernel_has(host.ns, host.iface, kind)]
    if missing:
        pytest.skip(f"this kernel has no {' and no '.join(k.split()[0] for k in missing)} qdisc: "
                    "the script is checked by tc's parser only (next test)")
    script = render_linux(parse_policy(GLOO)).text
    proc = netns.in_ns(host.ns, "sh", "-c", script, "render", host.iface, check=False)
    assert proc.returncode == 0, proc.stderr
    qdiscs = netns.in_ns(host.ns, "tc", "qdisc", "show", "dev", host.iface).stdout
    assert "qdisc prio 1: root" in qdiscs and qdiscs.count("qdisc red") == 2
    filters = netns.in_ns(host.ns, "tc", "filter", "show", "dev", host.iface).stdout
    assert "flowid 1:2" in filters and "flowid 1:7" in filters


def tc_syntax_problems(ns: str, lines: list[list[str]]) -> list[str]:
    """Lines tc's own parser refuses. tc exits 1 on a command it cannot parse (usage, 'What is');
    a parsed command the kernel refuses (a qdisc kind it lacks, the parent that kind would have
    made) exits 2 with the kernel's message."""
    problems = []
    for words in lines:
        proc = netns.in_ns(ns, *words, check=False)
        if proc.returncode not in (0, 2):
            problems.append(f"{' '.join(words)}: {proc.stderr.strip()}")
    return problems


@pytest.mark.netns
def test_the_linux_script_passes_tcs_parser(lab) -> None:
    host, _ = lab.add_host(1, "10.9.0.2")
    lines = tc_lines(render_linux(parse_policy(GLOO)).text, host.iface)
    assert len(lines) == 5
    if not all(kernel_has(host.ns, host.iface, k) for k in ("prio", "red limit 100000 avpkt 1500")):
        print("this kernel has no prio or red qdisc: the rendered script is checked by tc's parser only")
    assert tc_syntax_problems(host.ns, lines) == []
    broken = [w if w != "probability" else "probabilty" for w in lines[1]]
    assert len(tc_syntax_problems(host.ns, [broken])) == 1   # the check can fail
