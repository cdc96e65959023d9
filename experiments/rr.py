"""Short request/response flows (the latency-sensitive background the DLCP/MLT papers study).

``server``: answers each TCP connection's request (a line naming the size wanted) with that
many bytes, then closes. ``client``: every `--interval` seconds opens a new connection,
sends a request and reads the response; on SIGINT/SIGTERM prints one JSON line with the
flow completion times (FCT) of the requests that completed and the count that timed out::

    python -m experiments.rr server --bind 10.0.0.6 --port 5301
    python -m experiments.rr client --server 10.0.0.6 --port 5301 --size 8000 --interval 0.05
"""

from __future__ import annotations

import argparse
import json
import signal
import socket
import socketserver
import sys
import threading
import time
from types import FrameType

REQUEST_BYTES = 64


class _Handler(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        line = self.rfile.readline(REQUEST_BYTES + 1)
        try:
            size = int(line.split()[0])
        except (ValueError, IndexError):
            return
        self.wfile.write(b"x" * max(0, min(size, 1 << 24)))


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


def one_request(server: str, port: int, size: int, timeout: float) -> float:
    """Seconds from connect to the last byte of the response (raises OSError on failure)."""
    began = time.perf_counter()
    with socket.create_connection((server, port), timeout=timeout) as sock:
        sock.sendall(f"{size}\n".encode().ljust(REQUEST_BYTES))
        got = 0
        while got < size:
            chunk = sock.recv(65536)
            if not chunk:
                raise OSError(f"response cut after {got} of {size} bytes")
            got += len(chunk)
    return time.perf_counter() - began


def run_client(server: str, port: int, size: int, interval: float, timeout: float) -> dict[str, object]:
    stop = threading.Event()

    def on_signal(_sig: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    fcts: list[float] = []
    failed = 0
    started = time.perf_counter()
    while not stop.is_set():
        t0 = time.perf_counter()
        try:
            fcts.append(one_request(server, port, size, timeout))
        except OSError:
            failed += 1
        stop.wait(max(0.0, interval - (time.perf_counter() - t0)))
    return {"requests": len(fcts) + failed, "completed": len(fcts), "failed": failed, "size": size,
            "seconds": time.perf_counter() - started, "fct_s": [round(f, 6) for f in fcts]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.rr", description=__doc__.split("\n\n")[0])
    p.add_argument("role", choices=("server", "client"))
    p.add_argument("--bind", default="0.0.0.0")
    p.add_argument("--server", default="127.0.0.1")
    p.add_argument("--port", type=int, default=5301)
    p.add_argument("--size", type=int, default=8000, help="response bytes")
    p.add_argument("--interval", type=float, default=0.05, help="seconds between request starts")
    p.add_argument("--timeout", type=float, default=2.0, help="seconds before a request counts as failed")
    args = p.parse_args(argv)
    if args.role == "server":
        with _Server((args.bind, args.port), _Handler) as srv:
            signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=srv.shutdown).start())
            try:
                srv.serve_forever(poll_interval=0.2)
            except KeyboardInterrupt:
                pass
        return 0
    sys.stdout.write(json.dumps(run_client(args.server, args.port, args.size, args.interval, args.timeout)) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
