"""Where the DLCP receiver's CPU goes on the loopback transfer of :mod:`tests.benchmarks.bench_transport`
(100 MB in 25 messages of 1M float32, bound 0, 64 kB datagrams, C data path), in ns per 1,444 bytes.

The receiver process's receive loop is timed by part with its thread's CPU clock
(``time.thread_time_ns``, so a busy machine's waits are not counted):

* ``recv``: :meth:`hosts.fastpath.BatchReceiver.recv` less ``absorb``: ``gfh_recv`` (``recvmmsg``,
  the kernel's copy of the values into their place or a slot, a misplaced packet's copy back);
* ``absorb``: the C placement of the runs of messages C answers for (``gfh_absorb``, from the
  slots when not read in place) and its Python;
* ``first_runs``: :meth:`hosts.receiver.Reassembler.handle_run`, a message's first run before C
  answers for it, with (inside it) its assembly (``assembly``: maps and array) and the copy of
  its values from the slots (``place``);
* ``batch Python``: the rest of :func:`hosts.rxloop.handle_batch` (counts, liveness, answers
  and their ``sendmmsg``, deliveries), and ``poll``.

Counts beside it: batches, packets read in place (``pay``), the lengths of the first runs, and
the receive thread's wall time from its first to its last packet against its CPU and its time
in ``poll`` (is the receiver behind, or waiting?). ``total`` is the process's CPU as
:mod:`bench_transport` counts it. ``--perf`` adds ``perf record`` of the receive thread and
its samples by class (:func:`tests.benchmarks.bench_messages.classify`) and by leaf symbol.

    python -m tests.benchmarks.bench_transport_receiver [--runs 3] [--perf]
"""

from __future__ import annotations

import argparse
import collections
import multiprocessing as mp
import select
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from tests.benchmarks import bench_transport as bt

PARTS = ("total", "rx_thread", "recv", "absorb", "first_runs", "assembly", "place", "batch_python", "answer",
         "poll")


def _timed(cls: Any, name: str, into: dict[str, Any], key: str) -> None:
    """Add the thread CPU time of every call of ``cls.name`` to ``into[key]``."""
    inner: Callable[..., Any] = getattr(cls, name)
    clock = time.thread_time_ns

    def timed(*args: Any, **kwargs: Any) -> Any:
        start = clock()
        try:
            return inner(*args, **kwargs)
        finally:
            into[key] += clock() - start

    setattr(cls, name, timed)


def _receiver(ports: mp.Queue, out: mp.Queue, tids: mp.Queue) -> None:
    import hosts.endpoint as endpoint_module
    import hosts.fastpath as fastpath
    import hosts.receiver as receiver
    import hosts.rxloop as rxloop
    from hosts.wire import MsgType

    st: dict[str, Any] = dict.fromkeys(PARTS, 0)
    st.update(batches=0, empty=0, packets=0, in_place=0, first_runs=0, runs=[], first=0.0, last=0.0, poll_wall=0.0)
    _timed(fastpath.BatchReceiver, "_absorb", st, "absorb")
    _timed(fastpath.BatchReceiver, "answer", st, "answer")
    _timed(receiver.Reassembler, "_assembly", st, "assembly")
    _timed(fastpath.BatchReceiver, "place", st, "place")
    handle_run = receiver.Reassembler.handle_run

    def first_run(self: Any, rx: Any, i: int, j: int, *args: Any) -> Any:
        st["runs"].append(j - i)
        return handle_run(self, rx, i, j, *args)

    receiver.Reassembler.handle_run = first_run
    _timed(receiver.Reassembler, "handle_run", st, "first_runs")
    clock = time.thread_time_ns
    polls: list[tuple[float, float]] = []  # (start, end) of each poll after the first packet

    def loop(ep: Any, rx: Any) -> None:  # rxloop.receive_batches, timed by part
        poller = select.poll()
        poller.register(ep._sock, select.POLLIN)
        while not ep._stop.is_set():
            a, wall = clock(), time.perf_counter()
            ready = poller.poll(50)
            st["poll"] += clock() - a
            if st["first"]:
                polls.append((wall, time.perf_counter()))
            if not ready:
                continue
            while not ep._stop.is_set():
                a = clock()
                n = rx.recv()
                b = clock()
                st["recv"] += b - a
                if n == 0:
                    st["empty"] += 1
                    break
                st["first"] = st["first"] or time.perf_counter()
                st["last"] = time.perf_counter()
                st["batches"] += 1
                st["packets"] += n
                st["in_place"] += int(np.count_nonzero(rx.pay[:n]))
                rxloop.handle_batch(ep, rx, n)
                st["batch_python"] += clock() - b

    endpoint_module.receive_batches = loop
    bounds = {MsgType.GRADIENT: 0.0, MsgType.PARAMETER: 0.0}
    with endpoint_module.Endpoint(worker_id=2, host="127.0.0.1", bounds=bounds, fast=True, linger=0.1,
                                  count=None) as ep:
        thread_clock = time.pthread_getcpuclockid(ep._thread.ident)
        tids.put(ep._thread.native_id)
        ports.put(ep.address[1])
        cpu, rx0 = bt._cpu(), time.clock_gettime_ns(thread_clock)
        for _ in range(bt.MESSAGES):
            got = ep.receive(timeout=120)
            assert got.received == got.values.size, "bound 0: every element arrives"
        st["total"] = (bt._cpu() - cpu) * 1e9
        st["rx_thread"] = time.clock_gettime_ns(thread_clock) - rx0
    st["poll_wall"] = sum(max(0.0, min(end, st["last"]) - start) for start, end in polls)
    st["recv"] -= st["absorb"]
    st["batch_python"] -= st["first_runs"] + st["answer"]
    out.put(st)


