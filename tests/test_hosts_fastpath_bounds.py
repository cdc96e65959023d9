"""The C data path at its edges: it writes only inside the buffers it is given.

Adversarial inputs straight into ``hosts/fastpath.c``: headers whose offset, count and
sequence number point past the message, short and truncated datagrams, GRO datagrams larger
than a receive slot, more packets than the packet list holds, and job-key tags made by two
sending threads at once. Every array C writes into is a slice of a larger one whose guard
bytes must stay untouched, and the outcomes are checked against values worked out here. Run
under AddressSanitizer (``GRADFABRIC_FASTPATH_SANITIZE=1``, libasan preloaded) the same
tests also catch reads out of bounds.
"""

from __future__ import annotations

import gc
import hmac
import random
import select
import socket
import threading

import numpy as np
import pytest

from hosts.endpoint import Endpoint
from hosts.fastpath import ADD, PLACE, R_RECEIVED, R_USED, BatchReceiver, BatchSender, native
from hosts.packetize import packetize
from hosts.wire import HEADER_LEN, MsgType

NAT = native()
pytestmark = pytest.mark.skipif(NAT is None, reason="the C data path cannot be built here (hosts.fastpath log)")
GUARD = 64
SRC = ("127.0.0.1", 5001)


def _guarded(nbytes: int) -> tuple[np.ndarray, np.ndarray]:
    """A zeroed array of `nbytes` between two guard regions, and the whole."""
    whole = np.full(nbytes + 2 * GUARD, 0xA5, dtype=np.uint8)
    inner = whole[GUARD:GUARD + nbytes]
    inner[:] = 0
    return inner, whole


def _guards_intact(whole: np.ndarray) -> bool:
    return bool((whole[:GUARD] == 0xA5).all() and (whole[-GUARD:] == 0xA5).all())


def _header(offset: int, count: int, seq: int, tensor_len: int) -> bytes:
    """A gradient data header (version 1), big-endian as on the wire."""
    return (bytes([0x10, 0, 0, 1, 0, 1, 0, 3]) + (7).to_bytes(4, "big") + offset.to_bytes(4, "big")
            + tensor_len.to_bytes(4, "big") + count.to_bytes(2, "big") + bytes(2) + seq.to_bytes(4, "big"))


@pytest.mark.parametrize("mode", [PLACE, ADD])
@pytest.mark.parametrize("seed", range(4))
def test_place_writes_only_inside_the_message_whatever_the_headers_say(seed: int, mode: int) -> None:
    """Placing and adding (into zeros, so the outcome is the same) check the same bounds."""
    assert NAT is not None
    rng = random.Random(seed)
    tensor_len = rng.randint(1, 40)
    datagrams: list[bytes] = []
    for _ in range(300):
        offset = rng.choice([0, rng.randrange(tensor_len), tensor_len - 1, tensor_len, tensor_len + 1, 2**32 - 1])
        count = rng.choice([0, 1, rng.randint(1, tensor_len), tensor_len, tensor_len + 1, 0xFFFF])
        seq = rng.choice([0, rng.randrange(tensor_len), tensor_len - 1, tensor_len, 2**32 - 1])
        claimed = count if rng.random() < 0.8 else rng.choice([0, max(0, count - 1), count + 1])
        payload = np.full(min(claimed, 600), float(len(datagrams) + 1), dtype=np.float32).tobytes()
        datagrams.append(_header(offset, count, seq, tensor_len) + payload)
    rx = BatchReceiver(NAT, None)
    n = rx.load(datagrams, [SRC] * len(datagrams), [0] * len(datagrams))
    assert rx.run_end(0, n) == n  # one run: the headers agree on everything but offset, count, seq

    values, vw = _guarded(4 * tensor_len)
    have, hw = _guarded(tensor_len)
    seqs, sw = _guarded(tensor_len)
    arrays = (NAT.ptr(values), NAT.ptr(have), NAT.ptr(seqs))
    want = np.zeros(tensor_len, dtype=np.float32)
    got, seen, received, i = np.zeros(tensor_len, dtype=bool), set(), 0, 0
    oob = payload_bad = dup = 0
    while i < n:
        res = rx.place(i, n, tensor_len, arrays, received, mode).copy()
        # the same checks, worked out here packet by packet
        stop = i
        for k in range(i, n):
            stop = k + 1
            data = datagrams[k]
            offset, tlen, count, seq = (int.from_bytes(data[12:16], "big"), tensor_len,
                                        int.from_bytes(data[20:22], "big"), int.from_bytes(data[24:28], "big"))
            if count == 0 or offset + count > tlen or seq >= tlen:
                oob += 1
                continue
            if len(data) != HEADER_LEN + 4 * count:
                payload_bad += 1
                continue
            if seq in seen:
                dup += 1
                continue
            seen.add(seq)
            fresh = ~got[offset:offset + count]
            want[offset:offset + count][fresh] = np.frombuffer(data[HEADER_LEN:], np.float32)[fresh]
            got[offset:offset + count] = True
            if got.all():
                break
        assert int(res[R_USED]) == stop
        received += int(res[R_RECEIVED])
        i = stop
        if got.all():
            break
    assert (oob, payload_bad, dup) != (0, 0, 0)  # the stream exercised the checks
    assert _guards_intact(vw) and _guards_intact(hw) and _guards_intact(sw)
    assert received == int(got.sum())
    np.testing.assert_array_equal(values.view(np.float32), want)
    np.testing.assert_array_equal(have.astype(bool), got)


class _SmallReceiver(BatchReceiver):
    """Four slots of 256 bytes: most test datagrams do not fit."""

    SLOTS = 4
    SLOT_SIZE = 256


