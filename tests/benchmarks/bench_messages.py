"""CPU per message of the DLCP transport for one 42-packet message at a time, against a plain
TCP socket carrying the same bytes as framed messages in the same run.

A DLCP rank of the trace job sends and receives 136 messages per iteration of 41 packets on
average, one after another on each ring step, so what a message costs the host (not what a
packet costs) sets its pace. Here a sender process sends `MESSAGES` messages of 15,162
float32 values (42 packets of 361 values, a 1500-byte MTU) to a receiver process over
loopback, one at a time: each send returns once the receiver holds the message (its
answer), as a ring step waits for it. The receiver adds each message into its own array
(``Reassembler.expect(..., add=True)``, as the ring's reduce steps do) and takes it
(``Endpoint.take``). Gradient bound 0.1 (DLCP's drop rule marks packets), C data path.

The receiver's receive thread is also measured alone (its CPU from ``/proc/self/task/<id>/schedstat``
and its voluntary switches, per message), with the probes its C path answered
(``answered_in_c``, ``hosts/answers.c``) per message.

TCP sends each message as an 8-byte length and the values on one connection; the receiver
reads the whole message into its array and answers one byte, which the sender waits for.

CPU is each process's user plus system time over the messages after a warm-up, per message
(and per DLCP data packet); voluntary context switches (both processes, all threads) per
message beside it. The runs alternate (DLCP, DLCP with a small window, TCP, ...) and each
figure is the median of the rounds, with the range, so a busy machine weighs on all alike.

The small-window mode holds the sender's window at 22 packets (``Window(cwnd=22,
max_cwnd=22)``, the congestion window a trace rank holds on the fabric, where the window is
full 80-87 % of the time): a message then goes in several chunks, each with its probe and
answer. What a chunk beyond the first costs is the CPU difference of the two DLCP modes over
their difference in chunks per message.

The CE mode (``dlcp-w22-ce``) is the window-22 mode with every `CE_EVERY`-th data packet sent
with ECN = CE in its TOS byte (as a congested switch marks it; the sender's marking replaced
in the benchmark): 2 marks per message, so probes owe the sender ECN echoes as on the fabric
(12,700-13,700 CE marks per DLCP run there); each echo shrinks the sender's window, so a
message goes in about 9 chunks (2 of whose probes carry an echo) instead of 4.

    python -m tests.benchmarks.bench_messages [--rounds 5] [--messages 300]

``--profile-receiver FILE`` (with ``--messages 6000``) records the receiver's receive thread in the
window-22 mode (``--ce``: the CE mode) with ``perf record -g`` for 4 s and prints its samples by
what they were doing.

``--handle-batch`` (with ``--messages 400``) times the receive loop's work alone, in-process, on
whole-window messages and on messages in 4 chunks, with and without CE marks (:func:`handle_batches`).

``--against DIR --pairs N`` runs one round of this benchmark in checkout DIR (its own version of
it) and one in this checkout, N times alternating which goes first, and prints each one's medians
of the fields both print, and its CPU per chunk beyond the first from those medians.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import re
import resource
import socket
import statistics
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from tests.benchmarks.figure import Figure, print_table

VALUES = 42 * 361 - 1  # 42 packets of up to 361 values
MESSAGES = 300
WARMUP = 20
ROUNDS = 5
BOUND = 0.1
SMALL_WINDOW = 22  # packets: a trace rank's congestion window on the fabric
CE_EVERY = 21  # the CE mode: data packets k with k % CE_EVERY == CE_EVERY // 2 leave CE-marked
KINDS = ("dlcp", "dlcp-w22", "dlcp-w22-ce", "tcp")
_LEN = struct.Struct("!Q")


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _switches() -> int:
    """Voluntary context switches of this process (all its threads) so far."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw


def _thread(tid: int) -> tuple[float, int]:
    """CPU seconds (schedstat) and voluntary switches of this process's thread `tid` so far."""
    base = f"/proc/self/task/{tid}"
    try:
        with open(base + "/schedstat") as f:
            ns = int(f.read().split()[0])
        with open(base + "/status") as f:
            vol = next(int(line.split()[1]) for line in f if line.startswith("voluntary_ctxt_switches"))
    except (OSError, StopIteration, ValueError):
        return 0.0, 0
    return ns / 1e9, vol