def _perf_samples(data: Path) -> collections.Counter[str]:
    text = subprocess.run(["perf", "script", "-i", str(data), "-F", "ip,sym,dso"], capture_output=True, text=True,
                          check=True).stdout
    leaves: collections.Counter[str] = collections.Counter()
    for sample in text.split("\n\n"):
        frames = sample.strip()
        if frames:
            leaves[frames.split("\n")[0].strip().split(" ", 1)[-1]] += 1
    return leaves


def run_once(perf_file: Path | None = None) -> tuple[dict[str, Any], dict[str, float]]:
    """One transfer: the receiver's parts (ns, counts) and the sender's (wall s, stalls)."""
    ctx = mp.get_context("spawn")
    ports, rx_out, tx_out, tids = ctx.Queue(), ctx.Queue(), ctx.Queue(), ctx.Queue()
    rx = ctx.Process(target=_receiver, args=(ports, rx_out, tids))
    rx.start()
    perf = None
    try:
        tid = tids.get(timeout=60)
        if perf_file is not None:
            perf = subprocess.Popen(["perf", "record", "-q", "-e", "cpu-clock", "-F", "20000", "-g", "-t", str(tid),
                                     "-o", str(perf_file)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        tx = ctx.Process(target=bt._dlcp_sender, args=(ports.get(timeout=60), tx_out, True, True))
        tx.start()
        wall, tx_cpu, _packets, stalls = tx_out.get(timeout=300)
        st = rx_out.get(timeout=60)
        tx.join(timeout=30)
    finally:
        if perf is not None:
            perf.send_signal(2)
            perf.wait(timeout=30)
        rx.join(timeout=30)
        if rx.is_alive():
            rx.kill()
    return st, {"wall": wall, "tx_cpu": tx_cpu, **stalls}


def main() -> None:
    parser = argparse.ArgumentParser(description="the DLCP receiver's CPU by part, 100 MB over loopback")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--perf", action="store_true", help="also sample the receive thread with perf")
    args = parser.parse_args()
    per = bt.TOTAL / bt.PAYLOAD
    parts: dict[str, list[float]] = {p: [] for p in PARTS}
    leaves: collections.Counter[str] = collections.Counter()
    classes: collections.Counter[str] = collections.Counter()
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.runs):
            data = Path(tmp) / f"rx{r}.data" if args.perf else None
            st, tx = run_once(data)
            for p in PARTS:
                parts[p].append(st[p] / per)
            print(f"receiver run {r + 1}: {bt.TOTAL / tx['wall'] / 1e6:,.0f} MB/s, {tx['wall'] * 1e3:.1f} ms "
                  f"(first {bt.IN_FLIGHT} messages done at {tx['first_ms']:.1f} ms, room waits "
                  f"{tx['room_wait_ms']:.1f} ms); sender CPU {tx['tx_cpu'] / per * 1e9:.0f} ns per 1,444 bytes",
                  flush=True)
            print("  ns per 1,444 bytes: " + ", ".join(f"{p} {st[p] / per:.0f}" for p in PARTS))
            print(f"  {st['batches']} batches ({st['empty']} empty reads), {st['in_place']} of {st['packets']} "
                  f"packets read in place; first runs {st['runs']}")
            print(f"  receive thread: {(st['last'] - st['first']) * 1e3:.1f} ms from its first packet to its last, "
                  f"{st['rx_thread'] / 1e6:.1f} ms CPU, {st['poll_wall'] * 1e3:.1f} ms in poll", flush=True)
            if data is not None:
                from tests.benchmarks.bench_messages import classify

                leaves.update(_perf_samples(data))
                for name, share in classify(data).items():
                    classes[name] += share / args.runs
    print("median ns per 1,444 bytes over the runs: "
          + ", ".join(f"{p} {statistics.median(v):.0f}" for p, v in parts.items()))
    if args.perf:
        total = sum(leaves.values()) or 1
        print("receive thread samples by class: "
              + ", ".join(f"{name} {100 * share:.1f}%" for name, share in classes.most_common()))
        print("by leaf symbol: " + ", ".join(f"{name} {100 * n / total:.1f}%" for name, n in leaves.most_common(12)))


if __name__ == "__main__":
    main()
