"""Ring all-reduce and a parameter server over TCP: the baselines users run, with the same
logic as the DLCP collectives (:class:`hosts.ring.RingAllReduce`, :mod:`hosts.ps`).

One TCP connection per pair of ranks that talk (a ring: each rank to its right and from its
left; a parameter server: each worker to rank 0), framed messages (a 24-byte header: kind,
iteration, tensor id, part, step, value count; then float32 values). Messages are tagged,
so ranks may start collectives in different orders (priority schedulers) and a receive
thread per connection files each message under its tag until a collective takes it. Over a
connection messages go in the order they were sent (TCP's head-of-line blocking, as in
gloo). Sockets can mark a DSCP (``IP_TOS``) so a switch can put the job in a priority class,
as an operator would do for gloo; Linux's ``rto_min`` is a route attribute set by the runner.
Without ``congestion`` a socket runs the host's default congestion control
(``net.ipv4.tcp_congestion_control``); with it, that algorithm is set per socket
(``TCP_CONGESTION``). Either way :meth:`TcpMesh.congestion_used` reads back what each socket ran;
:meth:`TcpMesh.tcp_info` reads each socket's ``TCP_INFO`` (retransmissions, rto, cwnd, rtt).
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from experiments.errors import ExperimentError

HEADER = struct.Struct("!IIIIII")  # kind, iteration, tensor id, part, step, count
GRADIENT, PARAMETER = 1, 2
Key = tuple[int, int, int, int, int]  # kind, iteration, tensor id, part, step


@dataclass
class TcpReport:
    """What a collective carried (the same names as the DLCP reports; TCP loses nothing)."""

    bytes: int = 0
    lost_elements: int = 0
    received_elements: int = 0
    seconds: float = 0.0
    sends: list[Any] = field(default_factory=list)


class TcpMesh:
    """Framed, tagged messages to and from this rank's peers (module doc)."""

    def __init__(self, rank: int, addresses: list[tuple[str, int]], talks_to: set[int], *, dscp: int = 0,
                 congestion: str = "", timeout_s: float = 60.0) -> None:
        self.rank = rank
        self.dscp = dscp
        self.congestion = congestion
        self.timeout_s = timeout_s
        self._socks: dict[int, socket.socket] = {}
        self._send_locks: dict[int, threading.Lock] = {}
        self._inbox: dict[tuple[int, Key], np.ndarray] = {}
        self._ready = threading.Condition()
        self._closed = False
        self._errors: list[str] = []
        host, port = addresses[rank]
        server = socket.create_server((host, port), reuse_port=False)
        server.settimeout(timeout_s)
        try:
            for peer in sorted(p for p in talks_to if p < rank):  # lower ranks accept, higher connect
                self._add(peer, self._connect(addresses[peer]))
            for _ in [p for p in talks_to if p > rank]:
                conn, _addr = server.accept()
                (peer,) = struct.unpack("!I", _recv_exact(conn, 4))
                self._add(peer, conn)
        except OSError as exc:
            self.close()
            raise ExperimentError(f"rank {rank}: TCP mesh to ranks {sorted(talks_to)} failed: {exc}") from exc
        finally:
            server.close()
        for peer, sock in self._socks.items():
            threading.Thread(target=self._receive, args=(peer, sock), daemon=True, name=f"tcp-rx-{peer}").start()

    def _connect(self, address: tuple[str, int]) -> socket.socket:
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                sock = socket.create_connection(address, timeout=5.0)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        sock.sendall(struct.pack("!I", self.rank))
        return sock

    def _add(self, peer: int, sock: socket.socket) -> None:
        sock.settimeout(None)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.dscp:
            sock.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, self.dscp << 2)
        if self.congestion:
            set_congestion(sock, self.congestion)
        self._socks[peer] = sock
        self._send_locks[peer] = threading.Lock()

    def congestion_used(self) -> dict[str, str]:
        """The congestion control each peer's socket runs, read back from the kernel (peer rank: name)."""
        return {str(peer): congestion_of(sock) for peer, sock in sorted(self._socks.items())}

    def tcp_info(self) -> dict[str, dict[str, int]]:
        """Each peer's socket as the kernel sees it now (:mod:`experiments.training.tcp_info`; peer rank: fields)."""
        from experiments.training.tcp_info import tcp_info

        return {str(peer): tcp_info(sock) for peer, sock in sorted(self._socks.items())}

    def send(self, peer: int, key: Key, values: np.ndarray) -> int:
        data = np.ascontiguousarray(values, dtype=np.float32)
        header = HEADER.pack(*key, data.size)
        with self._send_locks[peer]:
            self._socks[peer].sendall(header + data.tobytes())
        return HEADER.size + data.nbytes

    def take(self, peer: int, key: Key, timeout: float | None = None) -> np.ndarray:
        deadline = time.monotonic() + (timeout or self.timeout_s)
        with self._ready:
            while (peer, key) not in self._inbox:
                if self._errors:
                    raise ExperimentError(f"rank {self.rank}: {self._errors[0]}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ExperimentError(f"rank {self.rank}: no message {key} from rank {peer} within "
                                          f"{timeout or self.timeout_s:.0f} s")
                self._ready.wait(min(left, 1.0))
            return self._inbox.pop((peer, key))

    def _receive(self, peer: int, sock: socket.socket) -> None:
        try:
            while True:
                kind, it, tensor, part, step, count = HEADER.unpack(_recv_exact(sock, HEADER.size))
                values = np.frombuffer(_recv_exact(sock, 4 * count), dtype=np.float32).copy()
                with self._ready:
                    self._inbox[(peer, (kind, it, tensor, part, step))] = values
                    self._ready.notify_all()
        except (OSError, EOFError) as exc:
            if not self._closed:
                with self._ready:
                    self._errors.append(f"connection to rank {peer} ended: {exc}")
                    self._ready.notify_all()

    def close(self) -> None:
        self._closed = True
        for sock in self._socks.values():
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()


