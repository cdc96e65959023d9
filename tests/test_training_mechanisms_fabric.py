"""DLCP's mechanisms acting in a training job on the fabric (root, network namespaces; issue 28).

One fabric for the module (the trace experiment's 8-host leaf-spine, 20,000 packets/s and 51
packets per queue), four short runs of a 2-rank ResNet-50 trace job (ring h1-h5, k = 1,
3 iterations) through the sweep's own code (:func:`experiments.trace_sweep.run_trace_once`):

* **full DLCP in the background's class**, ``tcp`` scenario: the ``dlcp`` configuration with
  every layer rule at priority 0, the class of the long TCP flows into both ranks' ports, so
  the job's queue builds. Asserted: (a) the switches drop the job's data packets by
  magnitude, and not one when the ranks mark nothing drop-eligible (another run: the same
  policy and congestion, no loss bound); (b) what the receivers zero-filled is what the
  senders were told, and fits in the data packets the network lost (sent and never
  received, with no drop in the hosts' qdiscs or sockets: the switches dropped them);
  (c) layer-wise overlap: an iteration's first forward layer starts before the previous
  iteration's last gradient has arrived.
* **the same job alone**, paced below a port's rate: sprayed packets arrive out of order, and
  every packet the switches drop is the job's, so what was zero-filled must fit in what they
  dropped (nothing when they dropped nothing: late is not lost).
* ``ddp-tcp-qos`` (DDP over TCP, DSCP 18), ``tcp`` scenario: the job's TCP in priority 5 on
  the ports it crosses, the background's in 0.

Figures come from counters and records, never from timing.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests import netns

pytestmark = [pytest.mark.netns, pytest.mark.slow]

JOB = 1
RANK_HOSTS = ("h1", "h5")
VALUES_PER_PACKET = 361
#: Bytes of a DLCP data frame besides its values: Ethernet 14, IPv4 20, UDP 8 (the switches
#: count whole frames); the DLCP header is added from hosts.wire.
FRAME_HEADERS = 14 + 20 + 8
TCP_CLASS = 5  # trace_configs: the "job-tcp" traffic class of ddp-tcp-qos


@dataclass
class FabricRun:
    """A run's record and, per switch, the difference of its counters over its training."""

    record: dict[str, Any]
    switches: dict[str, Any]  # switch name -> controller.counters.SwitchCounters
    udp_drops: dict[str, int]  # rank host -> UDP datagrams its sockets dropped

    def ranks(self) -> list[dict[str, Any]]:
        ranks = self.record["jobs"][str(JOB)]["ranks"]
        assert set(ranks) == {"0", "1"}, ranks
        return [ranks["0"], ranks["1"]]

    def total(self, key: str) -> int:
        return sum(int(r["totals"][key]) for r in self.ranks())

    def switch(self, name: str) -> Any:
        found = [c for n, c in self.switches.items() if n.endswith(name)]
        assert len(found) == 1, f"switch {name} among {sorted(self.switches)}"
        return found[0]


def _udp_drops(node: Any) -> int:
    """UDP datagrams the host's sockets dropped so far (full receive buffers, bad datagrams)."""
    keys = ("UdpRcvbufErrors", "UdpInErrors")
    figures = {p[0]: int(p[1]) for p in (line.split() for line in node.cmd("nstat -az " + " ".join(keys)).splitlines())
               if len(p) >= 2 and p[0] in keys and p[1].isdigit()}
    assert set(figures) == set(keys), f"nstat on {node.name} gave {figures}"
    return sum(figures.values())


def _leaf_port(host: str) -> tuple[str, int]:
    """(leaf, port) of a host in the experiment's topology file."""
    from experiments.trace_configs import TOPOLOGY8

    for link in yaml.safe_load(TOPOLOGY8.read_text())["links"]:
        if link["b"] == host:
            return link["a"], int(link["a_port"])
    raise AssertionError(f"{host} is not linked in {TOPOLOGY8}")


def _recording_site(fabric: Any) -> Any:
    """The sweep's view of the fabric, keeping the counter snapshots a run takes around its
    training (so the test reads the same window as the run's record, at no extra cost)."""
    from experiments.trace_sweep import TraceSite

    class Recording(TraceSite):
        def __init__(self, fabric: Any) -> None:
            super().__init__(fabric)
            self.snapshots: list[dict[str, Any]] = []
            self.seconds: list[float] = []  # each snapshot's wall time (printed: a snapshot is a run's largest cost)

        def snapshot(self) -> dict[str, Any]:
            t0 = time.monotonic()
            taken = super().snapshot()
            self.seconds.append(time.monotonic() - t0)
            self.snapshots.append(taken)
            return taken

    return Recording(fabric)


