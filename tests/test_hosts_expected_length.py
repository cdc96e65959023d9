"""A message the caller expects (``Reassembler.expect``) keeps its length: a header of the same
message with another ``tensor_len`` (corrupt or forged) arriving first is dropped as
inconsistent instead of opening the message in memory of its own, which would leave every real
packet dropped and the message never delivered. Both receive paths: packet by packet
(``handle``) and a C batch's runs (``handle_run``)."""

from __future__ import annotations

import select
import socket
import time

import numpy as np
import pytest

from hosts.fastpath import BatchReceiver, native
from hosts.messages import Delivered, MessageKey
from hosts.packetize import packetize
from hosts.receiver import Reassembler
from hosts.wire import MsgType

SOURCE = ("127.0.0.1", 9)
TENSOR = np.arange(1, 2001, dtype=np.float32)
IDS = {"kind": MsgType.GRADIENT, "job_id": 1, "worker_id": 3, "tensor_id": 2, "iteration": 5, "count": 100}
KEY = MessageKey(1, 3, 5, 2, MsgType.GRADIENT)
REAL = packetize(TENSOR, **IDS)  # 20 packets of 100 values
FORGED = packetize(np.full(1744, -1.0, dtype=np.float32), **IDS)  # same message, tensor_len 1744


def _check(r: Reassembler, out: np.ndarray, delivered: list[Delivered], forged: int) -> None:
    ours = [d for d in delivered if d.key == KEY]
    assert len(ours) == 1, "the expected message was not delivered"
    assert np.shares_memory(ours[0].values, out)
    np.testing.assert_array_equal(out, TENSOR)
    assert r.stats.drops["inconsistent"] == forged


def test_packet_by_packet() -> None:
    r = Reassembler(job_id=1, max_tensor_len=1 << 16)
    out = np.full(TENSOR.size, np.nan, dtype=np.float32)
    r.expect(KEY, out)
    delivered: list[Delivered] = []
    for data in [bytes(FORGED.packet(0)), bytes(FORGED.packet(1))] + [bytes(REAL.packet(i)) for i in range(len(REAL))]:
        delivered += r.handle(data, SOURCE)[1]
    _check(r, out, delivered, forged=2)


NAT = native()


@pytest.mark.skipif(NAT is None, reason="the C data path cannot be built here (hosts.fastpath log)")
def test_in_runs_of_a_batch() -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
        sock.bind(("127.0.0.1", 0))
        rx = BatchReceiver(NAT, sock)
        r = Reassembler(job_id=1, max_tensor_len=1 << 16)
        out = np.full(TENSOR.size, np.nan, dtype=np.float32)
        r.expect(KEY, out)
        packets = [FORGED.packet(0), FORGED.packet(1)] + [REAL.packet(i) for i in range(len(REAL))]
        for p in packets:  # the two forged ones form a run of their own, ahead of the real ones
            tx.sendto(p, sock.getsockname())
        delivered: list[Delivered] = []
        seen, deadline = 0, time.monotonic() + 30
        while seen < len(packets) and time.monotonic() < deadline:
            if not select.select([sock], [], [], 1.0)[0]:
                continue
            n = rx.recv()
            i = 0
            while i < n:
                j = rx.run_end(i, n)
                delivered += r.handle_run(rx, i, j, rx.source(i))
                i = j
            seen += n
        assert seen == len(packets), f"{seen} of {len(packets)} datagrams arrived on loopback"
        _check(r, out, delivered, forged=2)
    finally:
        sock.close()
        tx.close()
