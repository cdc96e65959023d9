"""Goodput of the DLCP bounded-loss transport, one sender to one receiver over loopback,
against a plain UDP blast of the same bytes in the same packet sizes (same run).

Each receiver runs in a process of its own. DLCP goodput counts a message once the sender
has the receiver's bitmap for it (so probes, bitmaps, pacing and any retransmission are
included); the blast counts what the receiver got between its first and last packet.
"""

from __future__ import annotations

import multiprocessing as mp
import socket
import time

import numpy as np

from hosts.endpoint import SOCKET_BUFFER, Endpoint, set_buffer
from hosts.pacing import Aimd
from hosts.packetize import packetize
from hosts.wire import MsgType
from tests.benchmarks.figure import Figure

MESSAGES = 8
ELEMENTS = 1 << 20  # 4 MiB per message


def _dlcp_receiver(port_out: mp.Queue, messages: int) -> None:
    with Endpoint(worker_id=2, host="127.0.0.1") as endpoint:
        port_out.put(endpoint.address[1])
        for _ in range(messages):
            endpoint.receive(timeout=60)
        time.sleep(0.2)  # answer the last probes


def _blast_receiver(port_out: mp.Queue, result: mp.Queue, expected: int) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    set_buffer(sock, getattr(socket, "SO_RCVBUFFORCE", 33), socket.SO_RCVBUF, SOCKET_BUFFER)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(1.0)
    port_out.put(sock.getsockname()[1])
    got = packets = 0
    first = last = 0.0
    buf = bytearray(65536)
    while got < expected:
        try:
            n = sock.recv_into(buf)
        except TimeoutError:
            break
        last = time.perf_counter()
        if not packets:
            first = last
        got += n
        packets += 1
    result.put((got, packets, max(last - first, 1e-9)))
    sock.close()


def _dlcp(ctx: mp.context.BaseContext, tensor: np.ndarray) -> tuple[float, float]:
    ports: mp.Queue = ctx.Queue()
    proc = ctx.Process(target=_dlcp_receiver, args=(ports, MESSAGES))
    proc.start()
    try:
        dest = ("127.0.0.1", ports.get(timeout=30))
        with Endpoint(worker_id=1, aimd=Aimd(rate=200_000, max_rate=2_000_000, increase=20_000)) as sender:
            started = time.perf_counter()
            packets = sum(sender.send(dest, tensor, iteration=i).packets for i in range(MESSAGES))
            seconds = time.perf_counter() - started
    finally:
        proc.join(timeout=30)
        if proc.is_alive():
            proc.kill()
    return MESSAGES * tensor.nbytes / seconds, packets / seconds


def _blast(ctx: mp.context.BaseContext, tensor: np.ndarray) -> tuple[float, float]:
    batch = packetize(tensor, kind=MsgType.GRADIENT, job_id=1, worker_id=1, tensor_id=0, iteration=0)
    datagrams = [bytes(batch.packet(i)) for i in range(len(batch))]
    payload = sum(len(d) - 28 for d in datagrams)
    ports: mp.Queue = ctx.Queue()
    results: mp.Queue = ctx.Queue()
    proc = ctx.Process(target=_blast_receiver, args=(ports, results, MESSAGES * sum(map(len, datagrams))))
    proc.start()
    try:
        dest = ("127.0.0.1", ports.get(timeout=30))
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        set_buffer(sock, getattr(socket, "SO_SNDBUFFORCE", 32), socket.SO_SNDBUF, SOCKET_BUFFER)
        for _ in range(MESSAGES):
            for d in datagrams:
                sock.sendto(d, dest)
        sock.close()
        got, packets, seconds = results.get(timeout=60)
    finally:
        proc.join(timeout=30)
        if proc.is_alive():
            proc.kill()
    return got * payload / sum(map(len, datagrams)) / seconds, packets / seconds


def run() -> list[Figure]:
    ctx = mp.get_context("spawn")
    tensor = np.random.default_rng(0).standard_normal(ELEMENTS, dtype=np.float32)
    dlcp_bps, dlcp_pps = _dlcp(ctx, tensor)
    blast_bps, blast_pps = _blast(ctx, tensor)
    return [
        Figure("dlcp transport goodput, loopback", dlcp_bps / 1e6, "plain UDP blast, same bytes", blast_bps / 1e6, "MB/s"),
        Figure("dlcp transport packets, loopback", dlcp_pps, "plain UDP blast, same packets", blast_pps, "packets/s"),
    ]