def _values() -> np.ndarray:
    return (np.random.default_rng(1).standard_normal(VALUES) * 1e-3).astype(np.float32)


def _ce_marks(length: int) -> np.ndarray:
    """TOS bytes of a message's `length` data packets in the CE mode: ECT(0), CE on every CE_EVERY-th."""
    tos = np.full(length, 0x02, dtype=np.uint8)
    tos[CE_EVERY // 2::CE_EVERY] = 0x03
    return tos


class _CeMarking:
    """An endpoint's marking with the data packets' TOS bytes of the CE mode (:func:`_ce_marks`)."""

    def __init__(self, marking: Any) -> None:
        self._marking = marking

    def data_tos(self, _prio: int, eligible: np.ndarray, _ecn_capable: bool = True) -> np.ndarray:
        return _ce_marks(len(eligible))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._marking, name)


def _dlcp_receiver(to_sender: Any, to_receiver: Any, out: Any, messages: int, window: int | None,
                   tid_out: Any = None) -> None:
    from hosts.endpoint import Endpoint
    from hosts.messages import MessageKey
    from hosts.wire import MsgType

    bounds = {MsgType.GRADIENT: BOUND, MsgType.PARAMETER: 0.0}
    with Endpoint(worker_id=2, host="127.0.0.1", bounds=bounds, linger=0.1) as endpoint:
        to_sender.put(endpoint.address)
        if tid_out is not None:  # --profile-receiver: whose samples to take
            tid_out.put(endpoint._thread.native_id)
        peer = to_receiver.get(timeout=60)
        buf = np.zeros(VALUES, dtype=np.float32)
        keys = [MessageKey(1, 1, i, 0, MsgType.GRADIENT) for i in range(messages)]
        for key in keys:  # every message is added into buf, as a ring's reduce step is
            endpoint.reassembler.expect(key, buf, add=True)
        cpu = wall = 0.0
        switches = 0
        tid = endpoint._thread.native_id or 0
        rx_thread = (0.0, 0)
        for i, key in enumerate(keys):
            if i == WARMUP:
                cpu, wall, switches = _cpu(), time.perf_counter(), _switches()
                rx_thread = _thread(tid)
                in_c = getattr(endpoint.reassembler.stats, "answered_in_c", 0)
                echoes = endpoint.reassembler.stats.ecn_echoes
            endpoint.take(key, timeout=60, peer=peer)
        now = _thread(tid)
        extra = {"rx_thread": now[0] - rx_thread[0], "rx_thread_switches": now[1] - rx_thread[1],
                 "in_c": getattr(endpoint.reassembler.stats, "answered_in_c", 0) - in_c,
                 "echoes": endpoint.reassembler.stats.ecn_echoes - echoes}
        out.put(("receiver", _cpu() - cpu, time.perf_counter() - wall, endpoint.reassembler.stats.data_packets,
                 _switches() - switches, 0, extra))
        endpoint.drain(quiet=0.2, limit=2)


def _dlcp_sender(to_sender: Any, to_receiver: Any, out: Any, messages: int, window: int | None,
                 ce: bool = False) -> None:
    from hosts.endpoint import Endpoint
    from hosts.pacing import Window
    from hosts.wire import MsgType

    values = _values()
    bounds = {MsgType.GRADIENT: BOUND, MsgType.PARAMETER: 0.0}
    held = Window(cwnd=window, max_cwnd=window) if window else None
    with Endpoint(worker_id=1, host="127.0.0.1", bounds=bounds, linger=0.1, window=held) as endpoint:
        if ce:
            endpoint.marking = _CeMarking(endpoint.marking)
        dest = to_sender.get(timeout=60)
        to_receiver.put(endpoint.address)
        cpu = wall = 0.0
        packets = chunks = switches = 0
        for i in range(messages):
            if i == WARMUP:
                cpu, wall, switches = _cpu(), time.perf_counter(), _switches()
            report = endpoint.send(dest, values, tensor_id=0, iteration=i, num_layers=2)
            if i >= WARMUP:
                packets += report.packets + report.retransmitted
                chunks += report.chunks
        out.put(("sender", _cpu() - cpu, time.perf_counter() - wall, packets, _switches() - switches, chunks, {}))


