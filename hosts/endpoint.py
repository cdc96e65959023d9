"""A DLCP endpoint: one UDP socket that sends messages with bounded loss and receives them.

Sending a message: packetise it, send the packets paced by AIMD, then a probe; the
receiver answers with a bitmap of the packets it saw; the sender retransmits the missing
packets only while the missing elements exceed the loss bound, probing after each round.
A probe that gets no complete answer within the probe timeout is repeated (with back-off).
On a sprayed fabric the probe can overtake data still queued on another path, so a bitmap
over the bound is confirmed before anything is retransmitted: the sender waits
`reorder_grace`, probes again, and repeats while the bitmaps still show progress; only what
is missing once they agree is retransmitted. Data packets leave with ECN = ECT(0); a bitmap
with the ECN-echo flag (the receiver saw CE marks) cuts the AIMD rate once per message.

Receiving: a background thread reads the socket (with the IP ECN bits of each datagram),
hands data and probes to a :class:`~hosts.receiver.Reassembler`, sends its replies, queues
completed messages for :meth:`Endpoint.receive`, and routes bitmaps to the send waiting for
them. :meth:`Endpoint.close` lingers while peers still talk (at most `linger` seconds of
quiet): a sender whose last message completed on data still gets the bitmap its probe asks
for after the receiver took the message and closed.

The data path uses plain UDP sockets and the struct/numpy codec of :mod:`hosts.wire`;
Scapy is not involved here (it is far too slow per packet).
"""

from __future__ import annotations

import select
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from hosts.errors import TransportError
from hosts.messages import DEFAULT_BOUNDS, Delivered, MessageKey, within_bound
from hosts.pacing import Aimd, Pacer
from hosts.packetize import DropRule, PacketBatch, as_float32, layer_position, packetize, priority_hint
from hosts.receiver import Address, Reassembler
from hosts.wire import HEADER_LEN, HEADER_STRUCT, MAX_COUNT_MTU_1500, Flags, Header, MsgType, pack_header

SOCKET_BUFFER = 8 << 20
ECT0 = 0x02  # IP ECN field: ECN-capable transport
ECN_CE = 0x03  # IP ECN field: congestion experienced
_TOS_SPACE = socket.CMSG_SPACE(4)


