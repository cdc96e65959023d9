"""`make soak`: fuzzed P4Runtime RPCs and malformed frames against the embedded switch running
p4src/dlcp.p4, for a long time, counting crashes and watching memory.

    python -m tests.benchmarks.soak_p4runtime [--rpcs 100000] [--frames 1000000] [--seed 19]

A crash is an RPC answered INTERNAL (or not at all), a per-update INTERNAL error, a frame that
made the pipeline raise, or a server that stops answering. Memory is the process's resident
set (server and clients share the process), after a warm-up tenth and at the end.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

from tests.p4runtime_fuzz import FuzzBed, FuzzFailure, RpcFuzzer, malformed_frames


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rpcs", type=int, default=100_000)
    parser.add_argument("--frames", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=19)
    args = parser.parse_args(argv)
    failures: list[str] = []
    started = time.monotonic()
    with FuzzBed() as bed:
        fuzzer = RpcFuzzer(bed.channel, bed.DEVICE_ID, bed.config, args.seed)
        fuzzer.after_commit = bed.install_routes
        frames = malformed_frames(random.Random(args.seed))
        per_rpc, extra = divmod(args.frames, max(args.rpcs, 1))
        steps = max(args.rpcs, 1)
        warm_rss = rss_mb()
        peak = warm_rss
        sent_frames = 0
        for i in range(steps):
            if i < args.rpcs:
                try:
                    fuzzer.one()
                except FuzzFailure as exc:
                    failures.append(str(exc))
            for _ in range(per_rpc + (1 if i < extra else 0)):
                bed.frame(*next(frames))
                sent_frames += 1
            if (i + 1) % max(steps // 20, 1) == 0:
                now = rss_mb()
                peak = max(peak, now)
                if i + 1 <= max(steps // 10, 1):
                    warm_rss = now  # the warm-up tenth
                print(f"soak: {i + 1}/{args.rpcs} RPCs, {sent_frames} frames, RSS {now:.0f} MB, "
                      f"{len(failures)} failure(s), {time.monotonic() - started:.0f} s", flush=True)
        try:
            bed.check_alive()
        except (FuzzFailure, Exception) as exc:  # noqa: BLE001 - a dead server is a failure to report
            failures.append(f"server not alive at the end: {exc}")
        pipeline_errors = bed.pipeline_errors
        end_rss = rss_mb()
        stats = dict(bed.datapath.stats)
        dropped = bed.server.servicer.packet_ins_dropped
    elapsed = time.monotonic() - started
    crashes = len(failures) + pipeline_errors
    print()
    print(f"| command | `python -m tests.benchmarks.soak_p4runtime --rpcs {args.rpcs} --frames {args.frames} "
          f"--seed {args.seed}` |")
    print("|---|---|")
    print(f"| fuzzed RPCs | {args.rpcs} ({sum(v for k, v in fuzzer.outcomes.items() if not k.startswith('StreamChannel '))} "
          f"unary answers, {sum(v for k, v in fuzzer.outcomes.items() if k.startswith('StreamChannel '))} stream events) |")
    print(f"| malformed frames | {sent_frames} (packet path: {stats}) |")
    print(f"| PacketIn dropped for the client that does not read | {dropped} |")
    print(f"| crashes (INTERNAL, pipeline errors, dead server) | {crashes} |")
    print(f"| RSS after warm-up / at the end / peak | {warm_rss:.0f} / {end_rss:.0f} / {max(peak, end_rss):.0f} MB |")
    print(f"| time | {elapsed:.0f} s |")
    print()
    print("outcomes:", ", ".join(f"{k} {v}" for k, v in sorted(fuzzer.outcomes.items())))
    for failure in failures[:20]:
        print("FAILURE:", failure)
    return 1 if crashes else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