def _tcp_receiver(to_sender: Any, _to_receiver: Any, out: Any, messages: int, _window: int | None) -> None:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    to_sender.put(srv.getsockname())
    conn, _ = srv.accept()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buf = np.zeros(VALUES, dtype=np.float32)
    view = memoryview(buf).cast("B")
    head = bytearray(_LEN.size)
    cpu = wall = 0.0
    switches = 0
    for i in range(messages):
        if i == WARMUP:
            cpu, wall, switches = _cpu(), time.perf_counter(), _switches()
        _read(conn, memoryview(head))
        size = _LEN.unpack(head)[0]
        _read(conn, view[:size])
        conn.sendall(b"\x01")
    out.put(("receiver", _cpu() - cpu, time.perf_counter() - wall, 0, _switches() - switches, 0, {}))
    conn.close()
    srv.close()


def _read(conn: socket.socket, view: memoryview) -> None:
    got = 0
    while got < len(view):
        n = conn.recv_into(view[got:])
        if n == 0:
            raise ConnectionError("the TCP peer closed mid-message")
        got += n


def _tcp_sender(to_sender: Any, _to_receiver: Any, out: Any, messages: int, _window: int | None) -> None:
    values = _values()
    conn = socket.create_connection(to_sender.get(timeout=60))
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    payload = memoryview(values).cast("B")
    ack = bytearray(1)
    cpu = wall = 0.0
    switches = 0
    for i in range(messages):
        if i == WARMUP:
            cpu, wall, switches = _cpu(), time.perf_counter(), _switches()
        conn.sendall(_LEN.pack(len(payload)))
        conn.sendall(payload)
        _read(conn, memoryview(ack))
    out.put(("sender", _cpu() - cpu, time.perf_counter() - wall, 0, _switches() - switches, 0, {}))
    conn.close()


def _round(kind: str, messages: int) -> dict[str, tuple[float, float, int, int, int, dict[str, float]]]:
    """One run: {side: (CPU seconds, wall seconds, data packets, voluntary switches, chunks,
    the receiver's receive thread alone)} over the measured messages."""
    ctx = mp.get_context("spawn")
    to_sender, to_receiver, out = ctx.Queue(), ctx.Queue(), ctx.Queue()
    dlcp = kind.startswith("dlcp")
    recv_fn, send_fn = (_dlcp_receiver, _dlcp_sender) if dlcp else (_tcp_receiver, _tcp_sender)
    window = SMALL_WINDOW if kind.startswith("dlcp-w22") else None
    receiver = ctx.Process(target=recv_fn, args=(to_sender, to_receiver, out, messages, window))
    sender = ctx.Process(target=send_fn, args=(to_sender, to_receiver, out, messages, window)
                         + ((True,) if kind == "dlcp-w22-ce" else ()))
    receiver.start()
    sender.start()
    return _gather(out, (sender, receiver), 300)


def _gather(out: Any, procs: tuple[Any, ...], timeout: float,
            ) -> dict[str, tuple[float, float, int, int, int, dict[str, float]]]:
    """Both sides' figures from `out`, then `procs` joined (killed if they hang)."""
    got: dict[str, tuple[float, float, int, int, int, dict[str, float]]] = {}
    try:
        for _ in range(2):
            side, cpu, wall, packets, switches, chunks, extra = out.get(timeout=timeout)
            got[side] = (cpu, wall, packets, switches, chunks, extra)
    finally:
        for proc in procs:
            proc.join(timeout=30)
            if proc.is_alive():
                proc.kill()
    return got