@dataclass
class SendReport:
    """What sending one message took."""

    key: MessageKey
    packets: int
    payload_bytes: int
    retransmitted: int
    rounds: int
    probes: int
    missing: int  # elements the receiver still lacks (within the bound)
    eligible: int  # packets marked drop-eligible
    seconds: float
    ecn_echoes: int = 0  # bitmap answers that echoed CE marks

    @property
    def loss_rate(self) -> float:
        return self.missing / (self.payload_bytes // 4) if self.payload_bytes else 0.0


class _BitmapWait:
    """Collects the bitmap replies to one probe."""

    def __init__(self, first: int, n_packets: int) -> None:
        self.first = first
        self.n = n_packets
        self.reset()

    def reset(self) -> None:
        self.bits = np.zeros(self.n, dtype=bool)
        self.covered = np.zeros(self.n, dtype=bool)
        self.echo = False
        self.event = threading.Event()

    def add(self, start: int, nbits: int, payload: memoryview, echo: bool = False) -> bool:
        start -= self.first
        if nbits == 0 or start < 0 or start + nbits > self.n or len(payload) * 8 < nbits:
            return False
        bits = np.unpackbits(np.frombuffer(payload, np.uint8), count=nbits, bitorder="little")
        self.bits[start:start + nbits] |= bits.astype(bool)
        self.covered[start:start + nbits] = True
        self.echo |= echo
        if self.covered.all():
            self.event.set()
        return True


def set_buffer(sock: socket.socket, force: int, plain: int, size: int) -> None:
    try:
        sock.setsockopt(socket.SOL_SOCKET, force, size)  # root may exceed rmem_max
    except OSError:
        sock.setsockopt(socket.SOL_SOCKET, plain, size)


class Endpoint:
    """A worker's or server's DLCP socket (context manager; see the module doc).

    `reorder_grace` and `max_confirms` bound the re-probing before a retransmission (0
    confirms: believe the first bitmap); `linger` is the quiet time `close()` waits for;
    `ecn=False` sends Not-ECT: switches then never mark this endpoint's packets."""

    def __init__(
        self,
        *,
        worker_id: int,
        job_id: int = 1,
        host: str = "127.0.0.1",
        port: int = 0,
        bounds: dict[MsgType, float] | None = None,
        count: int = MAX_COUNT_MTU_1500,
        aimd: Aimd | None = None,
        back_share: float = 0.4,
        probe_timeout: float = 0.05,
        max_probes: int = 12,
        max_rounds: int = 100,
        max_tensor_len: int = 1 << 26,
        prior: Callable[[MessageKey], np.ndarray | None] | None = None,
        reorder_grace: float = 0.005,
        max_confirms: int = 20,
        linger: float = 0.25,
        ecn: bool = True,
    ) -> None:
        self.worker_id = worker_id
        self.job_id = job_id
        self.bounds = dict(DEFAULT_BOUNDS if bounds is None else bounds)
        self.count = count
        self.aimd = aimd or Aimd()
        self.pacer = Pacer(self.aimd)
        self.back_share = back_share
        self.probe_timeout = probe_timeout
        self.max_probes = max_probes
        self.max_rounds = max_rounds
        self.reorder_grace = reorder_grace
        self.max_confirms = max_confirms
        self.linger = linger
        self.reassembler = Reassembler(job_id=job_id, bounds=self.bounds,
                                       max_tensor_len=max_tensor_len, prior=prior)
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            set_buffer(self._sock, getattr(socket, "SO_RCVBUFFORCE", 33), socket.SO_RCVBUF, SOCKET_BUFFER)
            set_buffer(self._sock, getattr(socket, "SO_SNDBUFFORCE", 32), socket.SO_SNDBUF, SOCKET_BUFFER)
            if ecn:
                self._sock.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, ECT0)
            self._sock.setsockopt(socket.IPPROTO_IP, socket.IP_RECVTOS, 1)
            self._sock.bind((host, port))
        except OSError as exc:
            self._sock.close()
            raise TransportError(f"cannot bind a DLCP socket to {host}:{port}: {exc}") from exc
        self._inbox: OrderedDict[MessageKey, Delivered] = OrderedDict()
        self._inbox_ready = threading.Condition()
        self._waits: dict[tuple[Address, MessageKey], _BitmapWait] = {}
        self._waits_lock = threading.Lock()
        self._seq_base: dict[tuple[Address, MessageKey], int] = {}
        self._stop = threading.Event()
        self._last_rx = time.monotonic()
        self._last_peer_rx = 0.0  # last data or probe handled (bitmaps excluded)
        self._thread = threading.Thread(target=self._receive_loop, name=f"dlcp-rx-{worker_id}", daemon=True)
        self._thread.start()

    @property
    def address(self) -> Address:
        return self._sock.getsockname()

    def drain(self, quiet: float = 0.5, limit: float = 5.0) -> None:
        """Keep answering (late probes, retransmissions) until nothing arrived for `quiet`
        seconds, at most `limit` seconds: call before closing after the last message, so
        the peer's final probe still gets its bitmap."""
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline and time.monotonic() - self._last_rx < quiet:
            time.sleep(min(0.05, quiet))

    def close(self) -> None:
        """Stop after lingering: while data or probes arrived within the last `linger`
        seconds, keep answering until `linger` seconds pass quietly (at most 8 x linger)."""
        if self.linger > 0 and self._thread.is_alive():
            deadline = time.monotonic() + 8 * self.linger
            while (now := time.monotonic()) < deadline and now - self._last_peer_rx < self.linger:
                time.sleep(min(0.02, self.linger))
        self._stop.set()
        self._thread.join(timeout=2)
        self._sock.close()

    def __enter__(self) -> Endpoint:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- receiving ---------------------------------------------------------------------------

    def receive(self, timeout: float = 10.0, match: Callable[[MessageKey], bool] | None = None) -> Delivered:
        """The oldest completed message not taken yet (whose key satisfies `match`, when
        given); TransportError after `timeout` seconds. Other messages stay queued."""
        if match is None:
            return self._wait_for(lambda: next(iter(self._inbox), None), timeout, "a complete message")
        return self._wait_for(lambda: next((k for k in self._inbox if match(k)), None), timeout,
                              "a matching complete message")

    def take(self, key: MessageKey, timeout: float = 10.0) -> Delivered:
        """The completed message `key`, waiting for it up to `timeout` seconds."""
        return self._wait_for(lambda: key if key in self._inbox else None, timeout, f"message {key}")

    def _wait_for(self, pick: Callable[[], MessageKey | None], timeout: float, what: str) -> Delivered:
        deadline = time.monotonic() + timeout
        with self._inbox_ready:
            while (key := pick()) is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TransportError(
                        f"no {what} within {timeout:.1f} s on {self.address[0]}:{self.address[1]} "
                        f"({self.reassembler.open_messages} incomplete, "
                        f"drops {dict(self.reassembler.stats.drops)})")
                self._inbox_ready.wait(left)
            return self._inbox.pop(key)

    def _receive_loop(self) -> None:
        buf = bytearray(65536)
        view = memoryview(buf)
        poller = select.poll()
        poller.register(self._sock, select.POLLIN)
        recv = self._sock.recvmsg_into
        buffers = [buf]
        handle = self.reassembler.handle
        while not self._stop.is_set():
            if not poller.poll(50):
                continue
            while True:  # drain what is queued before polling again
                try:
                    n, ancillary, _flags, source = recv(buffers, _TOS_SPACE, socket.MSG_DONTWAIT)
                except (BlockingIOError, InterruptedError):
                    break
                except OSError:
                    break
                self._last_rx = time.monotonic()
                data = view[:n]
                if n >= HEADER_LEN and buf[0] & 0x0F == MsgType.BITMAP:
                    self._on_bitmap(data, source)
                    continue
                self._last_peer_rx = self._last_rx
                ce = bool(ancillary) and ancillary[0][1] == socket.IP_TOS and ancillary[0][2][0] & ECN_CE == ECN_CE
                replies, delivered = handle(data, source, ce)
                for reply in replies:
                    try:
                        self._sock.sendto(reply, source)
                    except OSError:
                        self.reassembler.stats.drops["reply_failed"] += 1
                if delivered:
                    with self._inbox_ready:
                        for message in delivered:
                            self._inbox[message.key] = message
                        self._inbox_ready.notify_all()

    def _on_bitmap(self, data: memoryview, source: Address) -> None:
        vt, flags, job, worker, tensor, iteration, start, _tlen, nbits, kind, _prio, _seq = HEADER_STRUCT.unpack_from(data)
        wait = None
        if kind in (MsgType.GRADIENT, MsgType.PARAMETER):
            key = MessageKey(job, worker, iteration, tensor, MsgType(kind))
            with self._waits_lock:
                wait = self._waits.get((source, key))
        if wait is None or not wait.add(start, nbits, data[HEADER_LEN:], bool(flags & Flags.ECN_ECHO)):
            self.reassembler.stats.drops["unexpected_bitmap"] += 1

    # -- sending -----------------------------------------------------------------------------

    def send(
        self,
        dest: Address,
        values: Any,
        *,
        kind: MsgType = MsgType.GRADIENT,
        tensor_id: int = 0,
        iteration: int = 0,
        num_layers: int = 1,
        prio_hint: int | None = None,
        drop_eligible: bool = True,
        start: int = 0,
        tensor_len: int | None = None,
        eligible_share: float | None = None,
    ) -> SendReport:
        """Send a tensor (or its part `values` at `start` of `tensor_len` elements) to `dest`;
        return once the receiver holds it within the bound.

        `eligible_share` (a scheduler's loss policy) replaces the position-based drop rule:
        at most that share of the elements, never more than the bound, is marked."""
        started = time.perf_counter()
        position = layer_position(tensor_id, num_layers)
        bound = self.bounds.get(kind, 0.0)
        flat = as_float32(values)
        total = flat.size if tensor_len is None else tensor_len
        key = MessageKey(self.job_id, self.worker_id, iteration, tensor_id, kind)
        with self._waits_lock:
            seq_base = self._seq_base.get((dest, key), 0)
        batch = packetize(
            flat, kind=kind, job_id=self.job_id, worker_id=self.worker_id, tensor_id=tensor_id,
            iteration=iteration, count=self.count,
            prio_hint=priority_hint(position) if prio_hint is None else prio_hint,
            drop_rule=self._drop_rule(bound, eligible_share) if drop_eligible else None,
            position=position,
            start=start, tensor_len=total, seq_base=seq_base,
        )
        n = len(batch)
        with self._waits_lock:
            self._seq_base[(dest, key)] = seq_base + n
            while len(self._seq_base) > 65536:
                self._seq_base.pop(next(iter(self._seq_base)))
        probe = pack_header(Header(
            msg_type=MsgType.PROBE, flags=0, job_id=self.job_id, worker_id=self.worker_id,
            tensor_id=tensor_id, iteration=iteration, offset=seq_base, tensor_len=total, count=0,
            mag_class=int(kind), prio_hint=7, seq=n,
        ))
        wait = _BitmapWait(seq_base, n)
        with self._waits_lock:
            self._waits[(dest, key)] = wait
        counts = batch.counts
        rounds = retransmitted = probes = echoes = 0
        try:
            pending = np.arange(n)
            while True:
                if rounds:
                    batch.headers["flags"][pending] |= np.uint8(Flags.RETRANSMIT)
                self._transmit(batch, pending, dest)
                received, used, echo = self._probe(wait, probe, dest, key)
                probes += used
                echoes += echo
                missing = int(counts[~received].sum())
                confirms = 0
                while not within_bound(missing, flat.size, bound) and confirms < self.max_confirms:
                    # Data may still be on its way behind the probe: ask again after a grace
                    # period and believe the bitmap only once it stops improving.
                    confirms += 1
                    time.sleep(self.reorder_grace)
                    again, used, echo = self._probe(wait, probe, dest, key)
                    probes += used
                    echoes += echo
                    improved = bool((again & ~received).any())
                    received |= again
                    missing = int(counts[~received].sum())
                    if not improved:
                        break
                if within_bound(missing, flat.size, bound):
                    break
                rounds += 1
                if rounds > self.max_rounds:
                    raise TransportError(
                        f"message {key} to {dest[0]}:{dest[1]} still misses {missing} of {flat.size} "
                        f"elements after {self.max_rounds} retransmission rounds")
                self.aimd.on_congestion()
                pending = np.flatnonzero(~received)
                retransmitted += len(pending)
        finally:
            with self._waits_lock:
                self._waits.pop((dest, key), None)
        if echoes:
            self.aimd.on_congestion()  # once per message, as classic ECN does once per window
        elif rounds == 0:
            self.aimd.on_success()
        return SendReport(
            key=key, packets=n, payload_bytes=flat.size * 4, retransmitted=retransmitted,
            rounds=rounds, probes=probes, missing=missing, eligible=int(batch.eligible.sum()),
            seconds=time.perf_counter() - started, ecn_echoes=echoes,
        )

    def _drop_rule(self, bound: float, eligible_share: float | None) -> DropRule:
        if eligible_share is None:
            return DropRule(bound, self.back_share)
        return DropRule(min(bound, max(0.0, eligible_share)), back_share=1.0)

    def _transmit(self, batch: PacketBatch, indices: np.ndarray, dest: Address) -> None:
        sendto = self._sock.sendto
        views = batch.views()
        order = indices.tolist()
        i, total = 0, len(order)
        while i < total:
            allowed = self.pacer.burst()
            for j in order[i:i + allowed]:
                sendto(views[j], dest)
            i += allowed

    def _probe(self, wait: _BitmapWait, probe: bytes, dest: Address,
               key: MessageKey) -> tuple[np.ndarray, int, bool]:
        """(bits received, probes sent, whether the answer echoed CE marks)."""
        timeout = self.probe_timeout
        for attempt in range(1, self.max_probes + 1):
            wait.reset()
            self._sock.sendto(probe, dest)
            if wait.event.wait(timeout):
                return wait.bits.copy(), attempt, wait.echo
            timeout = min(1.0, timeout * 2)
        raise TransportError(
            f"no bitmap from {dest[0]}:{dest[1]} for {key} after {self.max_probes} probes "
            f"(is a receiver with job {key.job_id} listening there?)")
