"""The DLCP trace ranks' timing log (experiments/training/trace_timing.py): a message sender's
timing, the breakdown of an iteration's communication phase on hand-worked figures, and the
log a DLCP ring job writes on loopback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from experiments.training.trace_timing import ENV, _union, iteration_breakdown, load
from experiments.training.trace_worker import SHARED_TRACES
from hosts.endpoint import Endpoint
from hosts.messages import MessageKey
from hosts.wire import MsgType
from mininet_topos.launcher import free_ports

ROOT = Path(__file__).resolve().parent.parent


def test_union_of_intervals_counts_overlaps_once_and_clips() -> None:
    assert _union([(0.0, 1.0), (0.5, 2.0), (3.0, 4.0)], 0.0, 10.0) == pytest.approx(3.0)
    assert _union([(0.0, 1.0), (0.2, 0.4)], 0.5, 10.0) == pytest.approx(0.5)
    assert _union([], 0.0, 1.0) == 0.0


def _sample(t: float, in_flight: int, cap: float, waiters: int, rx: int) -> dict:
    return {"t": t, "cwnd": cap, "cap": cap, "in_flight": in_flight, "room_waiters": waiters, "waits": 1,
            "queued": 0, "srtt": 0.01, "min_rtt": 0.002, "rate": 20_000.0, "cuts": int(t * 10), "undone": 0,
            "alpha": 1.0, "rx_data": rx, "rx_ce": 2 * rx, "rx_probes": 0}


def test_breakdown_of_a_hand_worked_iteration() -> None:
    # Communication from 1.0 to 2.0 s; ten samples: 4 with the window full, 3 with room and
    # a sender waiting, 2 with nothing in flight, 1 with room and nobody waiting.
    states = [(40, 40, 0)] * 4 + [(10, 40, 2)] * 3 + [(0, 40, 0)] * 2 + [(20, 40, 0)]
    window = [_sample(1.0 + i / 9, f, c, w, 100 * i) for i, (f, c, w) in enumerate(states)]
    log = {
        "iteration": [{"iteration": 3, "first_send_s": 1.0, "last_arrival_s": 2.0, "backward_end_s": 1.25}],
        "transfer": [{"iteration": 3, "id": 7, "handed_s": 1.0, "done_s": 1.99, "layers": [4, 5]},
                     {"iteration": 3, "id": 8, "handed_s": 1.2, "done_s": 1.3, "layers": [0]}],
        "message": [
            {"iteration": 3, "transfer": 7, "kind": 0, "packets": 300, "retransmitted": 3, "ecn_echoes": 2,
             "timeouts": 1, "created": 1.01, "first_sent": 1.1, "last_sent": 1.4, "completed": 1.5, "ended": 1.6,
             "room_wait_s": 0.2, "answer_wait_s": 0.1, "held_s": 0.0, "finals": 0, "confirms": 0},
            {"iteration": 3, "transfer": 7, "kind": 1, "packets": 100, "retransmitted": 0, "ecn_echoes": 0,
             "timeouts": 0, "created": 1.25, "first_sent": 1.3, "last_sent": 1.9, "completed": 1.95, "ended": 1.99,
             "room_wait_s": 0.0, "answer_wait_s": 0.05, "held_s": 0.01, "finals": 1, "confirms": 0},
        ],
        "window": window,
    }
    out = iteration_breakdown(log, 3)
    assert out is not None
    assert out["comm_s"] == 1.0 and out["backward_end_after_first_send_s"] == 0.25
    assert (out["messages"], out["packets_sent"], out["retransmitted"]) == (2, 400, 3)
    assert out["sent_pps"] == 400.0
    assert out["received_pps"] == pytest.approx(900 / 1.0)  # 0 to 900 packets over the samples' 1 s
    assert (out["window_full_share"], out["room_but_waiters_share"], out["nothing_in_flight_share"],
            out["other_share"]) == (0.4, 0.3, 0.2, 0.1)
    assert out["threads_busy_share"] == 0.0  # no message waited for a sender thread
    assert out["srtt_ms_mean"] == 10.0 and out["min_rtt_ms"] == 2.0 and out["window_rate_pps"] == 4000.0
    assert out["cuts"] == 10 and out["ce_marked"] == 1800
    assert out["message_s_sum"] == pytest.approx(0.59 + 0.74)
    assert (out["room_wait_s_sum"], out["answer_wait_s_sum"], out["held_s_sum"]) == (0.2, 0.15, 0.01)
    assert out["reduce_start_after_handout_ms_median"] == pytest.approx(10.0)
    assert out["transfer_ms_median"] == pytest.approx(545.0) and out["transfer_ms_max"] == pytest.approx(990.0)
    assert out["front_transfer_ms"] == pytest.approx(100.0)  # layer 0's transfer
    assert out["last_done_after_backward_end_ms"] == pytest.approx(740.0)
    assert out["sending_share"] == pytest.approx(0.8)  # 1.1-1.4 and 1.3-1.9: 1.1-1.9
    assert (out["echoes"], out["timeouts"], out["finals"]) == (2, 1, 1)
    assert iteration_breakdown(log, 4) is None


def test_a_senders_timing_is_in_order_and_its_waits_fit_its_time() -> None:
    with Endpoint(worker_id=0, port=0) as a, Endpoint(worker_id=1, port=0) as b:
        values = np.arange(60_000, dtype=np.float32)
        got: list = []
        key = MessageKey(1, 0, 5, 2, MsgType.GRADIENT)
        t = threading.Thread(target=lambda: got.append(b.take(key, timeout=60.0, peer=a.address)))
        t.start()
        report = a.send(b.address, values, tensor_id=2, iteration=5)
        t.join(timeout=90)
        assert got and np.array_equal(got[0].values, values)
    timing = report.timing
    assert timing is not None and report.packets > 100
    assert 0 < timing.created <= timing.first_sent <= timing.last_sent <= timing.completed <= timing.ended
    assert timing.last_answer >= timing.completed
    waited = timing.room_wait_s + timing.answer_wait_s + timing.held_s
    assert 0 < waited <= timing.ended - timing.created + 0.01
    assert timing.cwnd_start == 10.0  # the initial window (RFC 6928)
    assert timing.cwnd_end > timing.cwnd_start  # the answers grew it (nothing lost on loopback)


@pytest.mark.skipif(not SHARED_TRACES.exists(), reason=f"no H100 trace at {SHARED_TRACES}")
@pytest.mark.slow
def test_a_dlcp_ring_rank_writes_its_timing_log(tmp_path: Path) -> None:
    peers = ",".join(f"127.0.0.1:{p}" for p in free_ports(2))
    env = {**os.environ, ENV: str(tmp_path)}
    procs = [subprocess.Popen([sys.executable, "-m", "experiments.training.trace_worker", "--rank", str(r),
                               "--peers", peers, "--iterations", "3", "--timeout-s", "60", "--k", "1",
                               "--comm", "dlcp", "--scheduler", "dlcp", "--overlap", "layerwise",
                               "--grad-bound", "0.1"],
                              cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in range(2)]
    for rank, p in enumerate(procs):
        out, err = p.communicate(timeout=240)
        assert p.returncode == 0, err[-2000:]
        lines = [json.loads(l) for l in out.splitlines() if l.startswith("{")]
        iterations = [l for l in lines if l["event"] == "iteration"]
        (path,) = tmp_path.glob(f"job1-rank{rank}-*.jsonl")
        log = load(path)
        assert [r["iteration"] for r in log["iteration"]] == [0, 1, 2]
        for it in iterations:
            msgs = [m for m in log["message"] if m["iteration"] == it["iteration"]]
            transfers = [t for t in log["transfer"] if t["iteration"] == it["iteration"]]
            # a ring of two: each transfer (of 2 values or more) is one reduce and one
            # all-gather message from this rank
            assert all(t["numel"] >= 2 for t in transfers)
            assert len(msgs) == 2 * len(transfers) > 0
            assert sorted(m["kind"] for m in msgs) == [0] * len(transfers) + [1] * len(transfers)
            assert sum(m["packets"] for m in msgs) == it["packets"]
            assert all(m["created"] <= m["first_sent"] <= m["ended"] for m in msgs)
            assert all(t["handed_s"] <= t["done_s"] for t in transfers)
        assert len(log["window"]) > 10
        assert log["window"][-1]["rx_data"] >= sum(it["packets"] for it in iterations) * 0.5
        assert iteration_breakdown(log, 1) is not None
