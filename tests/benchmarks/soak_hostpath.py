"""A parameter-server incast through the hosts' C data path, for a long time, to catch crashes.

    python -m tests.benchmarks.soak_hostpath [--iterations 60] [--workers 4] [--keyed]
        [--no-gso] [--count 367]

One server and `--workers` workers on loopback, each worker pushing twelve tensors of a
ResNet-like mix of sizes (1 to 10^6 elements) from the endpoint's sender threads and pulling
the answers from one thread per tensor, as the trace ranks do. `--keyed` adds a job key and
per-packet TOS marking (``commodity``), `--no-gso` sends one datagram per packet as on a real
link. A crash ends the process; anything else wrong (a pull missing, a sum off) is reported
and exits 1. Meant to run with the C built under AddressSanitizer and UBSan::

    GRADFABRIC_FASTPATH_SANITIZE=1 ASAN_OPTIONS=detect_leaks=0:halt_on_error=1 \\
        LD_PRELOAD=$(gcc -print-file-name=libasan.so) .venv/bin/python -m tests.benchmarks.soak_hostpath
"""

from __future__ import annotations

import argparse
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from hosts.endpoint import Endpoint
from hosts.fastpath import native
from hosts.ps import PS_WORKER_ID, ParameterServer, PsClient
from hosts.wire import MsgType

SIZES = dict(enumerate([100, 2_000, 64, 300_000, 9_408, 1_000_000, 4_096, 147_456, 512, 37, 589_824, 1]))


def _grad(worker: int, iteration: int, tensor: int) -> np.ndarray:
    return np.random.default_rng((worker, iteration, tensor)).normal(size=SIZES[tensor]).astype(np.float32)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iterations", type=int, default=60)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--keyed", action="store_true", help="a job key and per-packet TOS marking")
    ap.add_argument("--no-gso", action="store_true", help="one datagram per packet")
    ap.add_argument("--count", type=int, default=367, help="values per packet")
    args = ap.parse_args(argv)
    if native() is None:
        print("the C data path cannot be built or loaded here (hosts.fastpath log)")
        return 1
    opts: dict[str, Any] = {"count": args.count, "bounds": {MsgType.GRADIENT: 0.0, MsgType.PARAMETER: 0.0}}
    if args.keyed:
        opts.update(key=b"soak" * 8, marking="commodity")
    ends = [Endpoint(worker_id=PS_WORKER_ID, **opts)] + [Endpoint(worker_id=w, **opts) for w in range(args.workers)]
    if args.no_gso:
        for e in ends:
            if e._tx is not None:
                e._tx.gso_ok = False
    server, workers = ends[0], ends[1:]
    ps = ParameterServer(server, args.workers, update="sum")
    clients = [PsClient(e, server.address) for e in workers]
    bad = 0

    def worker_round(w: int, it: int) -> dict[int, np.ndarray]:
        futures = [clients[w].push_async(it, t, _grad(w, it, t), num_layers=len(SIZES)) for t in sorted(SIZES)[::-1]]
        got: dict[int, np.ndarray] = {}

        def pull(t: int) -> None:
            got[t] = clients[w].pull(it, t, timeout=120).values

        pullers = [threading.Thread(target=pull, args=(t,), daemon=True) for t in SIZES]
        for p in pullers:
            p.start()
        for f in futures:
            f.result(timeout=300)
        for p in pullers:
            p.join(300)
        return got

    started = time.monotonic()
    try:
        with ThreadPoolExecutor(args.workers + 1) as pool:
            for it in range(args.iterations):
                served = pool.submit(ps.serve_iteration, it, list(SIZES), timeout=120)
                results = [f.result(timeout=600) for f in [pool.submit(worker_round, w, it)
                                                           for w in range(args.workers)]]
                served.result(timeout=600)
                for t in SIZES:
                    want = np.sum([_grad(w, it, t) for w in range(args.workers)], axis=0, dtype=np.float64)
                    for got in results:
                        if t not in got or not np.allclose(got[t], want, rtol=1e-4, atol=1e-4):
                            bad += 1
                print(f"iteration {it + 1}/{args.iterations}: {bad} wrong pulls so far, "
                      f"{time.monotonic() - started:.1f} s", flush=True)
    finally:
        for e in ends:
            e.close()
    print(f"{args.iterations} iterations, {args.workers} workers, {len(SIZES)} tensors: {bad} wrong pulls")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
