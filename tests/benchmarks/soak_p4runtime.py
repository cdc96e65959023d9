"""`make soak`: fuzzed P4Runtime RPCs and malformed frames against the embedded switch running
p4src/dlcp.p4, for a long time, counting crashes and watching memory; then the control-plane
differential (native vs Python datapath) and malformed frames through the native datapath.

    python -m tests.benchmarks.soak_p4runtime [--rpcs 100000] [--frames 1000000] [--seed 19]
        [--cp-writes 100000] [--native-frames 200000]

A crash is an RPC answered INTERNAL (or not at all), a per-update INTERNAL error, a frame that
made the pipeline raise, or a server that stops answering. Memory is the process's resident
set (server and clients share the process), after a warm-up tenth and at the end. The
control-plane differential (tests/p4runtime_differential.py) writes `--cp-writes` updates to
the IPv4 router and to the DLCP program, with packets between them; a mismatch is any
difference in an update's status, a packet out or the final state. Native frames: malformed
frames through the native and the Python pipeline running DLCP with routes; a mismatch is
any difference in what leaves. `make soak SANITIZE=1` runs this with the native runtime
built with AddressSanitizer and UBSan (p4switch/native/build.py).
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

from tests.p4runtime_fuzz import FuzzBed, FuzzFailure, RpcFuzzer, malformed_frames

RANDOM_ACTIONS = frozenset({"DlcpIngress.spray_random"})  # each datapath draws its own numbers


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
    parser.add_argument("--cp-writes", type=int, default=100_000,
                        help="control-plane writes per program, native vs Python (0: skip)")
    parser.add_argument("--native-frames", type=int, default=200_000,
                        help="malformed frames through the native datapath, compared with Python (0: skip)")
    args = parser.parse_args(argv)
    mismatches = control_plane(args.cp_writes, args.seed) if args.cp_writes else 0
    mismatches += native_frames(args.native_frames, args.seed) if args.native_frames else 0
    if not args.rpcs and not args.frames:
        return 1 if mismatches else 0
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
    return 1 if crashes or mismatches else 0


def control_plane(writes: int, seed: int) -> int:
    """The control-plane differential on the IPv4 router and DLCP; the mismatch count."""
    from gradfabric.paths import P4SRC, ROOT
    from p4switch.frontend import load_program
    from tests.p4runtime_differential import Report, pair, run

    total = 0
    for name, path in (("IPv4 router", ROOT / "tests" / "p4programs" / "ipv4_router.p4"),
                       ("DLCP", P4SRC / "dlcp.p4")):
        started = time.monotonic()
        python, native, info = pair(load_program(path))

        def progress(done: int, report: Report, name: str = name) -> None:
            if done % 10_000 == 0:
                print(f"soak: {name}: {done}/{writes} control-plane writes, "
                      f"{len(report.mismatches)} mismatch(es), {time.monotonic() - started:.0f} s", flush=True)

        report = run(python, native, info, writes, seed, progress=progress, exclude_actions=RANDOM_ACTIONS)
        total += len(report.mismatches)
        print(f"| control-plane writes, {name} | {report.writes} ({dict(sorted(report.statuses.items()))} "
              f"by status code), {report.packets} packets, {report.frames_out} out: "
              f"**{len(report.mismatches)} mismatch(es)** native vs Python, {time.monotonic() - started:.0f} s |")
        for line in report.mismatches[:5]:
            print("MISMATCH:", line)
    return total


def native_frames(count: int, seed: int) -> int:
    """Malformed frames through the native and Python pipelines running DLCP with routes to
    ports 1..3 and the CPU port; the number of frames whose outputs differ."""
    from gradfabric.paths import P4SRC
    from p4switch.frontend import load_program
    from tests.p4runtime_differential import INSERT, pair, table_update

    python, native, info = pair(load_program(P4SRC / "dlcp.p4"))
    for prefix, length, port in ((0x0A000100, 24, 1), (0x0A000200, 24, 2), (0x0A000300, 24, 3),
                                 (0x0A000000, 8, FuzzBed.CPU_PORT)):
        data = table_update(info, INSERT, "DlcpIngress.ipv4_lpm", {"hdr.ipv4.dstAddr": (prefix, length)},
                            "DlcpIngress.set_nhop", (port, 0x0A, 0x0B))
        assert python.write(data)[0] == 0 and native.write(data)[0] == 0
    frames = malformed_frames(random.Random(seed))
    started, differ, sent = time.monotonic(), 0, 0
    for i in range(count):
        frame, port = next(frames)
        out_py, out_nat = python.send(frame, port, i), native.send(frame, port, i)
        sent += len(out_nat) if isinstance(out_nat, list) else 0
        if out_py != out_nat:
            differ += 1
            if differ <= 5:
                print(f"MISMATCH: frame {i} in port {port} {frame.hex()}: python {out_py}, native {out_nat}")
        if (i + 1) % 50_000 == 0:
            print(f"soak: {i + 1}/{count} native frames, {differ} mismatch(es), "
                  f"{time.monotonic() - started:.0f} s", flush=True)
    print(f"| malformed frames, native vs Python (DLCP) | {count} ({sent} out): **{differ} mismatch(es)**, "
          f"{time.monotonic() - started:.0f} s, RSS {rss_mb():.0f} MB |")
    return differ


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