class Site:
    """The booted fabric and the runs made on it (each made once, on first use)."""

    def __init__(self, fabric: Any, work: Path) -> None:
        self.fabric, self.work = fabric, work
        self.trace_site = _recording_site(fabric)
        self.runs: dict[str, FabricRun] = {}

    def run(self, label: str, scenario: Any, config: Any, **job: Any) -> FabricRun:
        if label in self.runs:
            return self.runs[label]
        from experiments.trace_sweep import PlannedRun, TraceSettings, run_trace_once
        from experiments.training.trace_worker import TraceJob

        t0 = time.monotonic()
        settings = TraceSettings(job=TraceJob(iterations=3, k=1.0, timeout_s=120.0, **job), job_timeout_s=400.0)
        nodes = {h: self.fabric.node(h) for h in RANK_HOSTS}
        udp, taken = {h: _udp_drops(n) for h, n in nodes.items()}, len(self.trace_site.snapshots)
        record = run_trace_once(self.trace_site, scenario, config, PlannedRun(len(self.runs), scenario.name,
                                                                              config.name, 0, 2000),
                                settings, self.work / label, self.work / "policies", print)
        assert len(self.trace_site.snapshots) == taken + 2, "the run took other than two counter snapshots"
        before, after = (s["counters"] for s in self.trace_site.snapshots[taken:])
        switches = {name: now.minus(before[name]) for name, now in after.items()}
        assert not any(c.went_backwards() for c in switches.values()), "a switch's counters went backwards"
        udp = {h: _udp_drops(n) - udp[h] for h, n in nodes.items()}
        run = self.runs[label] = FabricRun(record, switches, udp)
        totals = {k: sum(int(r["totals"].get(k, 0)) for r in run.ranks())
                  for k in ("packets", "retransmitted", "received_packets", "late_packets", "eligible", "lost",
                            "reordered")}
        print(f"{label}: {time.monotonic() - t0:.1f} s in all, {record['seconds']} s training, ranks up after "
              f"{record['phases'].get('ranks_up')} s, counter snapshots {self.trace_site.seconds[-2]:.1f} + "
              f"{self.trace_site.seconds[-1]:.1f} s; switches: {record['switch']['magnitude_drops']} magnitude "
              f"drops, {record['switch']['queue_drops']} queue drops; ranks: {totals}")
        return run


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    if not netns.is_root():
        pytest.skip("needs root (Mininet fabric)")
    from experiments.trace_configs import TOPOLOGY8
    from experiments.training.grad_values import load_pool
    from experiments.training.trace_worker import SHARED_TRACES
    from mininet_topos.launcher import Fabric, LaunchOptions
    from mininet_topos.programming import program_fabric

    if not SHARED_TRACES.exists():
        pytest.skip(f"no H100 trace at {SHARED_TRACES}")
    load_pool()
    work = tmp_path_factory.mktemp("mechanisms")
    options = LaunchOptions(topo=TOPOLOGY8, workdir=work, prefix=f"m{uuid.uuid4().hex[:3]}", policy=None)
    with Fabric(options) as fabric:
        program_fabric(fabric.description_path, None)
        yield Site(fabric, work)


def _same_class_dlcp() -> Any:
    from experiments.trace_configs import trace_config

    full = trace_config("dlcp")
    assert (full.scheduler, full.overlap, full.dropping, full.spraying, full.ecn) == ("dlcp", "layerwise", True,
                                                                                        True, True)
    return replace(full, name="dlcp-same-class", queues="fifo")


@pytest.fixture(scope="module")
def same_class(site: Site) -> FabricRun:
    from experiments.trace_configs import trace_scenario

    config = _same_class_dlcp()
    policy = config.policy([JOB])
    assert {r["priority"] for j in policy["jobs"] for r in j["layers"]} == {policy["default_priority"]}
    return site.run("same-class", trace_scenario("tcp"), config)


