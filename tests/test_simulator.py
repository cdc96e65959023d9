"""The simulator: traces, alpha-beta fitting, cluster models, the engine, the DLCP tail
model, reports, the command line, and the reproduction targets of issue 9."""

from __future__ import annotations

import csv
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from gradfabric.command.cli import main
from hosts.schedulers import AlphaBeta, Layer, LossPolicy, Scheduler, Segment, Transfer, Wait, create
from simulator.cli import DEFAULT_TRACES
from simulator.cluster import AlphaBetaLink, Network, PushPullLink, collective_cost
from simulator.dlcp_model import TailLink, TailModel, hash_imbalance, prob_loss_exceeds
from simulator.engine import simulate
from simulator.errors import SimulatorError
from simulator.fit import LatencySamples, fit_alpha_beta, load_osu
from simulator.sweep import ClusterSpec, sweep
from simulator.torch_profile import require_torch, summarize
from simulator.traces import TraceError, format_trace, load_trace, parse_trace, stepwise_trace

TRACES = DEFAULT_TRACES


# --- traces -----------------------------------------------------------------------------

def test_caffe_trace_counts_a_layers_backward_once() -> None:
    text = "blob_index,numel,backward_us,allreduce_us\n0,10,100,5\n1,2,100,0\n2,30,40,7\n3,3,40,1\n"
    trace = parse_trace(text, name="t", forward_total_s=0.0014)
    assert [l.numel for l in trace.layers] == [10, 2, 30, 3]
    assert [l.backward_s for l in trace.layers] == pytest.approx([0.0, 100e-6, 0.0, 40e-6])
    assert trace.forward_s == pytest.approx(0.0014)
    assert trace.layers[1].forward_s == pytest.approx(0.0014 * 100 / 140)
    assert trace.measured_allreduce_s == pytest.approx((5e-6, 0.0, 7e-6, 1e-6))


def test_googlenet_forward_is_derived_from_published_throughput() -> None:
    trace = load_trace(TRACES / "googlenet_k80_8nodes_caffe.csv")
    assert len(trace.layers) == 128 and trace.numel == 13_379_136
    # By hand from the published 8-node figures: 1210.9 images/s at 92.7% scaling efficiency is
    # 1210.9 / (8 * 0.927) = 163.28 images/s on one K80, so a batch of 64 takes 0.39196 s.
    assert trace.forward_s + trace.backward_s == pytest.approx(0.39196, abs=1e-5)
    assert 0.18 < trace.forward_s < 0.19


def test_astra_trace_is_scaled_to_the_stated_compute_time() -> None:
    trace = load_trace(TRACES / "resnet50_astrasim.csv", compute_total_s=0.2)
    assert len(trace.layers) == 54
    assert trace.numel == 102_011_648 // 4
    assert trace.forward_s + trace.backward_s == pytest.approx(0.2)
    assert trace.layers[0].name == "conv1" and trace.layers[-1].name == "fc1000"


def test_our_format_round_trips(tmp_path: Path) -> None:
    original = stepwise_trace((2, 3), layer_numel=7)
    path = tmp_path / "m.csv"
    path.write_text(format_trace(original))
    again = load_trace(path)
    assert again.batch_size == original.batch_size
    assert [(l.name, l.numel) for l in again.layers] == [(l.name, l.numel) for l in original.layers]
    assert [l.backward_s for l in again.layers] == pytest.approx([l.backward_s for l in original.layers])


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a,b\n1,2\n", "unknown trace header"),
        ("name,numel,forward_us,backward_us\nx,ten,1,1\n", r"<trace>:2: numel is not a number"),
        ("name,numel,forward_us,backward_us\nx,1,1\n", r"<trace>:2: expected 4 columns"),
        ("name,numel,forward_us,backward_us\nx,1,-1,1\n", "forward_us is negative"),
        ("name,numel,forward_us,backward_us\n", "no layers"),
        ("", "empty trace"),
    ],
)
def test_bad_traces_are_reported(text: str, message: str) -> None:
    with pytest.raises(TraceError, match=message):
        parse_trace(text, name="bad")


# --- fitting ----------------------------------------------------------------------------

def test_fit_recovers_a_known_line() -> None:
    sizes = np.array([4.0, 1024, 65536, 1 << 20])
    samples = LatencySamples(8, sizes, 1e-4 + 2e-9 * sizes)
    fit = fit_alpha_beta(samples)
    assert fit.cost.alpha == pytest.approx(1e-4) and fit.cost.beta == pytest.approx(2e-9)
    assert fit.r_squared == pytest.approx(1.0)
    only_big = fit_alpha_beta(samples, min_bytes=1024)
    assert (only_big.min_bytes, only_big.max_bytes) == (1024, 1 << 20)


