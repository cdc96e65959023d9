"""The receive loop of the C data path (the endpoint's receive thread; used by :mod:`hosts.endpoint`).

Batches of datagrams (:meth:`hosts.fastpath.BatchReceiver.recv`); runs of data of messages the C
answers for placed by the C as it receives them (:meth:`hosts.receiver.Reassembler.absorbed` takes
their counts and completions once per batch); other runs of one message's data placed at once
(:meth:`hosts.receiver.Reassembler.handle_run`); probes of open messages that
the C registered answered by it once the batch's data is placed, all answers of a batch in one
``sendmmsg`` (:meth:`BatchReceiver.answer`, ``hosts/answers.c``), with the ECN echoes they owe,
and those flagged *last* that complete their message; everything else one by one in Python.
What a probe answered in C leaves for Python is the bookkeeping of any datagram heard
(liveness, the time of the last data or probe, its sender noted as one that probes or told its
message completed) and the completion of the messages its answer completed.
"""

from __future__ import annotations

import select
import time
from typing import Any

import numpy as np

from hosts.fastpath import BatchReceiver
from hosts.messages import Delivered
from hosts.wire import HEADER_LEN, MsgType

ECN_CE = 0x03  # IP ECN field: congestion experienced
_CE_BYTES = bytes(1 if t & ECN_CE == ECN_CE else 0 for t in range(256))  # TOS byte -> 1 when CE
_ANSWERED, _LEFT, _ANSWERED_LAST, _PLACED = (BatchReceiver.ANSWERED, BatchReceiver.LEFT, BatchReceiver.ANSWERED_LAST,
                                             BatchReceiver.PLACED)
_EMPTY = b""  # the header noted for data the C placed (liveness looks for goodbyes, which are bitmaps)


def receive_batches(ep: Any, rx: BatchReceiver) -> None:
    """Run the receive loop of endpoint `ep` (a :class:`hosts.endpoint.Endpoint`) on `rx` until
    its stop event is set."""
    poller = select.poll()
    poller.register(ep._sock, select.POLLIN)
    while not ep._stop.is_set():
        if not poller.poll(50):
            continue
        while not ep._stop.is_set():
            try:
                n = rx.recv()
            except OSError:
                break
            if n == 0:
                break
            handle_batch(ep, rx, n)


def handle_one(ep: Any, data: memoryview, source: Any, ce: bool, now: float) -> list[Delivered]:
    """One datagram by itself, in Python (both receive loops; its source already heard): a
    bitmap to the sending side (``_on_bitmap``), anything else to the reassembler, its replies
    sent (``_reply``); the messages it completed. `ce`: it arrived CE-marked."""
    if len(data) >= HEADER_LEN and data[0] & 0x0F == MsgType.BITMAP:
        ep._on_bitmap(data, source, now)
        return []
    ep._last_peer_rx = now
    replies, done = ep.reassembler.handle(data, source, ce)
    if replies:
        ep._reply(replies, source)
    return done


def handle_batch(ep: Any, rx: BatchReceiver, n: int) -> None:
    """Handle the `n` packets of `rx`'s batch for endpoint `ep`: its reassembler, liveness,
    finals, ``_on_bitmap``, ``_reply`` and ``_deliver`` (tests pass a stand-in)."""
    reassembler = ep.reassembler
    stats = reassembler.stats
    heard = ep.liveness.heard
    finals = ep._finals
    tos, bad = rx.tos, rx.bad
    now = ep._last_rx = time.monotonic()
    delivered: list[Delivered] = []
    marked = rx.marked()
    placed = rx.placed()
    if placed:  # runs of registered messages the C placed: their counts and completions
        done, sources = reassembler.absorbed(rx)
        delivered += done
        ep._last_peer_rx = now
        for source in sources:
            heard(source, now, _EMPTY)
    i = 0 if placed < n else n  # a batch the C placed whole has nothing left for the loop
    while i < n:
        flag = bad[i]
        if flag:
            if flag == _PLACED:
                i = rx.run_end(i, n)
                continue
            if flag != _ANSWERED:  # missing or wrong job-key tag: dropped before anything looks at it
                stats.drops["bad_tag"] += 1
            i += 1  # (a probe C answers below)
            continue
        j = rx.run_end(i, n)
        source = rx.source(i)
        data = rx.packet(j - 1)
        heard(source, now, bytes(data[:HEADER_LEN]))
        if j - i > 1:
            ep._last_peer_rx = now
            ce = tos[i:j].tobytes().translate(_CE_BYTES).count(1)  # no numpy call per run
            delivered += reassembler.handle_run(rx, i, j, source, ce)
        else:
            delivered += handle_one(ep, data, source, int(tos[i]) & ECN_CE == ECN_CE, now)
        i = j
    if marked:
        answered, left, failed, echoed = rx.answer(n)
        stats.probes += answered
        stats.bitmaps_sent += answered
        stats.answered_in_c += answered
        stats.ecn_echoes += echoed
        stats.echoes_in_c += echoed
        if failed:
            stats.drops["reply_failed"] += failed
        for asm in rx.completed():  # messages whose probe flagged last C answered within the bound
            message = reassembler.completed_in_c(asm)
            if message is not None:
                delivered.append(message)
        for k in np.flatnonzero(bad[:n] - _ANSWERED < 3).tolist():  # ANSWERED, LEFT, ANSWERED_LAST (uint8)
            source, data = rx.source(k), rx.packet(k)
            heard(source, now, bytes(data[:HEADER_LEN]))
            ep._last_peer_rx = now
            flag = bad[k]
            if flag == _LEFT:  # its message completed, its source moved, or it disagrees
                delivered += handle_one(ep, data, source, False, now)
            elif flag == _ANSWERED_LAST:  # its answer, flagged last, settles its message
                finals.replied(data, source, now, last=True)
            else:
                finals.probed(source)
    if delivered:
        ep._deliver(delivered)