@pytest.fixture(scope="module")
def unmarked(site: Site) -> FabricRun:
    from experiments.trace_configs import TraceConfig, trace_scenario

    @dataclass(frozen=True)
    class Unmarked(TraceConfig):
        """The switches' policy of ``dlcp-same-class``; ranks with no bound mark nothing."""

        def job(self, base: Any, placement: Any, seed: int) -> Any:
            return replace(super().job(base, placement, seed), grad_bound=0.0)

    base = replace(_same_class_dlcp(), name="dlcp-same-class-unmarked")
    config = Unmarked(**{f.name: getattr(base, f.name) for f in fields(base)})
    assert config.policy([JOB])["jobs"][0]["dropping"]["classes"], "the policy lists no drop class"
    return site.run("unmarked", trace_scenario("tcp"), config)


@pytest.fixture(scope="module")
def alone(site: Site) -> FabricRun:
    from experiments.scenarios import JobPlacement
    from experiments.trace_configs import TraceScenario

    pair = TraceScenario("pair", "ring h1-h5, no background", (JobPlacement(JOB, RANK_HOSTS),))
    # paced below a port's 20,000 packets/s, so that drops are few (none in most runs) and the
    # bound below is tight; how many there are depends on how the loaded machine schedules
    return site.run("alone", pair, _same_class_dlcp(), rate_pps=7_500.0, max_rate_pps=15_000.0)


def test_switches_drop_the_jobs_data_packets_by_magnitude(same_class: FabricRun) -> None:
    from hosts.wire import HEADER_LEN

    early = sum(c.drops.get("magnitude_threshold", (0, 0))[0] for c in same_class.switches.values())
    assert early > 0, "no magnitude drop: the job's queue never reached its drop threshold"
    dropped_bytes = 0
    for name, c in same_class.switches.items():
        other = {reason: n for reason, (n, _) in c.drops.items() if n and reason != "magnitude_threshold"}
        assert not other, f"{name} dropped in ingress for other reasons: {other}"
        assert set(c.early_drops) <= {JOB}, f"{name} dropped early packets of jobs {sorted(c.early_drops)}"
        assert c.early_drops.get(JOB, (0, 0)) == c.drops.get("magnitude_threshold", (0, 0)), name
        assert not c.queue_red, f"{name}: a traffic class's early drop acted: {c.queue_red}"
        dropped_bytes += c.early_drops.get(JOB, (0, 0))[1]
    # DLCP data frames only (headers and whole values), of the job that marked packets
    dropped_values, rest = divmod(dropped_bytes - early * (FRAME_HEADERS + HEADER_LEN), 4)
    assert rest == 0 and dropped_values > 0, (dropped_bytes, early)
    assert same_class.total("eligible") > 0


def test_switches_never_drop_unmarked_packets_by_magnitude(unmarked: FabricRun) -> None:
    """The same policy and congestion, the ranks marking nothing: not one magnitude drop."""
    for rank in unmarked.ranks():
        assert rank["totals"]["eligible"] == 0 and rank["totals"]["lost"] == 0, rank["totals"]
    congested = 0
    for host in RANK_HOSTS:
        leaf, port = _leaf_port(host)
        drops = unmarked.switch(leaf).queue_drops
        assert drops is not None, f"{leaf} reports no queue drops (embedded target expected)"
        congested += sum(n for (p, prio, _), n in drops.items() if (p, prio) == (port, 0))
    assert congested > 0, "the ranks' queues never overflowed: the test shows nothing"
    for name, c in unmarked.switches.items():
        assert not any(n for n, _ in c.drops.values()), f"{name} dropped in ingress: {c.drops}"
        assert not c.early_drops, f"{name} dropped early: {c.early_drops}"


def _assert_senders_know_what_was_zero_filled(run: FabricRun, zero_filled: int) -> None:
    """The senders' view of what their receivers zero-filled: exact for every message whose
    final answers came, an upper bound for the others (answers can be lost in a full queue)."""
    missing, unconfirmed = run.total("missing"), run.total("unconfirmed")
    assert 0 <= unconfirmed <= missing, (unconfirmed, missing)
    assert missing - unconfirmed <= zero_filled <= missing, \
        f"receivers zero-filled {zero_filled} values, senders were shown {missing} ({unconfirmed} unconfirmed)"