def measure(rounds: int = ROUNDS, messages: int = MESSAGES,
            kinds: tuple[str, ...] = KINDS) -> dict[str, list[dict[str, float]]]:
    """Alternating runs; per kind a list of {sender, receiver, both (µs CPU per message),
    switches (voluntary, both processes, per message), wall_ms (per message), and for DLCP
    per_packet (µs, both sides), packets and chunks (per message)}."""
    results: dict[str, list[dict[str, float]]] = {kind: [] for kind in kinds}
    measured = messages - WARMUP
    for r in range(rounds):
        for kind in kinds:
            got = _round(kind, messages)
            s, rcv = got["sender"], got["receiver"]
            row = {"sender": s[0] / measured * 1e6, "receiver": rcv[0] / measured * 1e6,
                   "both": (s[0] + rcv[0]) / measured * 1e6, "switches": (s[3] + rcv[3]) / measured,
                   "wall_ms": s[1] / measured * 1e3}
            if kind.startswith("dlcp"):
                row["per_packet"] = (s[0] + rcv[0]) / max(1, s[2]) * 1e6
                row["packets"] = s[2] / measured
                row["chunks"] = s[4] / measured
                row["rx_thread"] = rcv[5]["rx_thread"] / measured * 1e6
                row["rx_thread_switches"] = rcv[5]["rx_thread_switches"] / measured
                row["in_c"] = rcv[5]["in_c"] / measured
                row["echoes"] = rcv[5]["echoes"] / measured
            results[kind].append(row)
            print(f"round {r + 1} {kind}: " + ", ".join(f"{k} {v:,.2f}" for k, v in row.items()), flush=True)
    return results


def _summary(rows: list[dict[str, float]], field: str) -> str:
    vals = [row[field] for row in rows]
    return f"{statistics.median(vals):,.2f} ({min(vals):,.2f}-{max(vals):,.2f})"


def per_chunk(full: list[dict[str, float]], small: list[dict[str, float]], field: str = "both") -> float:
    """`field` per chunk beyond a message's first: the small window's figure less the full
    window's, over the chunks per message it adds (medians of the rounds)."""
    med = lambda rows, f: statistics.median(r[f] for r in rows)  # noqa: E731
    extra = med(small, "chunks") - med(full, "chunks")
    return (med(small, field) - med(full, field)) / extra if extra > 0 else float("nan")


def run(rounds: int = ROUNDS, messages: int = MESSAGES) -> list[Figure]:
    results = measure(rounds, messages)
    dlcp, small, tcp, marked = results["dlcp"], results["dlcp-w22"], results["tcp"], results["dlcp-w22-ce"]
    for kind, rows in results.items():
        fields = ["sender", "receiver", "both", "switches", "wall_ms"] + (
            ["per_packet", "packets", "chunks", "rx_thread", "rx_thread_switches", "in_c", "echoes"]
            if kind.startswith("dlcp")
            else [])
        print(f"{kind}: " + "; ".join(f"{f} {_summary(rows, f)}" for f in fields) + " (µs CPU per message; "
              "switches voluntary per message, both processes; per_packet µs per data packet, both sides; "
              "wall_ms per message; median (range))")
    print(f"per chunk beyond the first (window {SMALL_WINDOW} against the full window): "
          f"{per_chunk(dlcp, small):,.1f} µs CPU both sides (sender {per_chunk(dlcp, small, 'sender'):,.1f}, "
          f"receiver {per_chunk(dlcp, small, 'receiver'):,.1f}; its receive thread "
          f"{per_chunk(dlcp, small, 'rx_thread'):,.1f}), {per_chunk(dlcp, small, 'switches'):,.2f} voluntary switches")
    print(f"per chunk beyond the first (window {SMALL_WINDOW}, CE-marked): {per_chunk(dlcp, marked):,.1f} µs CPU both "
          f"sides (receiver {per_chunk(dlcp, marked, 'receiver'):,.1f}; its receive thread "
          f"{per_chunk(dlcp, marked, 'rx_thread'):,.1f})")
    med = lambda rows, f: statistics.median(r[f] for r in rows)  # noqa: E731
    return [
        Figure("DLCP CPU per 42-packet message, both sides", med(dlcp, "both"), "TCP framed message",
               med(tcp, "both"), "µs", higher_is_better=False),
        Figure("DLCP CPU per message, sender", med(dlcp, "sender"), "TCP sender", med(tcp, "sender"), "µs",
               higher_is_better=False),
        Figure("DLCP CPU per message, receiver", med(dlcp, "receiver"), "TCP receiver", med(tcp, "receiver"),
               "µs", higher_is_better=False),
        Figure(f"DLCP CPU per message, window {SMALL_WINDOW}, both sides", med(small, "both"),
               "TCP framed message", med(tcp, "both"), "µs", higher_is_better=False),
        Figure(f"DLCP CPU per chunk beyond the first (window {SMALL_WINDOW}), both sides",
               per_chunk(dlcp, small), "TCP framed message", med(tcp, "both"), "µs", higher_is_better=False),
        Figure(f"DLCP CPU per message, window {SMALL_WINDOW}, CE-marked, both sides", med(marked, "both"),
               "TCP framed message", med(tcp, "both"), "µs", higher_is_better=False),
        Figure(f"DLCP voluntary switches per message, window {SMALL_WINDOW}", med(small, "switches"),
               "TCP framed message", med(tcp, "switches"), "", higher_is_better=False),
    ]