def _socket_pair() -> tuple[socket.socket, socket.socket]:
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.setsockopt(socket.IPPROTO_IP, socket.IP_RECVTOS, 1)
    rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 21)
    rx.bind(("127.0.0.1", 0))
    rx.settimeout(5)
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    return rx, tx


def _drain(rx: BatchReceiver, sock: socket.socket) -> list[tuple[int, int]]:
    """(offset, length) of every packet listed while datagrams are queued (loopback queues
    them before sendto returns)."""
    listed: list[tuple[int, int]] = []
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    while poller.poll(300):
        n = rx.recv()
        listed += [(int(rx.off[p]), int(rx.len[p])) for p in range(n)]
    return listed


@pytest.mark.parametrize("keyed", [False, True])
def test_receive_lists_only_bytes_inside_its_slots(keyed: bool) -> None:
    assert NAT is not None
    if keyed and not NAT.auth():
        pytest.skip("no libcrypto with HMAC here: the keyed path is not built")
    key = b"k" * 32 if keyed else None
    sock, tx = _socket_pair()
    try:
        rx = _SmallReceiver(NAT, sock, key)
        dest = sock.getsockname()
        sizes = [0, 5, 27, 28, 255, 256, 257, 1000, 65000]
        for size in sizes:
            tx.sendto(bytes(range(256)) * (size // 256) + bytes(size % 256), dest)
        try:  # one datagram of 40 segments of 100 bytes: coalesced, far larger than a slot
            tx.setsockopt(17, 103, 100)
            tx.sendto(bytes(4000), dest)
        except OSError:
            pass
        listed = _drain(rx, sock)
    finally:
        sock.close()
        tx.close()
    assert listed, "nothing was received on loopback"
    for off, length in listed:
        slot = off // rx.SLOT_SIZE
        assert slot < rx.SLOTS and off + length <= (slot + 1) * rx.SLOT_SIZE, (off, length)
    if not keyed:  # the truncated ones list at most the slot's bytes; the empty one nothing
        lengths = sorted(length for _, length in listed)
        assert max(lengths) <= rx.SLOT_SIZE and 5 in lengths and 27 in lengths


def test_receive_stops_at_the_packet_list_it_was_given() -> None:
    assert NAT is not None
    sock, tx = _socket_pair()
    try:
        rx = BatchReceiver(NAT, sock)
        rx.max_pkts = 3  # the list is longer, but C must write only the first 3 entries
        rx.off[:] = 0xFFFFFFFF
        for k in range(10):
            tx.sendto(bytes([k]) * 40, sock.getsockname())
        assert select.select([sock], [], [], 5)[0]
        n = rx.recv()
    finally:
        sock.close()
        tx.close()
    assert 1 <= n <= 3
    assert (rx.off[3:] == 0xFFFFFFFF).all()


def test_two_threads_sending_keyed_batches_at_once_make_valid_tags() -> None:
    assert NAT is not None
    if not NAT.auth():
        pytest.skip("no libcrypto with HMAC here: the keyed path is not built")
    key = bytes(range(32))
    sock, tx_sock = _socket_pair()
    sock.settimeout(10)
    batches = [packetize(np.full(6 * 200, float(w + 1), dtype=np.float32), kind=MsgType.GRADIENT, job_id=1,
                         worker_id=w, tensor_id=3, iteration=1, count=6) for w in range(2)]
    other = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    senders = [BatchSender(NAT, s, key) for s in (tx_sock, other)]
    dest = sock.getsockname()
    received: list[bytes] = []

    def reader() -> None:
        try:
            while len(received) < 2 * 200:
                received.append(sock.recv(65536))
        except OSError:
            pass

    reading = threading.Thread(target=reader, daemon=True)
    reading.start()
    try:
        def send(w: int) -> None:
            for lo in range(0, 200, 20):  # small bursts: the receive buffer keeps up
                senders[w].send(batches[w], np.arange(lo, lo + 20, dtype=np.int64), dest)

        threads = [threading.Thread(target=send, args=(w,)) for w in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        reading.join(15)
    finally:
        sock.close()
        tx_sock.close()
        other.close()
    assert len(received) > 50, f"only {len(received)} datagrams arrived"
    for data in received:  # GSO is not used with a plain recv: one packet per datagram
        body, tag = data[:-16], data[-16:]
        assert tag == hmac.digest(key, body, "sha256")[:16]
        worker = int.from_bytes(body[4:6], "big")
        assert np.all(np.frombuffer(body[HEADER_LEN:], np.float32) == float(worker + 1))


def test_an_async_send_keeps_the_values_it_reads_alive_after_the_caller_drops_them() -> None:
    reliable = {MsgType.GRADIENT: 0.0, MsgType.PARAMETER: 0.0}
    a, b = Endpoint(worker_id=1, bounds=reliable), Endpoint(worker_id=2, bounds=reliable)
    try:
        assert a._tx is not None, "the endpoint did not take the C path"
        futures = []
        for k in range(6):  # the caller's arrays exist only inside the futures from here on
            futures.append(a.send_async(b.address, np.full(50_000, k + 1.0, dtype=np.float32), copy=False,
                                        tensor_id=k, iteration=0))
            gc.collect()
        junk = [np.full(50_000, -1.0, dtype=np.float32) for _ in range(20)]  # reuse any freed memory
        for f in futures:
            f.result(timeout=60)
        got = {m.key.tensor_id: m.values for m in (b.receive(timeout=60) for _ in range(6))}
    finally:
        a.close()
        b.close()
    assert len(junk) == 20
    for k in range(6):
        assert np.all(got[k] == k + 1.0), f"tensor {k} arrived with other values"
