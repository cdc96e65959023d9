"""Goodput and CPU per packet of the DLCP transport over loopback, against a plain TCP
socket carrying the same bytes in the same run.

100 MB as 25 messages of 1M float32 (bound 0, ``IN_FLIGHT`` at once), one sender to one
receiver, each in a process of its own, on the C data path (:mod:`hosts.fastpath`) and on the Python one; TCP
moves the same 100 MB as 4 MB writes on one connection. The headline DLCP figure sizes its
packets from the path's MTU (``Endpoint(count=None)``: 16,369 values per 64 kB datagram on
loopback, as TCP's segments grow to loopback's MTU, and as the DDP hook's ``connect()``
does); beside it the same transfer in 1,444-byte packets (361 values, the fabric's 1500-byte
MTU), whose CPU per packet is the per-packet cost. Goodput counts from the first send
until the sender holds the receiver's answer for the last message (TCP: until the
receiver's one-byte acknowledgement of the last byte). Both send the same 25 distinct
tensors (TCP sent one 4 MB tensor 25 times before 2026-11-27, read from the caches after the
first). CPU is each process's user plus
system time over the transfer, per data packet of 1,444 bytes, or per 1,444 payload bytes
(TCP, and DLCP's 64 kB datagrams). The runs alternate (DLCP 64 kB, DLCP 1,444 bytes, TCP,
...) and each figure is the median of ``ROUNDS``, so a busy machine weighs on all alike.
Each round prints DLCP's ratio to the TCP run beside it and where DLCP waited (probe
timeouts, packets resent, waits for window room, the time until the first messages ended:
the window's slow start from a fresh endpoint); the end prints the median of the rounds'
ratios with its distribution-free 95% CI (:func:`median_ci`).
``python -m tests.benchmarks.bench_transport --rounds N`` runs N rounds.
"""

from __future__ import annotations

import argparse
import math
import multiprocessing as mp
import resource
import socket
import statistics
import time
from collections import deque
from concurrent.futures import Future
from typing import Any

import numpy as np

from tests.benchmarks.figure import Figure

MESSAGES = 25
ELEMENTS = 1_000_000  # 4 MB per message, 100 MB in all
ROUNDS = 5
IN_FLIGHT = 2  # messages the sender keeps in flight, as a collective keeps several
PAYLOAD = 1444  # bytes of values in a full DLCP packet
TOTAL = MESSAGES * ELEMENTS * 4


def median_ci(values: list[float], level: float = 0.95) -> tuple[float, float, float]:
    """(median, low, high): the median of `values` and its distribution-free confidence
    interval (order statistics of the binomial(n, 1/2) rank of the median); with too few
    values for `level`, the interval is their whole range."""
    xs = sorted(values)
    n = len(xs)
    if not n:
        raise ValueError("the median of no values")
    k = 0  # the interval xs[k] .. xs[n - 1 - k] misses the median with probability 2 P(B <= k)
    while k + 1 < n - 1 - k and sum(math.comb(n, i) for i in range(k + 2)) * 2 / 2**n <= 1 - level:
        k += 1
    return statistics.median(xs), xs[k], xs[n - 1 - k]


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _count(mtu: bool) -> int | None:
    """Values per packet: None (from the path's MTU) or a full 1500-byte-MTU packet's."""
    from hosts.wire import MAX_COUNT_MTU_1500

    return None if mtu else MAX_COUNT_MTU_1500


def _dlcp_receiver(ports: mp.Queue, out: mp.Queue, fast: bool, mtu: bool) -> None:
    from hosts.endpoint import Endpoint
    from hosts.wire import MsgType

    bounds = {MsgType.GRADIENT: 0.0, MsgType.PARAMETER: 0.0}
    with Endpoint(worker_id=2, host="127.0.0.1", bounds=bounds, fast=fast, linger=0.1,
                  count=_count(mtu)) as endpoint:
        ports.put(endpoint.address[1])
        cpu = _cpu()
        for _ in range(MESSAGES):
            got = endpoint.receive(timeout=120)
            assert got.received == got.values.size, "bound 0: every element arrives"
        out.put((_cpu() - cpu, endpoint.reassembler.stats.data_packets))


