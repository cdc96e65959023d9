"""Sending one message under the endpoint's congestion window (used by :mod:`hosts.endpoint`).

A message's packets go out in *chunks* as the shared window has room; each chunk ends with
a probe asking about exactly its packets (same priority as the data, so it queues behind
them), and the bitmap answering it acknowledges them: their window credit is returned, the
window grows (slow start, then additive increase), and the round trip since that probe is
a sample for the RTT estimator (a nonce tells which of several probes was answered). An
unanswered probe is re-sent after the peer's RTO, doubled per attempt up to a cap, for as
long as the peer is heard from; the credit stays taken, so a stalled receiver stops the
sender without a window cut. The last chunk's probe carries the *last* flag: the receiver
may then complete the message within its bound and says so in its answer.

Once the loss shown by answered chunks is sure to exceed the bound, the packets they showed
missing are confirmed after ``reorder_grace`` (a probe over them) and resent right away,
ahead of the rest of the message, as TCP resends on SACK information without waiting for
the end of the window. When every chunk is answered and the message is not complete: within the bound, a
last-flagged probe over the message asks the receiver to complete it (a part of a tensor the
receiver cannot complete yet resends what it misses, so that every tensor completes); over the bound, the
missing packets are first confirmed (on a sprayed fabric a probe may overtake data still
queued on another path: wait ``reorder_grace``, probe again, repeat while the bitmaps
improve, at most ``max_confirms`` times), then retransmitted as a new round. An ECN echo
cuts the window by half the share of packets marked (DCTCP); loss over the bound among the
answered chunks halves it at once, and the cut is taken back when the packets arrive after all
(late is not lost), or, on a path seen to reorder, only a confirmed loss cuts it; at most one cut
per round trip (:class:`hosts.pacing.Window`). A completed
message ends at once when the answers since its completion cover every packet not seen to
arrive (they show what the receiver completed with); otherwise it asks once over the rest. An answer
wakes only the sender it is for; room in the window wakes the highest-priority sender waiting for
it. With the endpoint's ``answers_on_receive``, the receive thread takes a sleeping sender's answers
(``on_answer``; it wakes the sender only when it must act) and sends its next chunk when room frees
and the pacer lets it leave at once (``send_turn``), else wakes it (:mod:`hosts.room`).

This module sends; what answers show and how loss is recovered is :mod:`hosts.recovery`."""

from __future__ import annotations

import threading
import time

import numpy as np

from hosts.errors import TransportError
from hosts.messages import MessageKey, within_bound
from hosts.packetize import PacketBatch
from hosts.receiver import Address
from hosts.recovery import FINALS, MAX_CHUNK, Chunk, Recovery, SenderHost, message_name
from hosts.send_state import ChunkWait, Pending, SendReport, SendTiming
from hosts.wire import BITMAP_BITS_PER_PACKET, HEADER_STRUCT, VERSION, Flags, MsgType, probe_capacity, probe_length

__all__ = ["FINALS", "MAX_CHUNK", "SETTLE_MIN_S", "MessageSender", "SenderHost"]

#: Least time a sender asks a receiver that completed a message what it holds, before the
#: report falls back to what earlier answers showed. Four RTOs alone were outrun on a loaded
#: machine (RTOs measured when it was idle), and the report then counted as zero-filled
#: packets the receiver had (27,720 values of a message delivered whole).
SETTLE_MIN_S = 1.0


