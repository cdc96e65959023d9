"""A DLCP endpoint: one UDP socket that sends messages with bounded loss and receives them.

Sending (:mod:`hosts.sender`): any number of messages may be in flight at once (``send``
from several threads, or ``send_async``); they share one congestion window and one pacer
(:mod:`hosts.pacing`). Each message goes out in chunks, each closed by a probe whose
bitmap answer acknowledges it; round trips measured on those exchanges set the probe
timers (per peer, RFC 6298, with back-off and a cap). A message is retried for as long as
its peer is heard from (any datagram counts); only a peer silent for ``peer_timeout``
seconds ends it, with :class:`~hosts.errors.PeerGoneError` naming the peer and what was
last heard from it, and when. Data packets leave with ECN = ECT(0); an ECN echo or loss
beyond the bound cuts the window, at most once per round trip.

Receiving: a background thread reads the socket (with the IP ECN bits of each datagram),
notes who was heard (:mod:`hosts.liveness`), hands data and probes to a
:class:`~hosts.receiver.Reassembler`, sends its replies, queues completed messages for
:meth:`Endpoint.receive` / :meth:`Endpoint.take`, and routes bitmaps to the chunk waiting
for them. Waits that depend on one peer (``take(..., peer=...)``) send keep-alives while
they wait and fail only when that peer is silent. :meth:`Endpoint.close` lingers while
peers still talk and while a sender may not know yet that its message completed here (it
ends only on such an answer), then says goodbye, so that a sender still waiting fails now.

The data path uses plain UDP sockets and the struct/numpy codec of :mod:`hosts.wire`;
Scapy is not involved here (it is far too slow per packet).
"""

from __future__ import annotations

import itertools
import logging
import select
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

from hosts.auth import TAG_LEN, Signer
from hosts.errors import HostError, TransportError
from hosts.fastpath import BatchReceiver, BatchSender, native
from hosts.inbox import Finals, Inbox
from hosts.liveness import Liveness, goodbye, say_goodbye
from hosts.marking import Marking, parse_marking
from hosts.netdev import mtu_count
from hosts.messages import DEFAULT_BOUNDS, Delivered, MessageKey
from hosts.pacing import Aimd, Pacer, RttEstimator, Window
from hosts.packetize import DropRule, PacketBatch, as_float32, layer_position, packetize, priority_hint
from hosts.receiver import Address, Reassembler
from hosts.room import RoomWaiters, TurnTaker
from hosts.rxloop import handle_one, receive_batches
from hosts.send_state import ChunkWait, SendReport
from hosts.sender import MessageSender
from hosts.wire import HEADER_LEN, HEADER_STRUCT, MAX_COUNT_MTU_1500, VERSION, MsgType

__all__ = ["Endpoint", "SendReport", "SOCKET_BUFFER", "mtu_count", "receive_window", "set_buffer"]

SOCKET_BUFFER = 32 << 20
#: Most data packets in flight: what a peer's receive buffer (SOCKET_BUFFER) holds, counting
#: the kernel's overhead per datagram, so that a fast sender does not overrun a receiver
#: (packets of a 1500-byte MTU; :func:`receive_window` for others).
RECEIVE_WINDOW = SOCKET_BUFFER // 2048


#: The endpoint's default fixed timers (seconds): the probe timer before the first RTT sample,
#: and the reorder allowance before a missing packet is re-probed (experiments/scaling.py scales both).
PROBE_TIMEOUT = 0.2
REORDER_GRACE = 0.005