#: What a sample of the receive thread was doing: the first rule naming a frame of its stack.
PROFILE_CLASSES = (
    ("answer send (sendmmsg, sendto)", ("__sendmmsg", "__libc_sendto")),
    ("recvmmsg", ("__recvmmsg", "do_recvmmsg")),
    ("poll: sleeping and waking", ("__poll", "do_sys_poll")),
    ("GIL and locks (futex)", ("futex", "sem_post", "sem_wait", "sem_clockwait", "take_gil", "drop_gil")),
    ("C data path (gfh_*)", ("gfh_",)),
    ("cffi calls", ("_cffi_backend",)),
    ("numpy", ("_multiarray_umath",)),
    ("preemption and interrupts on return", ("irqentry_exit_to_user_mode", "asm_sysvec", "exit_to_user_mode")),
    ("page faults", ("asm_exc_page_fault",)),
    ("Python interpreter", ("python3",)),
)


def classify(perf_data: Path) -> dict[str, float]:
    """Shares (0..1) of `perf_data`'s samples by PROFILE_CLASSES (``perf script`` of a ``-g`` record)."""
    text = subprocess.run(["perf", "script", "-i", str(perf_data), "-F", "ip,sym,dso"], capture_output=True,
                          text=True, check=True).stdout
    counts: dict[str, int] = {}
    for sample in text.split("\n\n"):
        frames = sample.strip()
        if not frames:
            continue
        label = next((name for name, keys in PROFILE_CLASSES if any(k in frames for k in keys)), "other kernel")
        counts[label] = counts.get(label, 0) + 1
    total = sum(counts.values()) or 1
    return {k: v / total for k, v in sorted(counts.items(), key=lambda kv: -kv[1])}


def profile_receiver(messages: int, seconds: float, out_file: Path, ce: bool = False) -> None:
    """One window-22 run of `messages` messages (`ce`: in the CE mode); ``perf record -g`` of the
    receiver's receive thread for `seconds` from 1 s after it starts; its samples by class, in %
    and in µs per chunk (the share of the thread's CPU per message, over the message's chunks)."""
    ctx = mp.get_context("spawn")
    to_sender, to_receiver, out, tids = ctx.Queue(), ctx.Queue(), ctx.Queue(), ctx.Queue()
    receiver = ctx.Process(target=_dlcp_receiver, args=(to_sender, to_receiver, out, messages, SMALL_WINDOW, tids))
    sender = ctx.Process(target=_dlcp_sender, args=(to_sender, to_receiver, out, messages, SMALL_WINDOW, ce))
    receiver.start()
    sender.start()
    try:
        tid = tids.get(timeout=60)
        time.sleep(1.0)
        subprocess.run(["perf", "record", "-q", "-F", "2999", "-g", "-t", str(tid), "-o", str(out_file), "--",
                        "sleep", str(seconds)], check=True, capture_output=True)
    except BaseException:
        for proc in (sender, receiver):
            proc.kill()
        raise
    got = _gather(out, (sender, receiver), 600)
    measured = messages - WARMUP
    per_message = got["receiver"][5]["rx_thread"] / measured * 1e6
    chunks = got["sender"][4] / measured
    print(f"receive thread: {per_message:,.1f} µs CPU per message, {chunks:.2f} chunks per message, "
          f"{got['receiver'][5]['in_c'] / measured:.2f} probes per message answered in C, "
          f"{got['receiver'][5].get('echoes', 0) / measured:.2f} ECN echoes per message")
    for name, share in classify(out_file).items():
        print(f"  {name:40s} {100 * share:5.1f} %  {share * per_message / chunks:6.1f} µs per chunk")