def test_zero_filled_values_are_from_packets_the_switches_dropped(same_class: FabricRun) -> None:
    rec = same_class.record
    assert rec["switch"]["host_qdisc_drops"] == 0, "the hosts' qdiscs dropped packets"
    assert not any(same_class.udp_drops.values()), f"the ranks' sockets dropped datagrams: {same_class.udp_drops}"
    sent = same_class.total("packets") + same_class.total("retransmitted")
    lost_packets = sent - same_class.total("received_packets")
    early = sum(c.early_drops.get(JOB, (0, 0))[0] for c in same_class.switches.values())
    assert lost_packets >= early, (sent, lost_packets, early)
    zero_filled = same_class.total("lost")
    assert zero_filled > 0, "nothing was completed within the bound: the test shows nothing"
    _assert_senders_know_what_was_zero_filled(same_class, zero_filled)
    late = same_class.total("late_packets")  # came after their message completed within the bound
    assert zero_filled <= VALUES_PER_PACKET * (lost_packets + late), (zero_filled, lost_packets, late)
    for rank in same_class.ranks():
        assert rank["totals"]["gather_lost"] == 0  # the all-gather stage has no loss bound


def test_alone_zero_filled_values_are_what_the_switches_dropped(alone: FabricRun) -> None:
    """Alone on the fabric, every packet a switch drops is the job's: early drops (their values
    from the bytes counted) and queue overflow (at most a full packet's values each). The only
    other source of zero-filled values is a packet that arrived after its message was completed
    within the bound (sprayed past the reorder allowance, as a loaded machine can delay it): the
    receiver counts those as late, at most a full packet's values each."""
    from hosts.wire import HEADER_LEN

    assert alone.record["switch"]["host_qdisc_drops"] == 0, "the hosts' qdiscs dropped packets"
    assert not any(alone.udp_drops.values()), f"the ranks' sockets dropped datagrams: {alone.udp_drops}"
    early = early_bytes = overflow = 0
    for name, c in alone.switches.items():
        other = {reason: n for reason, (n, _) in c.drops.items() if n and reason != "magnitude_threshold"}
        assert not other, f"{name} dropped in ingress for other reasons: {other}"
        assert c.queue_drops is not None, f"{name} reports no queue drops (embedded target expected)"
        packets, nbytes = c.early_drops.get(JOB, (0, 0))
        early, early_bytes = early + packets, early_bytes + nbytes
        overflow += sum(c.queue_drops.values())
    early_values = (early_bytes - early * (FRAME_HEADERS + HEADER_LEN)) // 4
    assert alone.total("reordered") > 0, "spraying reordered nothing: the test shows nothing"
    zero_filled = alone.total("lost")
    _assert_senders_know_what_was_zero_filled(alone, zero_filled)
    # no switch drop and nothing late: nothing zero-filled; else no more than those packets held
    late = alone.total("late_packets")
    assert zero_filled <= early_values + VALUES_PER_PACKET * (overflow + late), \
        (zero_filled, early_values, overflow, late)


def test_front_layers_start_before_back_layers_arrive(same_class: FabricRun) -> None:
    for rank in same_class.ranks():
        recs = rank["records"]
        assert [r["iteration"] for r in recs] == [0, 1, 2]
        # a ring of two: each rank receives half of every layer in each stage
        assert len({r["reduced"] for r in recs}) == 1 and recs[0]["reduced"] > 0
        early = [b["forward_first_s"] < a["last_arrival_s"] for a, b in zip(recs, recs[1:])]
        assert any(early), [(a["last_arrival_s"], b["forward_first_s"]) for a, b in zip(recs, recs[1:])]


def test_ddp_over_tcp_runs_in_its_priority_class(site: Site) -> None:
    from experiments.trace_configs import JOB_DSCP, trace_config, trace_scenario

    config = trace_config("ddp-tcp-qos")
    assert config.policy([JOB])["traffic_classes"] == [
        {"name": "job-tcp", "dscp": JOB_DSCP, "protocol": "tcp", "priority": TCP_CLASS}]
    run = site.run("ddp-tcp-qos", trace_scenario("tcp"), config)
    ranks = run.ranks()
    for rank, host in enumerate(RANK_HOSTS):
        leaf, port = _leaf_port(host)
        counts = run.switch(leaf).port_prio
        job_bytes = counts.get((port, TCP_CLASS), (0, 0))[1]
        peer_sent = ranks[1 - rank]["totals"]["bytes"]
        assert peer_sent > 0 and job_bytes >= peer_sent, f"{leaf} port {port} ({host}): {counts}"
        assert counts.get((port, 0), (0, 0))[0] > 0, f"no background in class 0 on {leaf} port {port}: {counts}"
    leaf, port = _leaf_port("h2")  # a TCP sender of the background: its ACKs only
    counts = run.switch(leaf).port_prio
    assert counts.get((port, 0), (0, 0))[0] > 0 and (port, TCP_CLASS) not in counts, counts