def receive_window(count: int) -> int:
    """Data packets of `count` values a peer's receive buffer holds (RECEIVE_WINDOW at 361)."""
    packet = HEADER_LEN + 4 * count
    return max(1, SOCKET_BUFFER // max(2048, packet * 2048 // (HEADER_LEN + 4 * MAX_COUNT_MTU_1500)))


ECT0 = 0x02  # IP ECN field: ECN-capable transport
ECN_CE = 0x03  # IP ECN field: congestion experienced
_TOS_SPACE = socket.CMSG_SPACE(4)
_TOS_INT = struct.Struct("i")
_log = logging.getLogger("hosts.endpoint")


def set_buffer(sock: socket.socket, force: int, plain: int, size: int) -> None:
    try:
        sock.setsockopt(socket.SOL_SOCKET, force, size)  # root may exceed rmem_max
    except OSError:
        sock.setsockopt(socket.SOL_SOCKET, plain, size)


class Endpoint:
    """A worker's or server's DLCP socket (context manager; see the module doc).

    `peer_timeout`: seconds of complete silence after which a peer is given up (sends to
    it and waits for it fail). `aimd`: its ``rate`` caps the pacing rate (packets/s, e.g.
    the known port rate). `window`: the congestion window (fresh by default).
    `count`: values per full data packet (361: a 1500-byte MTU; None: from the path's MTU,
    :func:`mtu_count`). `probe_timeout` is the probe timer before the first RTT sample; `reorder_grace` and
    `max_confirms` bound the re-probing before a retransmission (0 confirms: believe the
    first bitmap); `max_rounds` (None: no limit) caps retransmission rounds; `linger` is
    the quiet time `close()` waits for; `ecn=False` sends Not-ECT. `peers` (worker id ->
    address) is the job's membership: datagrams from anyone else are dropped and never
    answered (see :class:`~hosts.receiver.Reassembler`). `key`: the job's shared key; every
    datagram is then signed and checked (:mod:`hosts.auth`). `fast`: use the C data path
    (:mod:`hosts.fastpath`; None: when it can be built), False: the Python one. `marking`:
    ``"p4"`` (DSCP 0, ECT(0)) or ``"commodity"`` (DSCP per class, Not-ECT on drop-eligible
    packets; :mod:`hosts.marking`). `port_rate`: the known rate (packets/s) of the path's
    slowest port, which the sender then never exceeds; the window counts what the network
    holds and answers delayed by a busy receiver do not throttle it (``Window.port_rate``).
    Leave it None when the bottleneck is unknown: `aimd`'s rate is only a ceiling.
    `answers_on_receive`: a sleeping sender's answers taken, its next chunk sent, on the receive
    thread (hosts/room.py); off: no gain on the fabric (experiments/README.md)."""

    def __init__(
        self,
        *,
        worker_id: int,
        job_id: int = 1,
        host: str = "127.0.0.1",
        port: int = 0,
        bounds: dict[MsgType, float] | None = None,
        count: int | None = MAX_COUNT_MTU_1500,
        aimd: Aimd | None = None,
        window: Window | None = None,
        back_share: float = 0.4,
        probe_timeout: float = PROBE_TIMEOUT,
        max_rto: float = 2.0,
        peer_timeout: float = 30.0,
        max_rounds: int | None = None,
        max_tensor_len: int = 1 << 26,
        prior: Callable[[MessageKey], np.ndarray | None] | None = None,
        reorder_grace: float = REORDER_GRACE,
        max_confirms: int = 20,
        linger: float = 0.25,
        ecn: bool = True,
        peers: Mapping[int, Address] | None = None,
        send_threads: int = 32,
        key: bytes | None = None,
        fast: bool | None = None,
        marking: Marking | str | None = None,
        port_rate: float | None = None,
        answers_on_receive: bool = False,
    ) -> None:
        self.worker_id = worker_id
        self.job_id = job_id
        self.bounds = dict(DEFAULT_BOUNDS if bounds is None else bounds)
        self.signer = Signer(key) if key is not None else None
        if count is None:  # from the path's MTU (loopback: 64 kB datagrams)
            count = mtu_count(host, tagged=key is not None)
        elif key is not None:
            count = min(count, MAX_COUNT_MTU_1500 - TAG_LEN // 4)
        self.count = count
        self.window = window or Window()
        self.window.max_cwnd = min(self.window.max_cwnd, receive_window(count))
        if aimd is not None:
            self.window.max_rate = aimd.rate
        if port_rate is not None:
            self.window.port_rate = port_rate
            self.window.max_rate = min(self.window.max_rate, port_rate)
        self.probe_timeout = probe_timeout
        self.max_rto = max_rto
        self.window.rtt = RttEstimator(initial_rto=probe_timeout, max_rto=max_rto)
        self.pacer = Pacer(self.window)
        self.back_share = back_share
        self.peer_timeout = peer_timeout
        self.max_rounds = max_rounds
        self.reorder_grace = reorder_grace
        self.max_confirms = max_confirms
        self.linger = linger
        self.send_threads = send_threads
        self.answers_on_receive = answers_on_receive
        self.liveness = Liveness(peer_timeout)
        self.reassembler = Reassembler(job_id=job_id, bounds=self.bounds, max_tensor_len=max_tensor_len,
                                       prior=prior, peers=dict(peers) if peers is not None else None)
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            set_buffer(self._sock, getattr(socket, "SO_RCVBUFFORCE", 33), socket.SO_RCVBUF, SOCKET_BUFFER)
            set_buffer(self._sock, getattr(socket, "SO_SNDBUFFORCE", 32), socket.SO_SNDBUF, SOCKET_BUFFER)
            self.marking = parse_marking(marking)
            self.ecn = ecn
            if ecn or self.marking.per_packet:
                self._sock.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, self.marking.control_tos(ecn))
            self._sock.setsockopt(socket.IPPROTO_IP, socket.IP_RECVTOS, 1)
            self._sock.bind((host, port))
        except (OSError, HostError) as exc:
            self._sock.close()
            if isinstance(exc, HostError):
                raise
            raise TransportError(f"cannot bind a DLCP socket to {host}:{port}: {exc}") from exc
        self._tx: BatchSender | None = None
        self._rx: BatchReceiver | None = None
        nat = native() if fast is not False else None
        if nat is not None and key is not None and not nat.auth():
            nat = None  # no HMAC in C here (logged once)
        if fast and nat is None:
            _log.warning("hosts data path: the C data path was asked for but is unavailable; using Python")
        if nat is not None:
            self._tx, self._rx = BatchSender(nat, self._sock, key), BatchReceiver(nat, self._sock, key)
        self._inbox = Inbox()  # completed messages not taken yet
        self._finals = Finals()  # completed messages whose senders may not know it yet
        self._lock = threading.RLock()  # guards the window, in_flight, chunk answers and the waiters below
        self._cond = threading.Condition(self._lock)
        self.in_flight = 0  # data packets sent and not yet acknowledged, over all messages
        self._room = RoomWaiters()  # senders waiting for window room (hosts.room)
        self._waits: dict[tuple[Address, MessageKey, int], ChunkWait] = {}  # (peer, message, probe nonce)
        self._seq_base: dict[tuple[Address, MessageKey], int] = {}
        self._rtts: dict[Address, RttEstimator] = {}
        self._nonces = itertools.count(1)
        self._tx_lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None
        self._stop = threading.Event()
        self.aborted: str | None = None  # why every wait and send now fails (abort())
        self._last_rx = time.monotonic()
        self._last_peer_rx = 0.0  # last data or probe handled (bitmaps excluded)
        self._thread = threading.Thread(target=self._receive_loop, name=f"dlcp-rx-{worker_id}", daemon=True)
        self._thread.start()

    @property
    def fast(self) -> bool:
        """True when this endpoint uses the C data path."""
        return self._tx is not None

    @property
    def address(self) -> Address:
        return self._sock.getsockname()

    @property
    def aimd(self) -> Window:
        """The congestion window (its ``rate`` is the current pacing rate)."""
        return self.window

    def add_peer(self, worker_id: int, address: Address) -> None:
        """Make (`worker_id`, `address`) a member of the job (turns membership checks on)."""
        if self.reassembler.peers is None:
            self.reassembler.peers = {}
        self.reassembler.peers[worker_id] = address
        if self._rx is not None:  # probes C answers from elsewhere go to Python (hosts.fastpath)
            self._rx.members_changed(dict(self.reassembler.peers))

    def drain(self, quiet: float = 0.5, limit: float = 5.0) -> None:
        """Keep answering (late probes, retransmissions) until nothing arrived for `quiet`
        seconds, at most `limit` seconds: call before closing after the last message, so
        the peer's final probe still gets its bitmap."""
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline and time.monotonic() - self._last_rx < quiet:
            time.sleep(min(0.05, quiet))

    def close(self) -> None:
        """Stop after lingering: while data or probes arrived within the last `linger` seconds, keep
        answering until `linger` seconds pass quietly (at most 8 x linger); then while a sender may
        not know yet that its message completed here (at most 4 x max_rto; hosts.inbox.Finals);
        then say goodbye to the peers heard from (hosts.liveness)."""
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=False)
        if self.linger > 0 and self._thread.is_alive():
            deadline = time.monotonic() + 8 * self.linger
            while (now := time.monotonic()) < deadline and now - self._last_peer_rx < self.linger:
                time.sleep(min(0.02, self.linger))
            deadline = time.monotonic() + 4 * self.max_rto  # then until senders know (hosts.inbox.Finals)
            while (now := time.monotonic()) < deadline and (now - self._last_peer_rx < self.linger or self._finals.owed(
                    now, self._rtts, self.linger, self.max_rto)):
                time.sleep(min(0.02, self.linger))
        if self._thread.is_alive():  # whoever still waits for this endpoint fails now (hosts.liveness)
            say_goodbye(self._send_control, self.liveness.peers(), goodbye(self.job_id, self.worker_id))
        self._stop.set()
        self._thread.join(timeout=2)
        self._sock.close()

    def abort(self, reason: str) -> None:
        """Make every wait for a message and every send in progress on this endpoint fail
        with TransportError(`reason`) within about 50 ms (a job ending on an error elsewhere:
        waits for a live peer would otherwise last for ever)."""
        self.aborted = reason
        self._inbox.wake_all()

    def __enter__(self) -> Endpoint:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- receiving ---------------------------------------------------------------------------

    def receive(self, timeout: float = 10.0, match: Callable[[MessageKey], bool] | None = None) -> Delivered:
        """The oldest completed message not taken yet (whose key satisfies `match`, when
        given); TransportError after `timeout` seconds. Other messages stay queued."""
        if match is None:
            return self._wait_for(lambda: next(iter(self._inbox.messages), None), timeout, "a complete message")
        return self._wait_for(lambda: next((k for k in self._inbox.messages if match(k)), None), timeout,
                              "a matching complete message")

    def take(self, key: MessageKey, timeout: float = 10.0, peer: Address | None = None) -> Delivered:
        """The completed message `key`. Without `peer`: wait up to `timeout` seconds. With
        `peer` (who sends it): wait as long as that peer is heard from (keep-alives are sent
        while waiting) and fail with PeerGoneError once it is silent for `timeout` seconds."""
        if peer is None:
            return self._wait_for(lambda: key if key in self._inbox.messages else None, timeout, f"message {key}", key)
        since = time.monotonic()
        while True:
            if self.aborted is not None:
                raise TransportError(f"waiting for {_describe_key(key)}: the endpoint was aborted ({self.aborted})")
            try:
                return self._wait_for(lambda: key if key in self._inbox.messages else None, self._keepalive_interval(timeout),
                                      f"message {key}", key)
            except TransportError:
                self.liveness.check(peer, since, f"{_describe_key(key)}", limit=timeout)
                self.keepalive(peer, since=self._keepalive_interval(timeout))

    def _keepalive_interval(self, limit: float) -> float:
        return max(0.05, min(1.0, limit / 5))

    def keepalive(self, peer: Address, since: float = 0.0) -> None:
        """Ask `peer` for a sign of life (unless it was heard within the last `since` s)."""
        last = self.liveness.last(peer)
        if last is not None and time.monotonic() - last < since:
            return
        self._send_control(HEADER_STRUCT.pack((VERSION << 4) | MsgType.PROBE, 0, self.job_id, self.worker_id,
                                              0, 0, 0, 0, 0, 0, 7, 0), peer)

    def _wait_for(self, pick: Callable[[], MessageKey | None], timeout: float, what: str,
                  only: MessageKey | None = None) -> Delivered:
        """The message `pick` chooses, waiting up to `timeout` s (`only`: the one key it looks
        for, so that only that message wakes the wait; :class:`hosts.inbox.Inbox`)."""
        got = self._inbox.wait(pick, timeout, only, lambda: self.aborted is not None)
        if got is not None:
            return got
        if self.aborted is not None:
            raise TransportError(f"waiting for {what}: the endpoint was aborted ({self.aborted})")
        stats = self.reassembler.stats
        raise TransportError(
            f"no {what} within {timeout:.1f} s on {self.address[0]}:{self.address[1]} "
            f"({self.reassembler.open_messages} incomplete, {stats.completed} completed, "
            f"drops {dict(stats.drops)})")

    def _receive_loop(self) -> None:
        if self._rx is not None:
            self._receive_batches(self._rx)
            return
        buf = bytearray(65536)
        view = memoryview(buf)
        poller = select.poll()
        poller.register(self._sock, select.POLLIN)
        recv = self._sock.recvmsg_into
        buffers = [buf]
        heard = self.liveness.heard
        signer = self.signer
        while not self._stop.is_set():
            if not poller.poll(50):
                continue
            while not self._stop.is_set():  # drain what is queued before polling again
                try:
                    n, ancillary, _flags, source = recv(buffers, _TOS_SPACE, socket.MSG_DONTWAIT)
                except (BlockingIOError, InterruptedError):
                    break
                except OSError:
                    break
                data = view[:n]
                if signer is not None:
                    checked = signer.verify(data)
                    if checked is None:
                        self.reassembler.stats.drops["bad_tag"] += 1
                        continue
                    data = checked
                    n = len(data)
                now = self._last_rx = time.monotonic()
                heard(source, now, bytes(buf[:HEADER_LEN]))
                ce = bool(ancillary) and ancillary[0][1] == socket.IP_TOS and ancillary[0][2][0] & ECN_CE == ECN_CE
                delivered = handle_one(self, data, source, ce, now)
                if delivered:
                    self._deliver(delivered)

    def _deliver(self, delivered: list[Delivered]) -> None:
        self._finals.completed(delivered, time.monotonic())
        self._inbox.put(delivered)

    def _reply(self, replies: list[bytes], source: Address) -> None:
        now = time.monotonic()
        for reply in replies:
            try:
                self._sock.sendto(reply if self.signer is None else self.signer.sign(reply), source)
            except OSError:
                self.reassembler.stats.drops["reply_failed"] += 1
            self._finals.replied(reply, source, now)

    def _receive_batches(self, rx: BatchReceiver) -> None:
        """The receive loop of the C data path (:func:`hosts.rxloop.receive_batches`)."""
        receive_batches(self, rx)

    def _on_bitmap(self, data: memoryview, source: Address, now: float) -> None:
        _vt, flags, job, worker, tensor, iteration, start, tlen, nbits, kind, _prio, nonce = (
            HEADER_STRUCT.unpack_from(data))
        if tlen == 0 and nbits == 0:
            return  # a keep-alive answer: liveness noted it
        wait = None
        if kind in (MsgType.GRADIENT, MsgType.PARAMETER) and job == self.job_id:
            key = MessageKey(job, worker, iteration, tensor, MsgType(kind))
            wait = self._waits.get((source, key, nonce))
        if wait is None:
            self.reassembler.stats.drops["unexpected_bitmap"] += 1
            return
        turns: list[TurnTaker] = []  # sleeping senders whose turn the room freed here gave (hosts.room)
        with self._cond:
            if not wait.fill(start, nbits, data[HEADER_LEN:], flags, nonce, now):
                self.reassembler.stats.drops["unexpected_bitmap"] += 1
                return
            self._room.handoff = turns
            try:  # taken here while its sender sleeps (hosts.sender.MessageSender.on_answer)
                wake = wait.owner is None or wait.owner.on_answer()
            finally:
                self._room.handoff = None
            if wake and wait.wake is not None:
                wait.wake.notify()  # only the sender this answer is for
            elif wake:
                self._cond.notify_all()
        for taker in turns:
            taker.send_turn()  # type: ignore[attr-defined]

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
        return once the receiver holds it within the bound. Safe to call from several
        threads at once: the messages share the window.

        `eligible_share` (a scheduler's loss policy) replaces the position-based drop rule:
        at most that share of the elements, never more than the bound, is marked."""
        position = layer_position(tensor_id, num_layers)
        bound = self.bounds.get(kind, 0.0)
        flat = as_float32(values)
        total = flat.size if tensor_len is None else tensor_len
        key = MessageKey(self.job_id, self.worker_id, iteration, tensor_id, kind)
        prio = priority_hint(position) if prio_hint is None else prio_hint
        batch = packetize(
            flat, kind=kind, job_id=self.job_id, worker_id=self.worker_id, tensor_id=tensor_id,
            iteration=iteration, count=self.count, prio_hint=prio,
            drop_rule=self._drop_rule(bound, eligible_share) if drop_eligible else None,
            position=position, start=start, tensor_len=total, with_classes=self._tx is None,
        )
        with self._cond:  # sequence numbers are unique per tensor, also across its parts
            seq_base = self._seq_base.get((dest, key), 0)
            self._seq_base[(dest, key)] = seq_base + len(batch)
            while len(self._seq_base) > 65536:
                self._seq_base.pop(next(iter(self._seq_base)))
        if seq_base:
            batch.headers["seq"] += seq_base
        batch.tos = self.marking.data_tos(prio, batch.eligible, self.ecn)
        sender = MessageSender(self, dest, batch, key, seq_base=seq_base, tensor_len=total, bound=bound,
                               elements=flat.size, is_part=(start != 0 or flat.size != total), prio=prio)
        return sender.run()

    def send_async(self, dest: Address, values: Any, *, copy: bool = True, **options: Any) -> Future[SendReport]:
        """:meth:`send` in the endpoint's sender threads; the future holds its report.
        `copy=False`: send from the caller's memory, which must not change until the
        future is done (the packets read their values in place)."""
        if self._executor is None:
            with self._cond:
                if self._executor is None:
                    self._executor = ThreadPoolExecutor(self.send_threads,
                                                        thread_name_prefix=f"dlcp-tx-{self.worker_id}")
        values = as_float32(values)
        if copy:
            values = values.copy()  # the caller may reuse its buffer
        return self._executor.submit(self.send, dest, values, **options)

    def _drop_rule(self, bound: float, eligible_share: float | None) -> DropRule:
        if eligible_share is None:
            return DropRule(bound, self.back_share, split=True)
        return DropRule(min(bound, max(0.0, eligible_share)), back_share=1.0, split=True)

    # -- used by hosts.sender ------------------------------------------------------------------

    def _transmit(self, batch: PacketBatch, indices: np.ndarray, dest: Address) -> None:
        total = len(indices)
        i = 0
        with self._tx_lock:
            try:
                while i < total:
                    allowed = self.pacer.burst(total - i)
                    if self._tx is not None:
                        self._tx.send(batch, indices[i:i + allowed], dest)
                    else:
                        sendmsg, tos = self._sock.sendmsg, batch.tos
                        for j in indices[i:i + allowed].tolist():
                            cmsg = [] if tos is None else [(socket.IPPROTO_IP, socket.IP_TOS, _TOS_INT.pack(tos[j]))]
                            if self.signer is not None:
                                sendmsg([self.signer.sign(batch.packet(j))], cmsg, 0, dest)
                            else:
                                sendmsg(batch.parts(j), cmsg, 0, dest)
                    i += allowed
            except OSError as exc:
                raise TransportError(f"cannot send to {dest[0]}:{dest[1]}: {exc}") from exc

    def _send_control(self, data: bytes, dest: Address) -> None:
        if self.signer is not None:
            data = self.signer.sign(data)
        try:
            self._sock.sendto(data, dest)
        except OSError as exc:
            raise TransportError(f"cannot send to {dest[0]}:{dest[1]}: {exc}") from exc

    def _next_nonce(self) -> int:
        return next(self._nonces) & 0xFFFF

    def _rtt(self, peer: Address) -> RttEstimator:
        rtt = self._rtts.get(peer)
        if rtt is None:
            rtt = self._rtts[peer] = RttEstimator(initial_rto=self.probe_timeout, max_rto=self.max_rto)
        return rtt

    def _rtt_sample(self, peer: Address, seconds: float) -> None:
        self._rtt(peer).sample(seconds)
        with self._cond:
            assert self.window.rtt is not None
            self.window.rtt.sample(seconds)

    def _wait_room(self, wake: threading.Condition, prio: int, need: int = 1, taker: TurnTaker | None = None) -> None:
        """(Lock held.) `wake` waits for `need` packets of window room at priority `prio`."""
        self._room.wait(wake, prio, need, taker)

    def _room_freed(self) -> None:
        """(Lock held.) The top waiter's turn once the room fits it (:class:`hosts.room.RoomWaiters`);
        it passes the turn on when it leaves room behind."""
        if len(self._room):
            self._room.freed(int(self.window.flight_cap) - self.in_flight)

    def _room_wait_done(self, wake: threading.Condition) -> None:
        """(Lock held.) `wake` no longer waits for room."""
        self._room.done(wake)

    def _register(self, dest: Address, key: MessageKey, nonce: int, wait: ChunkWait) -> None:
        with self._cond:
            self._waits[(dest, key, nonce)] = wait

    def _unregister(self, dest: Address, key: MessageKey, nonces: Iterable[int], wait: ChunkWait) -> None:
        with self._cond:
            for nonce in nonces:
                if self._waits.get((dest, key, nonce)) is wait:
                    del self._waits[(dest, key, nonce)]


def _describe_key(key: MessageKey) -> str:
    kind = "gradient" if key.kind == MsgType.GRADIENT else "parameter"
    return f"the {kind} message of worker {key.worker_id}, tensor {key.tensor_id}, iteration {key.iteration}"