def test_fit_of_the_osu_file() -> None:
    fit = fit_alpha_beta(load_osu(TRACES / "osu_allreduce_8nodes_10gbe.csv"))
    assert fit.nodes == 8
    assert 5e-4 < fit.cost.alpha < 1e-3 and 2e-9 < fit.cost.beta < 5e-9


def test_osu_errors(tmp_path: Path) -> None:
    bad = tmp_path / "x.csv"
    bad.write_text("n,b,l\n")
    with pytest.raises(SimulatorError, match="expected the header"):
        load_osu(bad)
    bad.write_text("nodes,bytes,avg_latency_us\n2,4,10\n4,8,12\n")
    with pytest.raises(SimulatorError, match="mixes node counts"):
        load_osu(bad)


# --- cluster models ---------------------------------------------------------------------

def test_ring_and_ps_costs() -> None:
    net = Network(latency_s=1e-5, bandwidth=1e9)
    ring = collective_cost("ring", 4, net)
    assert ring.alpha == pytest.approx(6e-5) and ring.beta == pytest.approx(1.5e-9)
    ps = collective_cost("ps", 4, net)
    assert ps.alpha == pytest.approx(2e-5) and ps.beta == pytest.approx(2e-9)
    one_server = collective_cost("ps", 4, net, servers=1)
    assert one_server.beta == pytest.approx(8e-9)
    with pytest.raises(SimulatorError, match="unknown architecture"):
        collective_cost("tree", 4, net)


def test_ring_fit_round_trips() -> None:
    cost = AlphaBeta(7e-4, 3.5e-9)
    net = Network.from_ring_fit(cost, 8)
    again = collective_cost("ring", 8, net)
    assert again.alpha == pytest.approx(cost.alpha) and again.beta == pytest.approx(cost.beta)


# --- DLCP tail model --------------------------------------------------------------------

def test_loss_probabilities() -> None:
    assert prob_loss_exceeds(1, 0.01, 0.0) == pytest.approx(0.01)
    assert prob_loss_exceeds(100, 0.01, 0.0) == pytest.approx(1 - 0.99**100)
    # more than 1 of 100 lost: 1 - P(0) - P(1)
    p0, p1 = 0.99**100, 100 * 0.01 * 0.99**99
    assert prob_loss_exceeds(100, 0.01, 0.01) == pytest.approx(1 - p0 - p1)
    assert prob_loss_exceeds(10**6, 0.001, 0.01) < 1e-12
    assert prob_loss_exceeds(10, 0.0, 0.0) == 0.0


def test_hash_imbalance() -> None:
    assert hash_imbalance(5, 1) == 1.0
    # two flows on two paths: half the time both share one path -> E[max] = 1.5, mean 1
    assert hash_imbalance(2, 2) == pytest.approx(1.5, abs=0.02)
    assert hash_imbalance(64, 4) < hash_imbalance(4, 4)


def test_tail_link_bounded_loss_and_spraying() -> None:
    cost = AlphaBeta(1e-4, 1e-9)
    tail = TailModel(loss_rate=0.001, rto_s=0.005, packet_bytes=1000, paths=4, flows=4)
    link = TailLink(cost, tail)
    reliable = Transfer((Segment(0, 0, 250_000),), 1_000_000)
    bounded = Transfer((Segment(0, 0, 250_000),), 1_000_000, loss=LossPolicy(0.01, 0.01))
    expected_reliable = 1e-4 + 1e-3 * tail.hash_imbalance + 0.005 * (1 - 0.999**1000)
    assert link.seconds(reliable) == pytest.approx(expected_reliable)
    assert link.seconds(bounded) == pytest.approx(1e-4 + 1e-3, rel=1e-6)
    plain = TailLink(cost, TailModel())
    assert plain.seconds(reliable) == pytest.approx(AlphaBetaLink(cost).seconds(reliable))


# --- engine -----------------------------------------------------------------------------