def _dlcp_sender(port: int, out: mp.Queue, fast: bool, mtu: bool) -> None:
    from hosts.endpoint import Endpoint
    from hosts.pacing import Aimd
    from hosts.wire import MsgType

    bounds = {MsgType.GRADIENT: 0.0, MsgType.PARAMETER: 0.0}
    tensors = _tensors()
    with Endpoint(worker_id=1, host="127.0.0.1", bounds=bounds, fast=fast, aimd=Aimd(rate=10_000_000),
                  count=_count(mtu)) as ep:
        cpu, started, t0 = _cpu(), time.perf_counter(), time.monotonic()
        futures: deque[Future] = deque()
        reports = []
        for i, t in enumerate(tensors):  # IN_FLIGHT messages at once, as a collective keeps them
            if len(futures) >= IN_FLIGHT:
                reports.append(futures.popleft().result())
            futures.append(ep.send_async(("127.0.0.1", port), t, copy=False, iteration=i))
        reports += [f.result() for f in futures]
        wall, used = time.perf_counter() - started, _cpu() - cpu
        out.put((wall, used, sum(r.packets for r in reports), _stalls(reports, t0)))


def _stalls(reports: list, t0: float) -> dict[str, float]:
    """Where a transfer waited: probes re-sent after their RTO, packets resent, the senders'
    waits for window room (ms, summed over messages) and the time until the first
    ``IN_FLIGHT`` messages ended (ms: the window's slow start from a fresh endpoint)."""
    return {"timeouts": sum(r.timeouts for r in reports), "retransmitted": sum(r.retransmitted for r in reports),
            "room_wait_ms": sum(r.timing.room_wait_s for r in reports) * 1e3,
            "first_ms": max(r.timing.ended - t0 for r in reports[:IN_FLIGHT]) * 1e3}


def _tcp_receiver(ports: mp.Queue, out: mp.Queue) -> None:
    server = socket.create_server(("127.0.0.1", 0))
    ports.put(server.getsockname()[1])
    conn, _ = server.accept()
    cpu = _cpu()
    buf = bytearray(1 << 20)
    got = 0
    while got < TOTAL:
        n = conn.recv_into(buf)
        if not n:
            break
        got += n
    conn.sendall(b"k")
    out.put((_cpu() - cpu, got))
    conn.close()
    server.close()


def _tensors() -> list[np.ndarray]:
    """The 25 messages both transports send: 100 MB, more than the caches hold."""
    return [np.random.default_rng(i).standard_normal(ELEMENTS, dtype=np.float32) for i in range(MESSAGES)]


def _tcp_sender(port: int, out: mp.Queue) -> None:
    data = [memoryview(t.view(np.uint8)) for t in _tensors()]
    with socket.create_connection(("127.0.0.1", port)) as sock:
        cpu, started = _cpu(), time.perf_counter()
        for message in data:
            sock.sendall(message)
        sock.recv(1)
        out.put((time.perf_counter() - started, _cpu() - cpu, TOTAL))


def _pair(ctx: Any, receiver: Any, sender: Any, *args: Any) -> tuple[tuple, tuple]:
    ports: mp.Queue = ctx.Queue()
    rx_out: mp.Queue = ctx.Queue()
    tx_out: mp.Queue = ctx.Queue()
    rx = ctx.Process(target=receiver, args=(ports, rx_out, *args))
    rx.start()
    try:
        tx = ctx.Process(target=sender, args=(ports.get(timeout=60), tx_out, *args))
        tx.start()
        sent = tx_out.get(timeout=300)
        got = rx_out.get(timeout=60)
        tx.join(timeout=30)
    finally:
        rx.join(timeout=30)
        for proc in (rx,):
            if proc.is_alive():
                proc.kill()
    return sent, got