def handle_batches(messages: int, chunks: int = 1, ce: bool = False) -> float:
    """µs of CPU per message for the receive loop's work alone (:func:`hosts.rxloop.handle_batch`):
    `messages` messages of 42 data packets loaded into a batch receiver with C answers on, no socket
    traffic but the answers. `chunks` 1: whole-window messages (the data and their final probe in
    one batch); more: that many batches per message, each a chunk of its data and its probe (the
    last flagged last), as in the window-22 mode; `ce`: packets 10 and 31 of each CE-marked."""
    from hosts.fastpath import BatchReceiver, native
    from hosts.inbox import Finals
    from hosts.liveness import Liveness
    from hosts.packetize import packetize
    from hosts.receiver import Reassembler
    from hosts.rxloop import handle_batch
    from hosts.wire import HEADER_LEN, Header, MsgType, pack_header, probe_length

    nat = native()
    if nat is None:
        raise RuntimeError("the C data path cannot be built here")

    class Host:
        def __init__(self) -> None:
            self.reassembler, self.liveness, self._finals = Reassembler(job_id=1), Liveness(30.0), Finals()
            self._last_rx = self._last_peer_rx = 0.0

        def _reply(self, replies: list[bytes], source: tuple[str, int]) -> None:
            pass

        def _deliver(self, delivered: list[Any]) -> None:
            pass

        def _on_bitmap(self, *args: Any) -> None:
            pass

    values = _values()
    batches = []
    for it in range(messages):
        b = packetize(values, kind=MsgType.GRADIENT, job_id=1, worker_id=1, tensor_id=0, iteration=it, count=361)
        data = [b.packet(i) for i in range(len(b))]
        edges = np.linspace(0, len(data), chunks + 1).round().astype(int).tolist()
        for c, (lo, hi) in enumerate(zip(edges, edges[1:])):
            last = c == chunks - 1
            first, n = (0, len(data)) if last else (lo, hi - lo)
            probe = pack_header(Header(msg_type=MsgType.PROBE, flags=2 if last else 0, job_id=1, worker_id=1,
                                       tensor_id=0, iteration=it, offset=first, tensor_len=VALUES, count=5 + c,
                                       mag_class=0, prio_hint=0, seq=n))
            tos = [3 if ce and k in (10, 31) else 2 for k in range(lo, hi)] + [2]
            batches.append((data[lo:hi] + [probe + bytes(probe_length(n) - HEADER_LEN)], tos))
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as own, socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as peer:
        own.bind(("127.0.0.1", 0))
        peer.bind(("127.0.0.1", 0))
        rx, host, source = BatchReceiver(nat, own, answers=True), Host(), peer.getsockname()
        try:
            rx.load([], [], [], absorb=True)
            absorb = {"absorb": True}
        except TypeError:  # a version without C placement
            absorb = {}
        start = time.process_time()
        for batch, tos in batches:
            handle_batch(host, rx, rx.load(batch, [source] * len(batch), tos, **absorb))
        return (time.process_time() - start) / messages * 1e6


def handles_batches_line(messages: int) -> str:
    return (f"receive loop alone: {handle_batches(messages):,.1f} µs of CPU per whole-window message, "
            f"{handle_batches(messages, 4):,.1f} in 4 chunks, {handle_batches(messages, 4, True):,.1f} in 4 chunks "
            f"with 2 CE marks ({messages} messages)")


