"""Where a DLCP trace rank's communication time goes: an optional timing log and its summary.

With ``GRADFABRIC_TRACE_TIMING=DIR`` in its environment, a DLCP ring rank of
:mod:`experiments.training.trace_worker` writes ``DIR/job<J>-rank<R>-<HHMMSS>-<pid>.jsonl``
(its start, UTC, and process: the runs of a sweep one after another) when it ends:

* ``transfer`` lines: each transfer its scheduler handed out (iteration, layers, priority,
  values; when it was handed out and when its all-reduce returned);
* ``message`` lines: each message the rank sent (:class:`hosts.send_state.SendReport` with
  its :class:`~hosts.send_state.SendTiming`: when its sender began, sent first and last,
  heard it complete, ended; its waits for window room, for answers, held on purpose);
* ``window`` lines: the endpoint every ``SAMPLE_S`` seconds (window, flight cap, packets in
  flight, senders waiting for room, messages queued for a sender thread, RTTs, cuts, data
  packets received, CE marks seen);
* ``iteration`` lines: the worker's iteration records.

Times are seconds since the rank's origin (the iteration records' clock). Nothing is
written without the variable; with it, the rank does a little more work per transfer and
wakes every ``SAMPLE_S`` seconds.

``python -m experiments.training.trace_timing DIR`` prints, per rank and iteration, the
communication phase (first send to last arrival), the data rate it achieved and what held it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

#: The environment variable naming the folder of the timing logs.
ENV = "GRADFABRIC_TRACE_TIMING"
#: Seconds between two samples of the endpoint's state.
SAMPLE_S = 0.005
#: Window samples: time, cwnd, flight cap, in flight, senders waiting for room, chunks waiting
#: for answers, messages queued for a sender thread, srtt, min rtt, pacing rate, cuts, cuts
#: taken back, DCTCP alpha, data packets received, CE-marked packets received, probes answered,
#: loss episodes whose cut waited for a confirmation (the path was seen to reorder).
WINDOW_FIELDS = ("t", "cwnd", "cap", "in_flight", "room_waiters", "waits", "queued", "srtt", "min_rtt", "rate",
                 "cuts", "undone", "alpha", "rx_data", "rx_ce", "rx_probes", "deferred")


class TimingLog:
    """Collects one rank's timing records in memory and writes them at :meth:`close`."""

    def __init__(self, path: Path, endpoint: Any, origin: float) -> None:
        self.path = path
        self.endpoint = endpoint
        # monotonic (the sender's clock) minus the origin's perf_counter clock
        self.offset = time.monotonic() - (time.perf_counter() - origin)
        self.origin = origin
        self.lines: list[dict[str, Any]] = []
        self.samples: list[tuple[float, ...]] = []
        self.records: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample_loop, name="trace-timing", daemon=True)
        self._thread.start()

    def _rel(self, mono: float) -> float | None:
        return round(mono - self.offset, 6) if mono else None

    def transfer(self, iteration: int, transfer: Any, started: float, results: list[Any]) -> None:
        """A transfer's all-reduce returned (ring: each result is ``(values, RingReport)``)."""
        done = time.perf_counter() - self.origin
        lines = [{"event": "transfer", "iteration": iteration, "id": transfer.id, "layers": list(transfer.layer_indices),
                  "priority": transfer.priority, "numel": transfer.numel, "handed_s": round(started, 6),
                  "done_s": round(done, 6)}]
        for result in results:
            report = result[1] if isinstance(result, tuple) else result
            for send in getattr(report, "sends", []):
                timing = send.timing
                line = {"event": "message", "iteration": iteration, "transfer": transfer.id,
                        "kind": int(send.key.kind), "tensor": send.key.tensor_id, "wire_iteration": send.key.iteration,
                        **{k: v for k, v in asdict(send).items() if k not in ("key", "timing", "lost_by_class")}}
                if timing is not None:
                    for name, value in asdict(timing).items():
                        line[name] = self._rel(value) if name in _TIMES else value
                lines.append(line)
        with self._lock:
            self.lines += lines

    def _sample_loop(self) -> None:
        ep = self.endpoint
        while not self._stop.wait(SAMPLE_S):
            w, rtt, stats = ep.window, ep.window.rtt, ep.reassembler.stats
            executor = getattr(ep, "_executor", None)
            queued = executor._work_queue.qsize() if executor is not None else 0
            self.samples.append((
                round(time.perf_counter() - self.origin, 6), round(w.cwnd, 2), round(w.flight_cap, 2), ep.in_flight,
                len(ep._room), len(ep._waits), queued,
                round(rtt.srtt, 6) if rtt.srtt is not None else None,
                round(rtt.min_rtt, 6) if rtt.min_rtt is not None else None,
                round(w.rate, 1), w.decreases, w.undone, round(w.alpha, 4), stats.data_packets, stats.ce_marked,
                stats.probes, w.deferred))

    def close(self) -> None:
        """Stop sampling and write the log."""
        self._stop.set()
        self._thread.join(timeout=1.0)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("w") as f:
            for record in self.records:
                f.write(json.dumps({"event": "iteration", **record}, sort_keys=True) + "\n")
            for line in self.lines:
                f.write(json.dumps(line, sort_keys=True) + "\n")
            for sample in self.samples:
                f.write(json.dumps({"event": "window", **dict(zip(WINDOW_FIELDS, sample))}) + "\n")