def test_forward_overlap_waits_only_for_each_layers_update() -> None:
    # Layer 1 is big (10 s of bytes), layer 0 small (1 s); forward and backward 1 s each.
    layers = [Layer(0, "a", 250, 1.0, 1.0), Layer(1, "b", 2500, 1.0, 1.0)]
    link = AlphaBetaLink(AlphaBeta(0.0, 0.001))
    # p3, 1000-byte partitions: layer 1 part 1 -> 2; layer 0 (ready at 2) overtakes: 2 -> 3;
    # the rest of layer 1: 3 -> 12. Next forward: layer 0 at 3 -> 4, layer 1 waits to 12 -> 13.
    p3 = simulate(layers, create("p3", partition_bytes=1000), link, overlap_forward=True)
    assert p3.iteration_s == pytest.approx(13.0)
    assert p3.steady.layer_update == pytest.approx((3.0, 12.0))
    # without overlap the next forward waits for every update: 12 + 2
    assert simulate(layers, create("p3", partition_bytes=1000), link, overlap_forward=False).iteration_s == pytest.approx(14.0)
    # wfbp: layer 1 1 -> 11, layer 0 11 -> 12; forward 12 -> 14 even with overlap
    assert simulate(layers, create("wfbp"), link, overlap_forward=True).iteration_s == pytest.approx(14.0)


class _Forgetful(Scheduler):
    """Sends layer 0 only, then claims to be done."""

    def on_gradient_ready(self, layer_index: int, now: float) -> None:
        self.ready = getattr(self, "ready", set()) | {layer_index}

    def next_transfer(self, now: float, link_idle: bool) -> Transfer | Wait | None:
        if 0 in getattr(self, "ready", set()) and not getattr(self, "sent", False):
            self.sent = True
            return Transfer((Segment(0, 0, self.layers[0].numel),), 4)
        return None if getattr(self, "sent", False) else Wait()


class _Stuck(_Forgetful):
    def next_transfer(self, now: float, link_idle: bool) -> Transfer | Wait | None:
        return Wait()


def test_engine_rejects_schedulers_that_lose_gradients_or_stall() -> None:
    layers = [Layer(0, "a", 1, 0.0, 1.0), Layer(1, "b", 1, 0.0, 1.0)]
    link = AlphaBetaLink(AlphaBeta(0.1, 0.0))
    with pytest.raises(SimulatorError, match="sent 0 of 1 elements of layer 1"):
        simulate(layers, _Forgetful(), link)
    with pytest.raises(SimulatorError, match="stalled"):
        simulate(layers, _Stuck(), link)


# --- parameter-server round trips ---------------------------------------------------------

def _ready_together(n: int, numel: int) -> list[Layer]:
    """``n`` layers whose gradients are all ready 1 ms into backward, no forward time."""
    return [Layer(i, f"l{i}", numel, 0.0, 0.001 if i == n - 1 else 0.0) for i in range(n)]


def _push_pull(push_s_per_byte: float, aggregation_s: float, pull_s: float) -> PushPullLink:
    return PushPullLink(AlphaBetaLink(AlphaBeta(0.0, push_s_per_byte)), AlphaBetaLink(AlphaBeta(pull_s, 0.0)),
                        aggregation_s)


def test_p3_with_a_one_partition_window_idles_one_round_trip_per_partition() -> None:
    # 4 layers of 1000 B (one partition each); a push takes 1 ms, aggregation 0.5 ms and pull
    # 1.5 ms come back 2 ms later. Credit = one partition: push k+1 starts when pull k is back.
    layers = _ready_together(4, 250)
    link = _push_pull(1e-6, 0.0005, 0.0015)
    steady = simulate(layers, create("p3", partition_bytes=1000), link, overlap_forward=False).steady
    records = sorted(steady.transfers, key=lambda r: r.start)
    assert [r.start for r in records] == pytest.approx([0.001, 0.004, 0.007, 0.010])
    assert [r.done - r.end for r in records] == pytest.approx([0.002] * 4)
    assert steady.link_busy_s == pytest.approx(0.004)
    assert steady.link_idle_s == pytest.approx(4 * 0.002)
    assert steady.layer_update == pytest.approx((0.004, 0.007, 0.010, 0.013))  # front layer first


def test_a_window_covering_the_round_trip_keeps_the_push_link_busy() -> None:
    layers = _ready_together(4, 250)
    link = _push_pull(1e-6, 0.0005, 0.0015)
    steady = simulate(layers, create("p3", partition_bytes=1000, credit_bytes=4000), link,
                      overlap_forward=False).steady
    assert sorted(r.start for r in steady.transfers) == pytest.approx([0.001, 0.002, 0.003, 0.004])
    assert steady.link_idle_s == pytest.approx(0.002)  # only the last pull
    assert steady.comm_end == pytest.approx(0.007)