def measure(rounds: int = ROUNDS) -> dict[str, float]:
    """Median goodput (bytes/s) and CPU per packet and per 1,444 bytes (ns) of each side, DLCP
    (C data path in 64 kB and 1,444-byte packets, Python data path) and TCP, in alternating runs."""
    ctx = mp.get_context("spawn")
    runs: dict[str, list[float]] = {}

    def note(name: str, value: float) -> None:
        runs.setdefault(name, []).append(value)

    per = TOTAL / PAYLOAD
    for r in range(rounds):
        for label, fast, mtu in (("mtu", True, True), ("c", True, False), ("python", False, False)):
            if label == "python" and r > 0:
                continue  # the slow path once is enough to compare
            (wall, tx_cpu, packets, stalls), (rx_cpu, rx_packets) = _pair(ctx, _dlcp_receiver, _dlcp_sender, fast, mtu)
            note(f"{label}_goodput", TOTAL / wall)
            note(f"{label}_tx_ns", tx_cpu / packets * 1e9)
            note(f"{label}_rx_ns", rx_cpu / max(rx_packets, 1) * 1e9)
            note(f"{label}_tx_ns_1444", tx_cpu / per * 1e9)
            note(f"{label}_rx_ns_1444", rx_cpu / per * 1e9)
            for name, value in stalls.items():
                note(f"{label}_{name}", value)
            print(f"bench transport: round {r + 1} DLCP ({label}) {TOTAL / wall / 1e6:,.0f} MB/s, "
                  f"{packets:,} packets, {wall * 1e3:.1f} ms (first {IN_FLIGHT} messages done at "
                  f"{stalls['first_ms']:.1f} ms, room waits {stalls['room_wait_ms']:.1f} ms), "
                  f"{stalls['timeouts']} probe timeouts, {stalls['retransmitted']} resent", flush=True)
        (wall, tx_cpu, _), (rx_cpu, _) = _pair(ctx, _tcp_receiver, _tcp_sender)
        note("tcp_goodput", TOTAL / wall)
        note("tcp_tx_ns", tx_cpu / per * 1e9)
        note("tcp_rx_ns", rx_cpu / per * 1e9)
        for label in ("mtu", "c"):
            note(f"{label}_round_ratio", runs[f"{label}_goodput"][-1] / runs["tcp_goodput"][-1])
        print(f"bench transport: round {r + 1} TCP {TOTAL / wall / 1e6:,.0f} MB/s; DLCP / TCP this round "
              f"{runs['mtu_round_ratio'][-1]:.2f} (64 kB), {runs['c_round_ratio'][-1]:.2f} (1,444 bytes)",
              flush=True)
    for label, what in (("mtu", "64 kB packets"), ("c", "1,444-byte packets")):
        ratios = runs[f"{label}_round_ratio"]
        mid, lo, hi = median_ci(ratios)
        print(f"bench transport: DLCP ({what}) / TCP per round, median {mid:.2f} (95% CI {lo:.2f}-{hi:.2f}; "
              f"{', '.join(f'{x:.2f}' for x in ratios)}), {sum(x >= 0.5 for x in ratios)} of {len(ratios)} "
              f"rounds at or above 0.5", flush=True)
    return {name: statistics.median(values) for name, values in runs.items()}


def run(rounds: int = ROUNDS) -> list[Figure]:
    m = measure(rounds)
    what = "loopback, 100 MB in 1M-element messages, bound 0"
    return [
        Figure(f"DLCP goodput, C data path, packets from the MTU (64 kB), {what}", m["mtu_goodput"] / 1e6,
               "TCP socket, same bytes", m["tcp_goodput"] / 1e6, "MB/s"),
        Figure(f"DLCP goodput, C data path, 1,444-byte packets, {what}", m["c_goodput"] / 1e6,
               "TCP socket, same bytes", m["tcp_goodput"] / 1e6, "MB/s"),
        Figure(f"DLCP goodput, Python data path, {what}", m["python_goodput"] / 1e6, "TCP socket, same bytes",
               m["tcp_goodput"] / 1e6, "MB/s"),
        Figure("DLCP sender CPU per packet, C data path", m["c_tx_ns"], "Python data path", m["python_tx_ns"],
               "ns", higher_is_better=False),
        Figure("DLCP receiver CPU per packet, C data path", m["c_rx_ns"], "Python data path", m["python_rx_ns"],
               "ns", higher_is_better=False),
        Figure("DLCP sender CPU per packet, C data path", m["c_tx_ns"], "TCP sender CPU per 1,444 bytes",
               m["tcp_tx_ns"], "ns", higher_is_better=False),
        Figure("DLCP receiver CPU per packet, C data path", m["c_rx_ns"], "TCP receiver CPU per 1,444 bytes",
               m["tcp_rx_ns"], "ns", higher_is_better=False),
        Figure("DLCP sender CPU per 1,444 bytes, C data path, 64 kB packets", m["mtu_tx_ns_1444"],
               "TCP sender CPU per 1,444 bytes", m["tcp_tx_ns"], "ns", higher_is_better=False),
        Figure("DLCP receiver CPU per 1,444 bytes, C data path, 64 kB packets", m["mtu_rx_ns_1444"],
               "TCP receiver CPU per 1,444 bytes", m["tcp_rx_ns"], "ns", higher_is_better=False),
    ]


def main() -> None:
    from tests.benchmarks.figure import print_table

    parser = argparse.ArgumentParser(description="DLCP against TCP on loopback, 100 MB, alternating rounds")
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    print_table(run(parser.parse_args().rounds))


if __name__ == "__main__":
    main()