_TIMES = ("created", "first_sent", "last_sent", "completed", "last_answer", "ended")


def open_log(job_id: int, rank: int, endpoint: Any, origin: float) -> TimingLog | None:
    """The rank's timing log when ``GRADFABRIC_TRACE_TIMING`` names a folder, else None."""
    folder = os.environ.get(ENV)
    if not folder or endpoint is None:
        return None
    name = f"job{job_id}-rank{rank}-{time.strftime('%H%M%S', time.gmtime())}-{os.getpid()}.jsonl"
    return TimingLog(Path(folder) / name, endpoint, origin)


def load(path: Path) -> dict[str, list[dict[str, Any]]]:
    """A timing log's lines by event."""
    out: dict[str, list[dict[str, Any]]] = {"iteration": [], "transfer": [], "message": [], "window": []}
    for text in path.read_text().splitlines():
        line = json.loads(text)
        out.setdefault(line.pop("event"), []).append(line)
    return out


def iteration_breakdown(log: dict[str, list[dict[str, Any]]], iteration: int) -> dict[str, Any] | None:
    """One iteration's communication phase (first send to last arrival): how long, the data
    rate received, how the window was used, and where the messages' time went."""
    rec = next((r for r in log["iteration"] if r["iteration"] == iteration), None)
    if rec is None or rec.get("first_send_s") is None or rec.get("last_arrival_s") is None:
        return None
    t0, t1 = rec["first_send_s"], rec["last_arrival_s"]
    span = max(t1 - t0, 1e-9)
    win = [s for s in log["window"] if t0 <= s["t"] <= t1]
    msgs = [m for m in log["message"] if m["iteration"] == iteration]
    transfers = [t for t in log["transfer"] if t["iteration"] == iteration]
    out: dict[str, Any] = {"iteration": iteration, "comm_s": round(span, 4),
                           "backward_end_after_first_send_s": round(rec["backward_end_s"] - t0, 4),
                           "messages": len(msgs), "transfers": len(transfers),
                           "packets_sent": sum(m["packets"] for m in msgs),
                           "retransmitted": sum(m["retransmitted"] for m in msgs)}
    out["sent_pps"] = round(out["packets_sent"] / span, 1)
    if len(win) >= 2:
        out["received_pps"] = round((win[-1]["rx_data"] - win[0]["rx_data"]) / (win[-1]["t"] - win[0]["t"] or 1e-9), 1)
        # Each sample in one state: the window full (waiting for answers); room left while
        # senders wait for it (their wake-ups lag); nothing in flight and no sender waiting
        # (nothing to send: the ring's steps or the scheduler); the rest (room, none waiting).
        full = sum(s["in_flight"] >= s["cap"] - 2 for s in win)
        lagging = sum(s["in_flight"] < s["cap"] - 2 and s["room_waiters"] > 0 for s in win)
        idle = sum(s["in_flight"] == 0 and s["room_waiters"] == 0 for s in win)
        out["window_full_share"] = round(full / len(win), 3)
        out["room_but_waiters_share"] = round(lagging / len(win), 3)
        out["nothing_in_flight_share"] = round(idle / len(win), 3)
        out["other_share"] = round(1 - (full + lagging + idle) / len(win), 3)
        # room, nobody waiting for it, yet messages wait for a sender thread (all are busy)
        out["threads_busy_share"] = round(sum(s["in_flight"] < s["cap"] - 2 and s["room_waiters"] == 0
                                              and s["queued"] > 0 for s in win) / len(win), 3)
        out["pacing_rate_mean"] = round(statistics.fmean(s["rate"] for s in win), 1)
        out["room_waiters_mean"] = round(statistics.fmean(s["room_waiters"] for s in win), 2)
        out["queued_for_thread_mean"] = round(statistics.fmean(s["queued"] for s in win), 2)
        for name in ("cwnd", "cap", "in_flight"):
            out[f"{name}_mean"] = round(statistics.fmean(s[name] for s in win), 1)
        rtts = [s for s in win if s["srtt"]]
        if rtts:
            out["srtt_ms_mean"] = round(1e3 * statistics.fmean(s["srtt"] for s in rtts), 2)
            out["min_rtt_ms"] = round(1e3 * min(s["min_rtt"] for s in rtts), 2)
            out["window_rate_pps"] = round(statistics.fmean(s["cap"] / s["srtt"] for s in rtts), 1)
        out["cuts"] = win[-1]["cuts"] - win[0]["cuts"]
        out["ce_marked"] = win[-1]["rx_ce"] - win[0]["rx_ce"]
    if transfers:
        took = [t["done_s"] - t["handed_s"] for t in transfers]
        out["transfer_ms_median"] = round(1e3 * statistics.median(took), 2)
        out["transfer_ms_max"] = round(1e3 * max(took), 2)
        front = min(transfers, key=lambda t: min(t["layers"]))  # the layer the next forward needs first
        out["front_transfer_ms"] = round(1e3 * (front["done_s"] - front["handed_s"]), 2)
        out["last_done_after_backward_end_ms"] = round(1e3 * (max(t["done_s"] for t in transfers)
                                                              - rec["backward_end_s"]), 2)
    if msgs:
        timed = [m for m in msgs if m.get("created") is not None]
        out["message_s_sum"] = round(sum(m["ended"] - m["created"] for m in timed), 3)
        for name in ("room_wait_s", "answer_wait_s", "held_s"):
            out[f"{name}_sum"] = round(sum(m.get(name, 0.0) for m in timed), 3)
        first = {t["id"]: t["handed_s"] for t in transfers}
        starts = [m["created"] - first[m["transfer"]] for m in timed if m["transfer"] in first and m["kind"] == 0]
        if starts:
            out["reduce_start_after_handout_ms_median"] = round(1e3 * statistics.median(starts), 2)
        ends = [m["ended"] - m["completed"] for m in timed if m.get("completed")]
        if ends:
            out["end_after_complete_ms_mean"] = round(1e3 * statistics.fmean(ends), 2)
        tails = [m["completed"] - m["last_sent"] for m in timed if m.get("completed") and m.get("last_sent")]
        if tails:
            out["complete_after_last_data_ms_median"] = round(1e3 * statistics.median(tails), 2)
        out["echoes"] = sum(m["ecn_echoes"] for m in msgs)
        out["timeouts"] = sum(m["timeouts"] for m in msgs)
        out["finals"] = sum(m.get("finals", 0) for m in timed)
        out["confirms"] = sum(m.get("confirms", 0) for m in timed)
        busy = _union([(m["first_sent"], m["last_sent"]) for m in timed if m.get("first_sent")], t0, t1)
        out["sending_share"] = round(busy / span, 3)
    return out


def _union(intervals: list[tuple[float, float]], lo: float, hi: float) -> float:
    """Length of the union of `intervals` clipped to [lo, hi]."""
    total, end = 0.0, lo
    for a, b in sorted((max(a, lo), min(b, hi)) for a, b in intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.training.trace_timing", description=__doc__.split("\n\n")[0])
    p.add_argument("folder", type=Path, help="a folder of timing logs (GRADFABRIC_TRACE_TIMING)")
    p.add_argument("--skip", type=int, default=1, help="leave out the first iterations (default 1)")
    args = p.parse_args(argv)
    for path in sorted(args.folder.glob("*.jsonl")):
        log = load(path)
        rows = [b for i in sorted({r["iteration"] for r in log["iteration"]}) if i >= args.skip
                and (b := iteration_breakdown(log, i)) is not None]
        print(f"== {path.name}: {len(rows)} iterations")
        if not rows:
            continue
        for key in rows[0]:
            values = [r.get(key) for r in rows if isinstance(r.get(key), (int, float))]
            if key != "iteration" and values:
                print(f"  {key:42s} median {statistics.median(values):>10.3f}  min {min(values):>10.3f}  "
                      f"max {max(values):>10.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