def test_every_scheduler_sees_the_same_round_trip() -> None:
    layers = _ready_together(3, 250)
    link = _push_pull(1e-6, 0.001, 0.0)
    for name in ("wfbp", "p3", "prophet", "dlcp", "mgwfbp", "fusion", "synceasgd"):
        steady = simulate(layers, create(name, cost=AlphaBeta(0.0, 1e-6)), link, overlap_forward=False).steady
        assert all(r.done - r.end == pytest.approx(0.001) for r in steady.transfers), name
        assert steady.comm_end == pytest.approx(max(r.end for r in steady.transfers) + 0.001), name


def test_ps_cluster_splits_the_collective_into_push_and_pull() -> None:
    net = Network.from_gbps(8.0, 100.0)
    cost = collective_cost("ps", 4, net)
    transfer = Transfer((Segment(0, 0, 1000),), 4000)
    link = ClusterSpec("ps", net, aggregation_s=0.002).link(4)
    assert isinstance(link, PushPullLink)
    assert link.seconds(transfer) == pytest.approx(100e-6 + 4000 / 1e9)
    assert link.seconds(transfer) + link.round_trip_s(transfer) == pytest.approx(cost.seconds(4000) + 0.002)
    ring = ClusterSpec("ring", net).link(4)
    assert ring.round_trip_s(transfer) == 0.0
    with pytest.raises(SimulatorError, match="aggregation"):
        ClusterSpec("ps", net, aggregation_s=-1.0)


def test_prophet_blocks_do_not_hold_back_the_credit() -> None:
    # Two stages; the first stage's block is still being pulled when layer 0 arrives, yet
    # layer 0's partition goes out at once (p3 would wait for the credit).
    # Layers 3, 2, 1 arrive 0.1 ms apart, layer 0 10 ms later: stages {3, 2, 1} and {0}.
    layers = [Layer(0, "a", 250, 0.0, 0.010)] + [Layer(i, f"l{i}", 250, 0.0, 0.0001) for i in (1, 2, 3)]
    link = _push_pull(1e-6, 0.050, 0.0)
    steady = simulate(layers, create("prophet", partition_bytes=1000, initial_bandwidth=1e6), link,
                      overlap_forward=False, iterations=3).steady
    block = next(r for r in steady.transfers if len(r.transfer.segments) == 3)
    layer0 = next(r for r in steady.transfers if r.transfer.layer_indices == (0,))
    assert block.start == pytest.approx(0.0003) and block.done == pytest.approx(0.0533)
    assert layer0.start == pytest.approx(0.0103)
    p3 = simulate(layers, create("p3", partition_bytes=1000), link, overlap_forward=False, iterations=3).steady
    assert next(r for r in p3.transfers if r.transfer.layer_indices == (0,)).start > 0.05


# --- reproduction targets ---------------------------------------------------------------