_ROW = re.compile(r"^round \d+ ([\w-]+): (.*)$")


def _one_round(checkout: Path, messages: int) -> dict[str, dict[str, float]]:
    """One round of the benchmark as checkout `checkout` has it: {kind: {field: value}}."""
    proc = subprocess.run([sys.executable, "-m", "tests.benchmarks.bench_messages", "--rounds", "1", "--messages",
                           str(messages)], cwd=checkout, capture_output=True, text=True, check=False,
                          env={**os.environ, "PYTHONPATH": str(checkout)})
    rows: dict[str, dict[str, float]] = {}
    for line in proc.stdout.splitlines():
        m = _ROW.match(line)
        if m:
            rows[m.group(1)] = {k: float(v.replace(",", "")) for k, v in
                                (item.rsplit(" ", 1) for item in m.group(2).split(", "))}
    if not {"dlcp", "dlcp-w22"} <= rows.keys():
        raise RuntimeError(f"no figures from {checkout} (exit {proc.returncode}): {proc.stderr[-2000:]}")
    return rows


def against(other: Path, pairs: int, messages: int) -> None:
    """Alternate one round here and one in checkout `other`, `pairs` times; print medians."""
    here = Path(__file__).resolve().parents[2]
    checkouts = {"this": here, "other": other.resolve()}
    results: dict[str, dict[str, list[dict[str, float]]]] = {name: {} for name in checkouts}
    for p in range(pairs):
        order = list(checkouts) if p % 2 == 0 else list(checkouts)[::-1]
        for name in order:
            for kind, row in _one_round(checkouts[name], messages).items():
                results[name].setdefault(kind, []).append(row)
                print(f"pair {p + 1} {name} {kind}: " + ", ".join(f"{k} {v:,.2f}" for k, v in row.items()), flush=True)
    for name, kinds in results.items():
        for kind, rows in kinds.items():
            fields = [f for f in rows[0] if all(f in r for r in rows)]
            print(f"{name} ({checkouts[name]}) {kind}: " + "; ".join(f"{f} {_summary(rows, f)}" for f in fields))
        for small_kind in ("dlcp-w22", "dlcp-w22-ce"):
            full, small = kinds["dlcp"], kinds.get(small_kind, [])
            fields = [f for f in ("both", "sender", "receiver", "rx_thread", "switches")
                      if small and all(f in r for r in full + small)]
            print(f"{name}: per chunk beyond the first ({small_kind}): " +
                  ", ".join(f"{f} {per_chunk(full, small, f):,.2f}" for f in fields))
    for kind in [k for k in results["this"] if k in results["other"]]:
        ratios = []
        for f in ("receiver", "rx_thread", "sender", "both", "switches"):
            per_pair = [a[f] / b[f] for a, b in zip(results["this"][kind], results["other"][kind])
                        if f in a and f in b and b[f] > 0]
            if per_pair:
                ratios.append(f"{f} {statistics.median(per_pair):.3f} ({min(per_pair):.3f}-{max(per_pair):.3f})")
        print(f"this over other, per pair, {kind}: " + "; ".join(ratios))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--messages", type=int, default=MESSAGES)
    parser.add_argument("--against", type=Path, help="another checkout to alternate with")
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--profile-receiver", type=Path, metavar="PERF_DATA",
                        help="perf-record the receive thread in window-22 mode into PERF_DATA (needs perf)")
    parser.add_argument("--ce", action="store_true", help="with --profile-receiver: the CE mode")
    parser.add_argument("--handle-batch", action="store_true",
                        help="CPU per whole-window message of the receive loop's work alone (in-process)")
    args = parser.parse_args()
    if args.handle_batch:
        print(f"{handles_batches_line(args.messages)}")
        return
    if args.profile_receiver is not None:
        profile_receiver(args.messages, 4.0, args.profile_receiver, args.ce)
        return
    if args.against is not None:
        against(args.against, args.pairs, args.messages)
        return
    print_table(run(args.rounds, args.messages))


if __name__ == "__main__":
    main()
