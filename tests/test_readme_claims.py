"""Every figure README.md quotes in its Results section comes from a file a listed command makes,
and every rate the READMEs and topology files quote is the one the file or constant setting it holds.

Each row of the Results table names, in its last column, the command (in backticks) and the
file it writes (a Markdown link). Every number of the row's figures column must appear in that
file as a number, and the file must say which command made it. Rates (packets/s) in README.md,
hosts/, experiments/ and the topology files are tied by RULES below to the topology YAML, the
benchmark's constants or the trace they come from.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NUMBER = re.compile(r"(?<![\w.])\d+(?:[.,]\d+)*(?!\d)")


def results_rows(readme: str) -> list[list[str]]:
    section = readme.split("\n## Results\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    assert len(rows) >= 3, "the Results section has a table with a header, a rule and rows"
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in rows[2:]]


def numbers(text: str) -> set[str]:
    return {n.replace(",", "") for n in NUMBER.findall(text)}


def test_results_table_rows_name_a_command_and_a_file() -> None:
    for row in results_rows((ROOT / "README.md").read_text()):
        assert len(row) == 3, row
        assert re.search(r"`[^`]+`", row[2]), f"no command in {row[2]!r}"
        assert re.search(r"\]\(([^)]+)\)", row[2]), f"no file in {row[2]!r}"


@pytest.mark.parametrize("row", results_rows((ROOT / "README.md").read_text()), ids=lambda r: r[0][:40])
def test_every_quoted_figure_is_in_its_source_file(row: list[str]) -> None:
    command = re.search(r"`([^`]+)`", row[2]).group(1)  # type: ignore[union-attr]
    source = ROOT / re.search(r"\]\(([^)]+)\)", row[2]).group(1)  # type: ignore[union-attr]
    text = source.read_text()
    assert f"`{command}`" in text, f"{source.relative_to(ROOT)} does not say it was made by `{command}`"
    missing = sorted(numbers(row[1]) - numbers(text))
    assert not missing, f"figures quoted in README but not in {source.relative_to(ROOT)}: {missing}"


def test_the_check_catches_a_drifted_figure() -> None:
    """A figure changed in README (1.186 -> 1.187) is no longer found in the source."""
    source = (ROOT / "experiments/results/simulation/README.md").read_text()
    assert "1.186" in numbers(source) and "1.187" not in numbers(source)
    assert numbers("1.187x (OSU fit)") - numbers(source) == {"1.187"}


# -- rates and figures the folder READMEs quote ----------------------------------------------
# Every rate (packets/s) quoted in these files must be matched by a rule below that ties it to
# the file or constant that sets it; a new quote without a rule fails, as does a stale one.
RATE = re.compile(r"(?<![\w.,])(\d{1,3}(?:,\d{3})+|\d+)\s*(?:packets/s|pps)\b")
QUOTING = ["README.md", "hosts/README.md", "experiments/README.md", "mininet_topos/*.yaml",
           "experiments/topologies/*.yaml"]
#: The commit that raised the fabrics' rates (40,000 and 20,000 packets/s); its parent holds
#: the rates of the runs made before it (2026-11-23).
RATES_RAISED = "f3fdea5"
TRAINING_TOPO = "experiments/topologies/leafspine_training.yaml"
GOOGLENET = "simulator/data/traces/googlenet_k80_4nodes_caffe.csv"


def normalized(path: Path) -> str:
    return " ".join(path.read_text().split())


def topology_switch(text: str) -> dict:
    import yaml

    return yaml.safe_load(text)["defaults"]["switch"]


def bench_constant(name: str) -> int:
    import ast

    tree = ast.parse((ROOT / "tests/benchmarks/bench_transport_fabric.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and [t.id for t in node.targets if isinstance(t, ast.Name)] == [name]:
            return int(ast.literal_eval(node.value))
    raise AssertionError(f"no {name} in tests/benchmarks/bench_transport_fabric.py")


def before_raise(path: str) -> dict:
    """The topology's switch defaults as they were before the rates were raised (git history)."""
    import shutil
    import subprocess

    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("the rates of earlier runs are read from git history, which this tree lacks")
    done = subprocess.run(["git", "show", f"{RATES_RAISED}^:{path}"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    if done.returncode != 0:
        pytest.skip(f"git history without {RATES_RAISED} (a shallow clone?): {done.stderr.strip()}")
    return topology_switch(done.stdout)


def googlenet() -> tuple[int, int]:
    """Bytes and packets one worker pushes per GoogLeNet iteration: float32 values of the trace's
    layers, one message per layer, at most MAX_COUNT_MTU_1500 values a packet."""
    import csv
    import math

    from hosts.wire import MAX_COUNT_MTU_1500

    with open(ROOT / GOOGLENET) as f:
        sizes = [int(row["numel"]) for row in csv.DictReader(f)]
    return 4 * sum(sizes), sum(math.ceil(n / MAX_COUNT_MTU_1500) for n in sizes)


FABRIC = lambda: topology_switch((ROOT / "mininet_topos/leafspine.yaml").read_text())["egress_rate_pps"]  # noqa: E731
TRAINING = lambda: topology_switch((ROOT / TRAINING_TOPO).read_text())["egress_rate_pps"]  # noqa: E731
TRAINING_BEFORE = lambda: before_raise(TRAINING_TOPO)["egress_rate_pps"]  # noqa: E731
BENCH = lambda: bench_constant("PORT_RATE_PPS")  # noqa: E731
TRACE_TOPO = "experiments/topologies/leafspine8_training.yaml"
TRACE_FABRIC = lambda: topology_switch((ROOT / TRACE_TOPO).read_text())["egress_rate_pps"]  # noqa: E731
TRACE_QUICK = "experiments/results/training/trace-quick-20261126-080603"
QUARTER = lambda: TRACE_FABRIC() / 4  # noqa: E731


def trace_job_default(name: str) -> float:
    """A default of ``TraceJob`` (experiments/training/trace_job.py), read without importing torch."""
    import ast

    tree = ast.parse((ROOT / "experiments/training/trace_job.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "TraceJob":
            for item in node.body:
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name) and item.target.id == name:
                    if isinstance(item.value, ast.Name):  # a constant of experiments.scaling (its one source)
                        import experiments.scaling

                        return float(getattr(experiments.scaling, item.value.id))
                    return float(ast.literal_eval(item.value))  # type: ignore[arg-type]
    raise AssertionError(f"no TraceJob.{name} default in experiments/training/trace_job.py")


def trace_sweep_job(name: str) -> float:
    """What the committed trace quick sweep ran with (its results.json)."""
    import json

    return float(json.loads((ROOT / TRACE_QUICK / "results.json").read_text())["meta"]["job"][name])


def same_in_both(default: str) -> float:
    """The TraceJob default, which must also be what the committed quick sweep recorded."""
    value = trace_job_default(default)
    assert value == trace_sweep_job(default), f"TraceJob.{default} {value} differs from {TRACE_QUICK}'s"
    return value

#: (file, pattern, the value each group must show). A group's value is compared at the
#: precision it is written with (1.9 matches 1.857).
RULES: list[tuple[str, str, tuple]] = [
    ("hosts/README.md", r"limited to ([\d,]+) packets/s with a (\d+)-packet queue",
     (BENCH, lambda: bench_constant("DEPTH"))),
    ("hosts/README.md", r"a port of the default fabric runs at ([\d,]+) packets/s", (FABRIC,)),
    ("hosts/README.md", r"bound 0, ([\d,]+) packets/s port", (BENCH,)),
    ("hosts/README.md", r"low on purpose \(([\d,]+) packets/s\)", (BENCH,)),
    ("hosts/README.md", r"default fabric egresses at ([\d,]+) packets/s .{0,200}?pushes and pulls ([\d.]+) MB "
     r"per worker, ([\d,]+) packets each way, so with two workers the pushes alone take ([\d.]+) s through "
     r"the server's switch port \(([\d,]+) packets\)",
     (FABRIC, lambda: googlenet()[0] / 1e6, lambda: googlenet()[1],
      lambda: 2 * googlenet()[1] / FABRIC(), lambda: 2 * googlenet()[1])),
    ("experiments/topologies/leafspine_training.yaml",
     r"switch ports forward ([\d,]+) packets/s from (\d+)-packet queues",
     (TRAINING, lambda: topology_switch((ROOT / TRAINING_TOPO).read_text())["queue_depth"])),
    ("experiments/README.md", r"port rate \| ([\d,]+) packets/s per switch port \(about 12 Mbit/s with 1,500-byte "
     r"frames\) in the sweeps of 2026-11-23 below; ([\d,]+) packets/s \(1 Gbit/s links\) since",
     (TRAINING_BEFORE, TRAINING)),
    ("experiments/README.md", r"\(([\d,]+) packets/s then, ([\d,]+) now;", (TRAINING_BEFORE, TRAINING)),
    ("experiments/README.md", r"about \d+ ms at ([\d,]+) packets/s \(about \d+ ms at ([\d,]+);",
     (TRAINING_BEFORE, TRAINING)),
    ("experiments/README.md", r"### At ([\d,]+) packets/s per port \(native switches\)", (TRAINING,)),
    ("experiments/README.md", r"rates of the native datapath: ([\d,]+) packets/s per switch port", (TRAINING,)),
    ("experiments/README.md", r"the DLCP sender paced from ([\d,]+) packets/s", (TRAINING,)),
    ("experiments/README.md", r"take about \d+ ms at ([\d,]+) packets/s against", (TRAINING,)),
    ("experiments/README.md", r"the sweeps at ([\d,]+) packets/s keep", (TRAINING_BEFORE,)),
    ("README.md", r"Training over the emulated leaf-spine at ([\d,]+) packets/s per port", (TRAINING_BEFORE,)),
    ("README.md", r"The same at ([\d,]+) packets/s per port \(native switches", (TRAINING,)),
    ("README.md", r"at a quarter of the port rate \(([\d,]+) packets/s per port, k = (\d+)",
     (QUARTER, lambda: 4 * trace_job_default("k"))),
    # The trace-driven experiment: the digits CNN's fabric, the trace fabric and the DLCP sender's pacing.
    ("experiments/README.md", r"moves [\d.]+ kB per iteration: at ([\d,]+) packets/s its communication", (TRAINING,)),
    ("experiments/README.md", r"leafspine8_training\.yaml`: 2 leaves x 4 hosts, 2 spines, 2:1 oversubscribed; "
     r"([\d,]+) packets/s per port", (TRACE_FABRIC,)),
    ("experiments/README.md", r"emulated port ([\d,]+) full frames/s", (lambda: trace_job_default("port_pps"),)),
    ("experiments/README.md", r"pacing from the port rate \(([\d,]+) packets/s\), never above it",
     (lambda: same_in_both("port_pps"),)),
    # the port-rate question (--port-pps): a quarter of the trace fabric's rate, k 4x the default's
    ("experiments/README.md", r"At a quarter of the port rate: ([\d,]+) packets/s, k = (\d+)",
     (QUARTER, lambda: 4 * trace_job_default("k"))),
    ("experiments/README.md", r"At ([\d,]+) packets/s per port the DLCP ranks do not", (TRACE_FABRIC,)),
    # the congestion-control question at the quarter rate
    ("experiments/README.md", r"Is DDP-style TCP a fair baseline at ([\d,]+) packets/s\?", (QUARTER,)),
    ("experiments/README.md", r"Every \*ddp-tcp\* figure at ([\d,]+) packets/s above ran BBR", (QUARTER,)),
    ("experiments/README.md", r"So the figures at ([\d,]+) packets/s above compare DLCP", (QUARTER,)),
    ("experiments/README.md", r"emulated port ([\d,]+) packets/s \((\d+) Mbit/s\)",
     (QUARTER, lambda: QUARTER() * 1500 * 8 / 1e6)),
    ("experiments/README.md", r"the DLCP ranks pace at ([\d,]+) packets/s;", (QUARTER,)),
    ("experiments/README.md", r"-104 µs at ([\d,]+) packets/s", (TRACE_FABRIC,)),
    ("experiments/README.md", r"\(80-87 % at ([\d,]+) packets/s\)", (TRACE_FABRIC,)),
    ("experiments/README.md", r"0\.61x at ([\d,]+) packets/s in the 10-pair sweep", (TRACE_FABRIC,)),
    ("experiments/README.md", r"`lossy-0.1` at ([\d,]+) packets/s with the same configurations", (QUARTER,)),
    # the 10-pair sweep at the quarter rate (trace10-5k-*)
    ("experiments/README.md", r"The 10-pair sweep at ([\d,]+) packets/s \(design", (QUARTER,)),
    ("experiments/README.md", r"At ([\d,]+) packets/s per port the 10-pair sweep has", (TRACE_FABRIC,)),
    ("experiments/README.md", r"At ([\d,]+) packets/s the evidence that DLCP", (QUARTER,)),
    ("experiments/README.md", r"DDP-style TCP at ([\d,]+) packets/s, scenario by scenario", (QUARTER,)),
    ("README.md", r"10 pairs at ([\d,]+) packets/s per port \(`--port-pps", (QUARTER,)),
    ("experiments/README.md", r"beside the 10-pair sweep at ([\d,]+) packets/s \(same scenarios", (TRACE_FABRIC,)),
    ("experiments/README.md", r"\| ([\d,]+) packets/s \(10 pairs\) \| ([\d,]+) packets/s \(10 pairs\) \|",
     (QUARTER, TRACE_FABRIC)),
    ("experiments/README.md", r"\*\*Reading\.\*\* At ([\d,]+) packets/s DLCP is no longer", (QUARTER,)),
    # the ablation in `tcp` at the quarter rate (ablation10-5k-tcp)
    ("experiments/README.md", r"speed-up: the ablation at ([\d,]+) packets/s \(design", (QUARTER,)),
    ("experiments/README.md", r"In `tcp` at ([\d,]+) packets/s full DLCP is 1\.77x", (QUARTER,)),
    ("experiments/README.md", r"had 2 starved pairs at ([\d,]+) packets/s and no claim", (TRACE_FABRIC,)),
    ("experiments/README.md", r"in `tcp` at ([\d,]+) packets/s, which of DLCP", (QUARTER,)),
]

# A topology file's comment about its own rate (where it has one) says what its defaults set.
for _topology in sorted([*ROOT.glob("mininet_topos/*.yaml"), *ROOT.glob("experiments/topologies/*.yaml")]):
    if re.search(r"[Pp]orts forward [\d,]+ packets/s", normalized(_topology)):
            RULES.append((str(_topology.relative_to(ROOT)), r"[Pp]orts forward ([\d,]+) packets/s",
                      (lambda path=_topology: topology_switch(path.read_text())["egress_rate_pps"],)))

#: A run of hosts/README.md's switch-path table: DLCP with GSO, without, the blaster's forwarded of offered, ratio.
GSO_ROW = r"\| ([\d,]+) packets/s \| ([\d,]+) packets/s \| ([\d,]+) of ([\d,]+) offered \| ([\d.]+)x \|"

#: Rates measured once and quoted with what they were computed from: (file, pattern, check of
#: the match returning a problem or None). The command is named in the sentence.
MEASURED: list[tuple[str, str, object]] = [
    # agent send -> agent recv over loopback before the C path (commit b850dd1): packets / seconds
    ("hosts/README.md", r"took ([\d.]+)-([\d.]+) s \(([\d,]+) data packets, ([\d,]+)-([\d,]+) packets/s\)",
     lambda m: None if (round(_n(m[3]) / _n(m[2]), -3), round(_n(m[3]) / _n(m[1]), -3)) == (_n(m[4]), _n(m[5]))
     else f"{m[3]} packets in {m[1]}-{m[2]} s is not {m[4]}-{m[5]} packets/s"),
    # the trace quick sweep's DLCP transport rate on the fabric, as its folder README measured and states it
    ("experiments/README.md", r"its Python transport moving ([\d,]+)-([\d,]+) packets/s on the fabric",
     lambda m: None if f"moved at about {m[1]}-{m[2]} packets/s" in normalized(ROOT / TRACE_QUICK / "README.md")
     else f"{TRACE_QUICK}/README.md does not state {m[1]}-{m[2]} packets/s"),
    # hosts/README.md quotes the same quick sweep's rate, on the trace fabric (its ports' rate)
    ("hosts/README.md", r"DLCP ranks moved about ([\d,]+)-([\d,]+) packets/s on",
     lambda m: None if f"moved at about {m[1]}-{m[2]} packets/s" in normalized(ROOT / TRACE_QUICK / "README.md")
     else f"{TRACE_QUICK}/README.md does not state {m[1]}-{m[2]} packets/s"),
    ("hosts/README.md", r"ports (?:of )?([\d,]+) packets/s, 51-packet queues\)",
     lambda m: None if shown_as(m[1], TRACE_FABRIC()) else f"{m[1]} is not the trace fabric's {TRACE_FABRIC()}"),
    # sampled pacing rates of an instrumented run: medians below the port rate they were capped by
    ("hosts/README.md", r"medians of ([\d,]+)-([\d,]+) packets/s",
     lambda m: None if _n(m[1]) <= _n(m[2]) <= TRACE_FABRIC() else f"{m[1]}-{m[2]} is not a range under the port rate"),
    # the switch-path table with UDP GSO: each run's ratio is its DLCP rate over what the blaster got through
    ("hosts/README.md", GSO_ROW,
     lambda m: None if shown_as(m[5], _n(m[1]) / _n(m[3])) and _n(m[3]) <= _n(m[4])
     else f"{m[1]} over {m[3]} forwarded (of {m[4]}) is not {m[5]}x"),
    ("hosts/README.md", r"\| - \| ([\d,]+)-([\d,]+) packets/s \| ([\d,]+)-([\d,]+) forwarded \| ([\d.]+)-([\d.]+)x \(no GSO\) \|",
     lambda m: None if _n(m[1]) / _n(m[4]) <= float(m[5]) <= float(m[6]) <= _n(m[2]) / _n(m[3])
     else f"ratios {m[5]}-{m[6]} are outside what {m[1]}-{m[2]} over {m[3]}-{m[4]} allow"),
    # prose quoting that table's quiet run with GSO: DLCP against the blaster's best
    ("hosts/README.md", r"\(goal 0\.8x; ([\d,]+) against ([\d,]+) packets/s",
     lambda m: None if re.search(rf"\| {m[1]} packets/s \| [\d,]+ packets/s \| {m[2]} of [\d,]+ offered \|",
                                 normalized(ROOT / "hosts/README.md"))
     else f"{m[1]} against {m[2]} is not a row of the switch-path table"),
    # prose quoting that table: the quiet baseline, the profiled run, the GRO trial against a table run
    ("hosts/README.md", r"against ([\d,]+)-([\d,]+) packets/s at load 1-2\)",
     lambda m: None if f"| {m[1]}-{m[2]} forwarded |" in normalized(ROOT / "hosts/README.md")
     else f"{m[1]}-{m[2]} is not the table's quiet baseline"),
    ("hosts/README.md", r"; ([\d,]+) packets/s under the profiler",
     lambda m: None if min(gso := _gso_rates()) <= _n(m[1]) <= max(gso)
     else f"{m[1]} is outside the benchmark runs' {min(gso)}-{max(gso)} packets/s with GSO"),
    ("hosts/README.md", r"cost more: ([\d,]+) packets/s and ([\d,]+) ns per packet at the receiver, against ([\d,]+) "
     r"and ([\d,]+) ns without",
     lambda m: None if _n(m[1]) < _n(m[3]) and _n(m[2]) > _n(m[4]) and _n(m[3]) in _gso_rates()
     else f"{m[1]} packets/s at {m[2]} ns is not a cost against the table's {m[3]} at {m[4]} ns"),
    # where DLCP's iteration goes (a timing-log run): the rate sent as a share of the trace port
    ("experiments/README.md", r"\| ([\d,]+) packets/s, (\d+) % of the port \|",
     lambda m: None if round(100 * _n(m[1]) / TRACE_FABRIC()) == int(m[2])
     else f"{m[1]} packets/s is not {m[2]} % of the trace port's {TRACE_FABRIC()}"),
    # ... packets in flight over the answers' time
    ("experiments/README.md", r"about (\d+) packets per ([\d.]+)-([\d.]+) ms is ([\d,]+)-([\d,]+) packets/s",
     lambda m: None if (round(_n(m[1]) / _n(m[3]) * 1e3, -2), round(_n(m[1]) / _n(m[2]) * 1e3, -2)) == (_n(m[4]), _n(m[5]))
     else f"{m[1]} packets per {m[2]}-{m[3]} ms is not {m[4]}-{m[5]} packets/s"),
    # ... sampled rates of that run and of a single trial run: below the port rate
    ("experiments/README.md", r"rate received was ([\d,]+)-([\d,]+) packets/s while .{0,120}? and ([\d,]+)-([\d,]+) "
     r"packets/s in its last",
     lambda m: None if _n(m[1]) <= _n(m[2]) <= _n(m[3]) <= _n(m[4]) <= TRACE_FABRIC()
     else f"{m[1]}-{m[2]} and {m[3]}-{m[4]} are not rising ranges under the port rate"),
    ("experiments/README.md", r"a rank sends ([\d,]+) packets/s \((\d+) % of the port\)",
     lambda m: None if f"| {m[1]} packets/s, {m[2]} % of the port |" in normalized(ROOT / "experiments/README.md")
     else f"{m[1]} packets/s ({m[2]} %) is not the timing table's row"),
    # the port-rate timed round: the rank's rate over the communication phase (its timing.txt) as a
    # share of the quarter-rate port
    ("experiments/README.md", r"a rank sends ([\d,]+) packets/s over the communication phase: (\d+) % of the port",
     lambda m: None if round(100 * _n(m[1]) / QUARTER()) == int(m[2]) and all(
         abs(x - _n(m[1])) <= 10 for x in _timed_sent_pps()) else f"{m[1]} packets/s ({m[2]} %) is not the timed round's"),
    ("experiments/README.md", r"SRTT 64 ms \(up to 200 ms\), ([\d,]+) packets/s,",
     lambda m: None if _n(m[1]) <= TRACE_FABRIC() else f"{m[1]} is above the port rate"),
]


def _timed_sent_pps() -> list[float]:
    """Each DLCP rank's median packets/s over the communication phase in the port-rate timed round."""
    text = (ROOT / "experiments/results/training/portrate5k-timed-lossy-0.1-20261127/timing.txt").read_text()
    rates = [float(x) for x in re.findall(r"sent_pps\s+median\s+([\d.]+)", text)]
    assert len(rates) == 2, "the timed round's timing.txt has two ranks"
    return rates


def _gso_rates() -> list[float]:
    """The DLCP rates with UDP GSO in hosts/README.md's switch-path table."""
    return [_n(m[1]) for m in re.finditer(GSO_ROW, normalized(ROOT / "hosts/README.md"))]


def _n(written: str) -> float:
    return float(written.replace(",", ""))


def shown_as(written: str, value: float) -> bool:
    """``written`` (``40,000``, ``1.9``) is ``value`` at the precision it is written with."""
    plain = written.replace(",", "")
    decimals = len(plain.split(".")[1]) if "." in plain else 0
    return round(value, decimals) == float(plain)


def quoting_files() -> list[Path]:
    return sorted({p for pattern in QUOTING for p in ROOT.glob(pattern)})


@pytest.mark.parametrize("rule", RULES, ids=lambda r: f"{r[0]}: {r[1][:40]}")
def test_quoted_rate_or_figure_is_what_its_source_sets(rule: tuple) -> None:
    name, pattern, sources = rule
    found = list(re.finditer(pattern, normalized(ROOT / name)))
    assert found, f"{name} no longer says /{pattern}/: update the rule in tests/test_readme_claims.py with the text"
    for match in found:
        for written, source in zip(match.groups(), sources):
            value = source()
            assert shown_as(written, value), f"{name} quotes {written} in {match.group(0)!r}; its source sets {value}"


@pytest.mark.parametrize("rule", MEASURED, ids=lambda r: f"{r[0]}: {r[1][:40]}")
def test_measured_rate_is_what_its_figures_give(rule: tuple) -> None:
    name, pattern, check = rule
    found = list(re.finditer(pattern, normalized(ROOT / name)))
    if not found:
        pytest.skip(f"{name} does not quote this measurement (any rate it quotes needs a rule)")
    problems = [problem for m in found if (problem := check(m))]
    assert not problems, f"{name}: {problems}"


def test_every_quoted_rate_has_a_rule() -> None:
    uncovered = []
    for path in quoting_files():
        name = str(path.relative_to(ROOT))
        text = normalized(path)
        spans = [m.span() for r in [*RULES, *MEASURED] if r[0] == name for m in re.finditer(r[1], text)]
        for m in RATE.finditer(text):
            if not any(a <= m.start() and m.end() <= b for a, b in spans):
                uncovered.append(f"{name}: ...{text[max(0, m.start() - 60):m.end() + 20]}...")
    assert not uncovered, ("rates quoted without a rule tying them to their source "
                           "(add one to RULES in tests/test_readme_claims.py):\n" + "\n".join(uncovered))


def test_the_rate_check_catches_the_stale_default() -> None:
    """The old sentence (default fabric at 2,000 packets/s) fails against leafspine.yaml's rate."""
    stale = "a port of the default fabric runs at 2,000 packets/s"
    match = re.search(RULES[1][1], stale)
    assert match and not shown_as(match.group(1), FABRIC())
    assert shown_as("1.9", 1.857) and not shown_as("1.8", 1.857) and shown_as("40,000", 40000)
    _, pattern, check = MEASURED[0]
    assert check(re.search(pattern, "took 2.4-2.6 s (69,275 data packets, 27,000-29,000 packets/s)")) is None
    assert check(re.search(pattern, "took 2.4-2.6 s (69,275 data packets, 30,000-31,000 packets/s)"))


def test_layout_table_lists_every_part() -> None:
    """README.md's layout table names every top-level folder of the tree and the command's package,
    and names nothing that is gone."""
    import subprocess

    section = (ROOT / "README.md").read_text().split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"^\| `([\w/]+)/` \|", section, re.MULTILINE))
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    if tracked.returncode != 0:
        pytest.skip(f"needs the project's git repository to know its folders: {tracked.stderr.strip()}")
    folders = {name.split("/")[0] for name in tracked.stdout.splitlines() if "/" in name and not name.startswith(".")}
    assert folders | {"gradfabric/command"} == listed, (
        f"layout table out of date: missing {sorted(folders - listed)}, gone {sorted(listed - folders - {'gradfabric/command'})}")
    assert (ROOT / "gradfabric" / "command" / "cli.py").is_file()


# -- the trace-driven experiment's claims (README.md, experiments/README.md) -----------------
# Each committed trace sweep folder linked from experiments/README.md, and what the READMEs say
# of it, read from its runs/*.json and results.json.
TRACE_FOLDERS = re.compile(r"\]\(results/training/(trace-[\w-]+)/README\.md\)")


def trace_folders() -> list[Path]:
    names = dict.fromkeys(TRACE_FOLDERS.findall((ROOT / "experiments" / "README.md").read_text()))
    return [ROOT / "experiments" / "results" / "training" / n for n in names]


def trace_records(folder: Path) -> list[dict]:
    import json

    return [json.loads(p.read_text()) for p in sorted((folder / "runs").glob("*.json"))]


def trace_summary(folder: Path) -> dict:
    import json

    return json.loads((folder / "results.json").read_text())["summary"]


def test_trace_readme_paragraph_matches_the_committed_sweeps() -> None:
    """README.md: the trace experiment's smoke test "(every run was CPU-starved, no finding)";
    "the mechanisms now act in a training job (magnitude drops, ECN marks, layer-wise
    overlap)"."""
    text = normalized(ROOT / "README.md").split("The trace-driven experiment (`gradfabric experiment trace`", 1)[1]
    text = text.split("## ", 1)[0]
    folders = trace_folders()
    assert len(folders) >= 2, "experiments/README.md links the committed trace sweeps"
    ok = [r for f in folders for r in trace_records(f) if r["status"] == "ok"]
    for phrase in ("every run was CPU-starved",
                   "The mechanisms now act in a training job (magnitude drops, ECN marks, layer-wise overlap)"):
        assert phrase in text, f"README.md no longer says {phrase!r}: update this test with the text"
    assert ok and all(r["cpu_starved"] for r in ok), "README says every trace run was CPU-starved"
    from experiments.trace_report import run_figures

    figures = [run_figures(r) for r in ok if r["config"] == "dlcp"]
    assert any(f["magnitude_drops"] for f in figures) and any(f["ecn_marks"] for f in figures)
    assert any(f["overlap_share"] > 0 for f in figures)


def test_trace_mechanisms_figures_are_its_results() -> None:
    """experiments/README.md's sentence on the mechanisms-alone sweep: each speed-up and the
    dropping run's share are the folder's results.json (paired p50 medians)."""
    name = "trace-mechanisms-20261126-090158"
    folder = ROOT / "experiments" / "results" / "training" / name
    text = normalized(ROOT / "experiments" / "README.md").split(f"[{name}]", 1)[1][:900]
    s = trace_summary(folder)["tcp"]
    rounds = re.search(r"(\d+) rounds, all runs CPU-starved", text)
    assert rounds and all(s[c]["runs"] == int(rounds.group(1)) == s[c]["cpu_bound"] for c in s)
    for phrase, config in (("the DLCP transport", "transport"), ("in its own class", "transport-qos"),
                           ("dropping", "dropping"), ("spraying", "spraying"),
                           ("per-layer priority with layer-wise overlap", "priority")):
        m = re.search(re.escape(phrase) + r" ([\d.]+)x", text)
        assert m, f"experiments/README.md no longer quotes /{phrase} N.NNx/ for {name}"
        assert shown_as(m.group(1), s[config]["speedup_p50"]["median"]), (phrase, m.group(1))
    m = re.search(r"\(([\d.]+)% zero-filled by queue overflow within the bound, (\d+) magnitude drops\)", text)
    assert m and shown_as(m.group(1), s["dropping"]["loss_share"] * 100)
    assert int(m.group(2)) == s["dropping"]["magnitude_drops"]


def test_trace_claims_catch_a_drifted_figure() -> None:
    """0.33x written as 0.34x no longer matches the transport's paired median."""
    s = trace_summary(ROOT / "experiments" / "results" / "training" / "trace-mechanisms-20261126-090158")["tcp"]
    assert shown_as("0.33", s["transport"]["speedup_p50"]["median"])
    assert not shown_as("0.34", s["transport"]["speedup_p50"]["median"])