@pytest.fixture(scope="module")
def reproduced(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """One `gradfabric sim reproduce` for the module's tests: its folder and its report."""
    out = tmp_path_factory.mktemp("reproduce")
    assert main(["sim", "reproduce", "--out", str(out)]) == 0
    return out, (out / "README.md").read_text()


def section(report: str, title: str) -> str:
    """The markdown under ``## title`` in the report, up to the next section."""
    body = report[report.index(f"## {title}\n") + len(title) + 4:]
    return body.split("\n## ", 1)[0]


def test_mgwfbp_reproduction_reports_both_fits_and_the_forward_sensitivity(reproduced: tuple[Path, str]) -> None:
    """The published comparison lives in the report; here: its structure and the model's behaviour."""
    tmp_path, report = reproduced
    with (tmp_path / "reproduction_mgwfbp.csv").open() as f:
        header, *rows = list(csv.reader(f))
    assert header == ["figure", "published", "OSU fit", "trace fit"], "both fits side by side, as equals"
    assert "calibrated from the paper" in section(report, "MG-WFBP on GoogLeNet (K80, 10GbE)")
    with (tmp_path / "mgwfbp_forward_sensitivity.csv").open() as f:
        sens = list(csv.reader(f))[1:]
    assert [r[0] for r in sens].count(next(r[0] for r in sens if "calibrated" in r[0])) == 1
    for column in (1, 2):
        speedups = [float(r[column]) for r in sens]
        # No forward overlap: a longer forward dilutes communication, so merging gains less.
        assert speedups == sorted(speedups, reverse=True) and speedups[0] > speedups[-1]
        assert all(x >= 1.0 for x in speedups), "merging never loses to WFBP under alpha-beta"
    for name in ("mgwfbp_googlenet.csv", "mgwfbp_googlenet.md", "mgwfbp_googlenet.png", "osu_fits.csv"):
        assert (tmp_path / name).stat().st_size > 0


def test_dlcp_tail_control_rows_show_no_gain(reproduced: tuple[Path, str]) -> None:
    """One path and no loss leave bounded loss and spraying nothing to act on."""
    tmp_path, report = reproduced
    with (tmp_path / "reproduction_dlcp.csv").open() as f:
        rows = [r for r in list(csv.reader(f))[1:] if r[1].startswith("control")]
    assert {r[0] for r in rows} == {"ps", "ring"}
    for row in rows:
        assert float(row[4].rstrip("x")) == pytest.approx(1.0, abs=0.01)
    markdown = section(report, "DLCP: bounded loss and spraying")
    assert "5 ms retransmission timeout" in markdown and "hash-imbalance" in markdown


def test_prophet_beats_p3_on_the_stepwise_pattern(reproduced: tuple[Path, str]) -> None:
    tmp_path, _report = reproduced
    lines = (tmp_path / "reproduction_prophet.csv").read_text().splitlines()[1:]
    by = {line.split(",")[0]: [float(x.rstrip("x")) for x in line.split(",")[1:]] for line in lines}
    assert by["prophet"][0] < by["p3"][0]  # iteration time
    assert by["prophet"][2] < by["p3"][2]  # layer 0 updated earlier: next forward starts earlier
    assert (tmp_path / "prophet_timeline.png").stat().st_size > 0
    with (tmp_path / "prophet_sensitivity.csv").open() as f:
        small_window = [r for r in list(csv.reader(f))[1:] if r[0] == "0.25 MB"]
    assert len(small_window) == 3
    for row in small_window:  # a window below the round trip: P3's link idles, Prophet's less
        assert float(row[5]) > float(row[6]) and float(row[4].rstrip("x")) > 1.0


def test_sweep_speedups_and_efficiency() -> None:
    trace = stepwise_trace((3, 3), layer_numel=100_000)
    cluster = ClusterSpec("ring", Network.from_gbps(10, 5))
    rows = sweep(trace, cluster, [4, 16], ["wfbp", "mgwfbp"], baseline="wfbp")
    assert [(r.workers, r.scheduler) for r in rows] == [(4, "wfbp"), (4, "mgwfbp"), (16, "wfbp"), (16, "mgwfbp")]
    for r in rows:
        assert r.throughput == pytest.approx(r.workers * trace.batch_size / r.iteration_s)
        assert 0 < r.scaling_efficiency <= 1.0 + 1e-9
    assert rows[0].speedup == 1.0
    with pytest.raises(SimulatorError, match="baseline"):
        sweep(trace, cluster, [4], ["mgwfbp"], baseline="wfbp")


# --- command line -----------------------------------------------------------------------

def test_cli_run_writes_table_csv_and_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["sim", "run", "--trace", str(TRACES / "googlenet_k80_8nodes_caffe.csv"),
                 "--osu", str(TRACES / "osu_allreduce_8nodes_10gbe.csv"), "--workers", "8",
                 "--no-overlap", "--schedulers", "wfbp,mgwfbp", "--out", str(tmp_path)])
    assert code == 0
    out = capsys.readouterr().out
    assert "| googlenet_k80_8nodes_caffe | ring | 8 | mgwfbp |" in out
    csv_text = (tmp_path / "googlenet_k80_8nodes_caffe_ring.csv").read_text()
    assert csv_text.splitlines()[0].startswith("model,arch,workers,scheduler,iteration_s")
    assert (tmp_path / "googlenet_k80_8nodes_caffe_ring.png").read_bytes()[:4] == b"\x89PNG"


def test_cli_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", "run", "--trace", str(tmp_path / "missing.csv"), "--gbps", "10"]) == 1
    assert "cannot read trace" in capsys.readouterr().err
    assert main(["sim", "run", "--trace", str(TRACES / "resnet50_astrasim.csv")]) == 1
    assert "give exactly one network" in capsys.readouterr().err


def test_cli_fit(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["sim", "fit", str(TRACES / "osu_allreduce_4nodes_10gbe.csv"),
                 "--trace", str(TRACES / "googlenet_k80_4nodes_caffe.csv")])
    assert code == 0
    out = capsys.readouterr().out
    assert out.startswith("nodes 4: alpha ")
    assert "median measured/predicted" in out