class MessageSender(Recovery):
    """Sends one packetised message for an endpoint (see the module doc)."""

    def __init__(self, endpoint: SenderHost, dest: Address, batch: PacketBatch, key: MessageKey, *,
                 seq_base: int, tensor_len: int, bound: float, elements: int, is_part: bool,
                 prio: int) -> None:
        self.ep = endpoint
        self.dest = dest
        self.batch = batch
        self.key = key
        self.seq_base = seq_base
        self.tensor_len = tensor_len
        self.bound = bound
        self.elements = elements
        self.is_part = is_part
        self.prio = prio
        self.n = len(batch)
        self.counts = batch.counts
        # The per-packet flags, one allocation per message (rows of one array, each contiguous).
        (self.received,
         self.final,  # an answer after completion covered it: `received` is final there
         self.sent_once,
         self.shown_missing,  # an answer showed it missing at least once
         self.resent, self.confirmed_lost, self.resend_queued) = np.zeros((7, self.n), dtype=bool)
        self.pending = Pending(np.arange(self.n, dtype=np.int64))
        self.chunks: list[Chunk] = []
        self.complete = False
        self.held_probe_sent = -1.0  # when the latest probe left whose answer showed the receiver holding data
        self.finals = 0
        self.confirms = 0
        self.confirm_missing = 0
        self.round_lost = 0
        self.cut_this_round = self.deferring = self.any_shown = False
        self.tentative: tuple[float, float, int, float] | None = None  # a cut to undo if the loss was only late
        self.suspects: dict[int, float] = {}  # packet -> when an answer first showed it missing
        self.confirming: set[int] = set()
        self.rounds = self.retransmitted = self.probes = self.echoes = self.timeouts = self.chunk_count = 0
        self.started = self.last_sent = time.monotonic()
        self.timing = SendTiming(created=self.started, cwnd_start=endpoint.window.cwnd)
        self._wake = threading.Condition(endpoint._lock)  # answers to this message, and room for it
        #: The sender's thread sleeps in `_sleep` (endpoint lock): the receive thread may take
        #: this message's answers itself (`on_answer`) and wake the thread only if it must act.
        self.parked = False
        self.busy = False  # the receive thread sends a chunk of this message (`send_turn`)
        self.busy_waited = False  # the sender's thread woke and waits for that send to end
        self.failed: Exception | None = None  # what a send on the receive thread raised

    # -- the loop -------------------------------------------------------------------------

    def run(self) -> SendReport:
        started = time.perf_counter()
        try:
            settle_until = 0.0
            while True:
                if self.ep.aborted is not None:
                    raise TransportError(f"sending {message_name(self.key)}: the endpoint was aborted ({self.ep.aborted})")
                if self.failed is not None:
                    raise self.failed
                self._fill()
                self._collect()
                if self.complete:  # the receiver holds the message: learn exactly what it holds
                    self.pending.clear()
                    unknown = ~self.received & ~self.final
                    if not unknown.any() or (settle_until and not self.chunks):
                        break
                    if not settle_until:
                        # Best effort: a receiver that closed right after completing may not
                        # answer; then the report keeps what the answers so far showed.
                        settle_until = time.monotonic() + max(4 * self.ep._rtt(self.dest).rto, SETTLE_MIN_S)
                        self._probe_missing(np.flatnonzero(unknown))
                    elif time.monotonic() > settle_until:
                        break
                    self._sleep()
                    continue
                self._early()
                if not self.pending and not self.chunks:
                    if self._decide():
                        break
                    continue
                self._sleep()
        finally:
            self._release_all()
        self.timing.ended, self.timing.cwnd_end = time.monotonic(), self.ep.window.cwnd
        missing, by_class = 0, {}
        if not self.received.all():
            lost = ~self.received
            lost_counts = self.counts[lost]
            missing = int(lost_counts.sum())
            classes = self.batch.headers["mag_class"][lost]
            by_class = {int(c): int(lost_counts[classes == c].sum()) for c in np.unique(classes)}
        exact = not missing or (self.complete and not self.chunks)
        eligible = self.batch.eligible
        return SendReport(
            key=self.key, packets=self.n, payload_bytes=self.elements * 4, retransmitted=self.retransmitted,
            rounds=self.rounds, probes=self.probes, missing=missing, eligible=int(np.count_nonzero(eligible)),
            seconds=time.perf_counter() - started, ecn_echoes=self.echoes, timeouts=self.timeouts,
            chunks=self.chunk_count, lost_by_class=by_class,
            eligible_elements=int(self.counts[eligible].sum()),
            reordered=int(np.count_nonzero(self.shown_missing & self.received & ~self.resent))
            if self.shown_missing.any() else 0,
            unconfirmed=0 if exact else missing, timing=self.timing,
        )

    def _fill(self) -> None:
        ep = self.ep
        while self.pending:
            with ep._cond:
                grant = self._grant()
                if not grant:
                    return
                packets = self._take(grant)
                ep.in_flight += packets.size
                ep._room_freed()  # room left over: the next sender waiting may use it
            self._send_chunk(packets)

    def _grant(self) -> int:
        """(Lock held.) Packets the next chunk may take: a whole chunk (half the flight cap),
        or any room while none of this message's chunks is unanswered; 0: none."""
        ep = self.ep
        room = int(ep.window.flight_cap) - ep.in_flight
        target = min(len(self.pending), MAX_CHUNK, max(4, int(ep.window.flight_cap) // 2))
        if room >= target:
            return target
        return room if room >= 1 and not self.chunks else 0

    def take_turn(self) -> bool:
        """(Endpoint lock held; the receive thread, room freed for this sender.) Whether the
        receive thread sends this sender's next chunk (`send_turn`): only while its thread
        sleeps, so that one thread at a time works on the message."""
        if not self.parked or self.busy:
            return False
        self.busy = True
        return True

    def send_turn(self) -> None:
        """(The receive thread, endpoint lock not held, after `take_turn`.) Send this sleeping
        sender's next chunk when the pacer lets it leave at once (the receive thread never
        sleeps for pacing); otherwise wake its thread as the room would have. Ends the turn."""
        ep = self.ep
        sent = False
        try:
            with ep._cond:
                grant = self._grant() if self.pending else 0
                packets = self._take(grant) if grant and ep.pacer.ready(grant) else None
                if packets is not None:
                    ep.in_flight += packets.size
                    ep._room_freed()
            if packets is not None:
                self._send_chunk(packets)
                sent = True
                self.timing.inline_chunks += 1
        except Exception as exc:  # the sender's thread raises it (run)
            self.failed = exc
        finally:
            with ep._cond:
                self.busy = False
                if sent and self.pending and self.failed is None:  # wait for room again, in line as before
                    need = min(len(self.pending), MAX_CHUNK, max(4, int(ep.window.flight_cap) // 2))
                    ep._wait_room(self._wake, self.prio, need, self)
                    ep._room_freed()
                if not sent or self.failed is not None or self.busy_waited:
                    self._wake.notify()

    def _send_chunk(self, packets: np.ndarray) -> None:
        """Send `packets` (their credit taken) and the probe that closes their chunk."""
        ep = self.ep
        lo, hi = int(packets.min()), int(packets.max())
        again = packets[self.sent_once[packets]]
        if again.size:
            self.resent[again] = True
            self.batch.headers["flags"][again] |= np.uint8(Flags.RETRANSMIT)
            self.retransmitted += again.size  # counted when sent again, not when queued
        self.sent_once[packets] = True
        ep._transmit(self.batch, packets, self.dest)
        self.last_sent = self.timing.last_sent = time.monotonic()
        self.timing.first_sent = self.timing.first_sent or self.last_sent
        self._open(lo, hi - lo + 1, packets, last=False)

    def _take(self, grant: int) -> np.ndarray:
        """Up to `grant` pending packets, in order, whose range one bitmap answer covers."""
        cand = self.pending.peek(grant)
        if cand[-1] - cand[0] == cand.size - 1:  # the usual case: consecutive packets
            m = cand.size
        else:
            span = np.maximum.accumulate(cand) - np.minimum.accumulate(cand)
            fits = span < BITMAP_BITS_PER_PACKET
            m = cand.size if fits[-1] else int(np.argmin(fits))
        return self.pending.pop(m)

    def _open(self, first: int, nbits: int, packets: np.ndarray, last: bool,
              confirms: np.ndarray | None = None) -> None:
        wait = ChunkWait(self.seq_base + first, nbits)
        wait.wake = self._wake
        wait.owner = self if self.ep.answers_on_receive else None
        chunk = Chunk(first=first, nbits=nbits, packets=packets, last=last, wait=wait, confirms=confirms)
        self.chunks.append(chunk)
        self.chunk_count += 1
        self._probe(chunk)

    def _probe(self, chunk: Chunk) -> None:
        ep = self.ep
        nonce = ep._next_nonce()
        probe = HEADER_STRUCT.pack(
            (VERSION << 4) | MsgType.PROBE, Flags.LAST if chunk.last else 0, self.key.job_id,
            self.key.worker_id, self.key.tensor_id, self.key.iteration, self.seq_base + chunk.first,
            self.tensor_len, nonce, int(self.key.kind), self.prio, chunk.nbits,
        )
        length = probe_length(chunk.nbits)
        if length > len(probe):
            probe += bytes(length - len(probe))
        assert probe_capacity(len(probe)) >= chunk.nbits
        now = time.monotonic()
        chunk.sent[nonce] = now
        ep._register(self.dest, self.key, nonce, chunk.wait)
        chunk.attempts += 1
        chunk.deadline = now + ep._rtt(self.dest).backed_off(chunk.attempts)
        self.probes += 1
        ep._send_control(probe, self.dest)

    def _collect(self) -> None:
        ep = self.ep
        now = time.monotonic()
        for chunk in list(self.chunks):
            wait = chunk.wait
            if wait.answered:
                self.chunks.remove(chunk)
                ep._unregister(self.dest, self.key, chunk.sent, wait)
                self._answered(chunk, wait)
            elif now >= chunk.deadline:
                ep.liveness.check(self.dest, since=min(chunk.sent.values()),
                                  waiting_for=f"a bitmap for {message_name(self.key)}", limit=ep.peer_timeout)
                self.timeouts += 1
                self._probe(chunk)

    def on_answer(self) -> bool:
        """(Endpoint lock held; the receive thread, an answer to this message filled in.) While
        the sender's thread sleeps, take the answered chunks here, so that the room they free
        wakes only the sender it goes to (``_room_freed``); whether this sender's thread must
        wake: its message completed, no chunk is left unanswered, or the answers changed what
        it sends next (resends queued, packets shown missing). Room for its pending packets
        wakes it through the room waiters. Awake, or to be woken anyway (every chunk answered,
        the message complete), it takes the answers itself (True, nothing done here)."""
        if not self.parked or all(c.wait.answered for c in self.chunks) or any(c.wait.complete for c in self.chunks):
            return True  # it wakes anyway: taken here, its answer would cost a GIL hand-off more
        pending, suspects = len(self.pending), len(self.suspects)
        for chunk in [c for c in self.chunks if c.wait.answered]:
            self.chunks.remove(chunk)
            self.ep._unregister(self.dest, self.key, chunk.sent, chunk.wait)
            self._answered(chunk, chunk.wait)
            self.timing.inline_answers += 1
        wake = (self.complete or not self.chunks or len(self.pending) != pending
                or len(self.suspects) != suspects)
        if wake:
            self.timing.wakes += 1
        return wake

    def _sleep(self) -> None:
        ep = self.ep
        now = time.monotonic()
        timeout = min((c.deadline for c in self.chunks), default=now + 0.05) - now
        if self.suspects and not within_bound(self.round_lost, self.elements, self.bound):
            timeout = min(timeout, min(self.suspects.values()) + self.ep.reorder_grace - now)
        with ep._cond:
            if any(c.wait.answered for c in self.chunks):
                return
            if self.pending:
                if int(ep.window.flight_cap) - ep.in_flight >= 1 and not self.chunks:
                    return
                # the room _fill takes: a whole chunk while others are unanswered, else any
                need = min(len(self.pending), MAX_CHUNK, max(4, int(ep.window.flight_cap) // 2)) if self.chunks else 1
                ep._wait_room(self._wake, self.prio, need, self)
            self.parked = True
            try:
                self._wake.wait(min(max(timeout, 0.0), 0.05))
                while self.busy:  # the receive thread sends a chunk of this message (send_turn)
                    self.busy_waited = True
                    self._wake.wait(0.05)
            finally:
                self.parked = self.busy_waited = False
            ep._room_wait_done(self._wake)
        waited = time.monotonic() - now
        if self.pending:
            self.timing.room_wait_s += waited
        else:
            self.timing.answer_wait_s += waited

    def _release_all(self) -> None:
        ep = self.ep
        held = 0
        for chunk in self.chunks:
            ep._unregister(self.dest, self.key, chunk.sent, chunk.wait)
            held += chunk.packets.size
        self.chunks.clear()
        if held:
            with ep._cond:
                ep.in_flight -= held
                ep._room_freed()