def set_congestion(sock: socket.socket, name: str) -> None:
    """Run `name` (``cubic``, ``bbr``, ...) as `sock`'s congestion control (``TCP_CONGESTION``)."""
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, name.encode())
    except OSError as exc:
        available = Path("/proc/sys/net/ipv4/tcp_available_congestion_control")
        known = available.read_text().strip() if available.exists() else "unknown"
        raise ExperimentError(f"TCP congestion control {name!r} cannot be set ({exc}); this kernel offers: {known}"
                              ) from exc


def congestion_of(sock: socket.socket) -> str:
    """The congestion control `sock` runs (``getsockopt(TCP_CONGESTION)``)."""
    return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16).split(b"\0", 1)[0].decode()


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            raise EOFError("peer closed the connection")
        got += k
    return bytes(buf)


class TcpRing:
    """Ring all-reduce (reduce-scatter then all-gather), the algorithm of :class:`hosts.ring.RingAllReduce`."""

    def __init__(self, mesh: TcpMesh, rank: int, size: int, *, concurrency: int = 8) -> None:
        self.mesh, self.rank, self.size = mesh, rank, size
        self.right, self.left = (rank + 1) % size, (rank - 1) % size
        self._pool = ThreadPoolExecutor(concurrency, thread_name_prefix=f"tcp-ring-{rank}")

    def allreduce(self, values: np.ndarray, *, iteration: int, tensor_id: int, part: int = 0,
                  average: bool = True, timeout: float | None = None, **_: Any) -> tuple[np.ndarray, TcpReport]:
        started = time.perf_counter()
        buf = np.array(values, dtype=np.float32, copy=True)
        report = TcpReport()
        n = self.size
        bounds = [buf.size * i // n for i in range(n + 1)]
        for step in range(2 * (n - 1)):
            gather = step >= n - 1
            s = step - (n - 1) if gather else step
            send_c = (self.rank + 1 - s) % n if gather else (self.rank - s) % n
            recv_c = (self.rank - s) % n if gather else (self.rank - s - 1) % n
            kind = PARAMETER if gather else GRADIENT
            key = (kind, iteration, tensor_id, part, step)
            report.bytes += self.mesh.send(self.right, key, buf[bounds[send_c]:bounds[send_c + 1]])
            got = self.mesh.take(self.left, key, timeout)
            report.received_elements += got.size
            if gather:
                buf[bounds[recv_c]:bounds[recv_c + 1]] = got
            else:
                buf[bounds[recv_c]:bounds[recv_c + 1]] += got
        if average:
            buf /= n
        report.seconds = time.perf_counter() - started
        return buf, report

    def allreduce_async(self, values: np.ndarray, **options: Any) -> Future[tuple[np.ndarray, TcpReport]]:
        return self._pool.submit(self.allreduce, np.array(values, dtype=np.float32, copy=True), **options)

    def close(self) -> None:
        self._pool.shutdown(wait=True)


class TcpPsClient:
    """A worker's side of the TCP parameter server (rank 0): push parts, pull whole tensors."""

    def __init__(self, mesh: TcpMesh) -> None:
        self.mesh = mesh
        self._pool = ThreadPoolExecutor(4, thread_name_prefix="tcp-ps-push")

    def push_async(self, iteration: int, tensor_id: int, values: np.ndarray, *, start: int = 0,
                   tensor_len: int | None = None, **_: Any) -> Future[int]:
        data = np.array(values, dtype=np.float32, copy=True)
        total = data.size if tensor_len is None else tensor_len
        # part = offset, step = whole length: the server places the part and knows when it is complete
        return self._pool.submit(self.mesh.send, 0, (GRADIENT, iteration, tensor_id, start, total), data)

    def pull(self, iteration: int, tensor_id: int, timeout: float | None = None) -> np.ndarray:
        return self.mesh.take(0, (PARAMETER, iteration, tensor_id, 0, 0), timeout)

    def close(self) -> None:
        self._pool.shutdown(wait=True)


class TcpPsServer:
    """Rank 0: sums each tensor's parts from every worker and sends the mean back to each
    as soon as the tensor is complete (the logic of :class:`hosts.ps.ParameterServer`)."""

    def __init__(self, mesh: TcpMesh, workers: list[int]) -> None:
        self.mesh, self.workers = mesh, workers

    def serve(self, iterations: int, tensor_lens: dict[int, int], timeout: float | None = None) -> None:
        from collections import defaultdict

        sums: dict[tuple[int, int], np.ndarray] = {}
        filled: dict[tuple[int, int], int] = defaultdict(int)
        need = len(self.workers)
        pending = {(it, t) for it in range(iterations) for t, n in tensor_lens.items() if n}
        with self.mesh._ready:  # noqa: SLF001 - the server reads the mesh's inbox as it fills
            while pending:
                picked = next(((peer, key) for (peer, key) in self.mesh._inbox if key[0] == GRADIENT), None)
                if picked is None:
                    if self.mesh._errors:
                        raise ExperimentError(f"parameter server: {self.mesh._errors[0]}")
                    if not self.mesh._ready.wait(timeout or self.mesh.timeout_s):
                        raise ExperimentError(f"parameter server: no push for {timeout or self.mesh.timeout_s:.0f} s "
                                              f"({len(pending)} tensors still expected)")
                    continue
                values = self.mesh._inbox.pop(picked)
                _, (_, it, tensor, start, total) = picked
                acc = sums.setdefault((it, tensor), np.zeros(total, np.float32))
                acc[start:start + values.size] += values
                filled[(it, tensor)] += values.size
                if filled[(it, tensor)] == need * total:
                    mean = sums.pop((it, tensor)) / need
                    pending.discard((it, tensor))
                    self.mesh._ready.release()
                    try:
                        for w in self.workers:
                            self.mesh.send(w, (PARAMETER, it, tensor, 0, 0), mean)
                    finally:
                        self.mesh._ready.acquire()