def test_cli_reproduce_writes_every_result(reproduced: tuple[Path, str]) -> None:
    tmp_path, report = reproduced
    assert f"gradfabric sim reproduce --out {tmp_path}" in report
    for name in ("reproduction_mgwfbp.csv", "reproduction_prophet.csv", "reproduction_dlcp.csv",
                 "resnet50_scaling.csv", "resnet50_scaling.png", "dlcp_tail.png", "h100_scaling.csv",
                 "h100_scaling_efficiency.png"):
        assert (tmp_path / name).stat().st_size > 0
    # Every H100 figure is marked: no validated scenario covers these scales.
    h100 = report[report.index("## H100 traces"):]
    assert h100.count("| unvalidated |") == 6 * 3 * 3
    with (tmp_path / "h100_scaling.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 6 * 3 * 5 * 5 and {r["gbps"] for r in rows} == {"25", "100", "400"}
    dlcp = (tmp_path / "reproduction_dlcp.csv").read_text().splitlines()[1:]
    speedups = [float(line.split(",")[4].rstrip("x")) for line in dlcp]
    assert all(s > 1.0 for s in speedups)


def test_reproduce_writes_outside_the_tree_unless_told(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import simulator.reproduce
    from gradfabric import paths

    calls: list[tuple[Path, str]] = []
    monkeypatch.setattr(simulator.reproduce, "reproduce", lambda traces, out, command: calls.append((out, command)) or "")
    monkeypatch.setenv("GRADFABRIC_WORKDIR", str(tmp_path))
    assert main(["sim", "reproduce"]) == 0
    assert calls[-1] == (tmp_path / "build" / "results" / "simulation", "gradfabric sim reproduce")
    committed = paths.ROOT / "experiments" / "results" / "simulation"
    assert main(["sim", "reproduce", "--out", str(committed)]) == 0
    assert calls[-1] == (committed, "gradfabric sim reproduce --out experiments/results/simulation")


# --- PyTorch profiling ------------------------------------------------------------------

def test_summarize_takes_medians_and_scales() -> None:
    runs = [([1.0, 2.0], [0.0, 0.5], 3.0, 4.0, 1.0), ([3.0, 2.0], [0.0, 0.7], 5.0, 6.0, 1.0),
            ([2.0, 9.0], [0.0, 0.6], 4.0, 5.0, 3.0)]
    prof = summarize("m", "fp32", 8, [("a", 3), ("b", 4)], runs, time_scale=0.5)
    assert [t.grad_ready_s for t in prof.tensors] == pytest.approx([1.0, 1.0])
    assert [t.forward_use_s for t in prof.tensors] == pytest.approx([0.0, 0.3])
    assert (prof.passes.forward_s, prof.passes.backward_s, prof.passes.optimizer_s) == pytest.approx((2.0, 2.5, 0.5))
    assert prof.passes.numel == 7
    with pytest.raises(SimulatorError, match="time_scale"):
        summarize("m", "fp32", 1, [("a", 1)], runs, time_scale=0)


def test_missing_torch_gives_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(SimulatorError, match="needs PyTorch"):
        require_torch()
    assert main(["sim", "profile", "--out", "/nonexistent/never-written.csv"]) == 1


def test_profile_a_small_model(tmp_path: Path) -> None:
    """`make install` installs torch (the `train` extra), so the profile must yield a trace."""
    require_torch()
    out = tmp_path / "mlp.csv"
    code = main(["sim", "profile", "--model", "mlp", "--batch", "4", "--repeats", "1",
                 "--time-scale", "0.5", "--out", str(out)])
    assert code == 0
    assert out.read_text().startswith("model,precision,batch,ready_order,param,numel,grad_ready_us,forward_use_us\n")
    trace = load_trace(out)  # finds mlp.passes.json beside it
    # Backward reaches the last Linear first: its bias and weight are the last layers (index order = reverse readiness).
    assert sorted(l.numel for l in trace.layers) == sorted([784 * 1024, 1024, 1024 * 1024, 1024, 1024 * 10, 10])
    assert {l.numel for l in trace.layers[-2:]} == {10240, 10}
    assert trace.batch_size == 4
    assert trace.optimizer_s > 0 and trace.forward_s > 0
    assert all(l.backward_s >= 0 and math.isfinite(l.forward_s) for l in trace.layers)
