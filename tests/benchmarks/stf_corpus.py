"""p4c's v1model BMv2 STF corpus through p4switch: the Python pipeline and NativePipeline.

    python -m tests.benchmarks.stf_corpus --corpus DIR [--jobs 2] [--only NAME...] [--json OUT]

DIR is p4c's ``testdata/p4_16_samples`` (of p4c 1.2.4.17 for the figures in
p4switch/README.md, e.g. ``git archive v1.2.4.17 testdata`` of p4lang/p4c). The corpus is
every ``*-bmv2.stf`` whose program includes ``v1model.p4`` (185 files in 1.2.4.17). Each
program runs in a child process (60 s at most) on both datapaths; per datapath a file
passes, fails (a wrong output), is refused (the front end rejects the program), falls back
(natively: the C backend does not cover a construct, with the reason) or errors.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

TIMEOUT = 60.0


def corpus(folder: Path) -> list[Path]:
    """The v1model BMv2 STF files of a p4c testdata folder."""
    found = []
    for stf in sorted(folder.glob("*-bmv2.stf")):
        program = stf.with_suffix(".p4")
        if program.exists() and "v1model.p4" in program.read_text(errors="replace"):
            found.append(stf)
    return found


def _one(stf: Path) -> dict[str, Any]:
    from p4switch.frontend import load_program
    from p4switch.native.cgen_expr import NativeUnsupported
    from p4switch.native.pipeline import NativePipeline
    from p4switch.pipeline import Pipeline
    from p4switch.stf import run_stf

    text = stf.read_text(errors="replace")
    result: dict[str, Any] = {"name": stf.stem}
    try:
        program = load_program(stf.with_suffix(".p4"))
    except Exception as exc:  # noqa: BLE001 - every refusal is a result
        result["python"] = result["native"] = "refused"
        result["reason"] = f"{type(exc).__name__}: {str(exc)[:200]}"
        return result
    for side, make in (("python", lambda: Pipeline(program)), ("native", lambda: NativePipeline(program))):
        try:
            pipe = make()
        except NativeUnsupported as exc:
            result[side], result["native_reason"] = "fallback", str(exc)[:200]
            continue
        except Exception as exc:  # noqa: BLE001
            result[side], result[f"{side}_reason"] = "refused", f"{type(exc).__name__}: {str(exc)[:200]}"
            continue
        try:
            outcome = run_stf(pipe, text)
            result[side] = "pass" if outcome.ok else "fail"
            if not outcome.ok:
                result[f"{side}_reason"] = str(outcome.failures)[:300]
        except Exception as exc:  # noqa: BLE001
            result[side], result[f"{side}_reason"] = "error", f"{type(exc).__name__}: {str(exc)[:200]}"
    return result


def _child(stf: Path, out: Any) -> None:
    out.put(_one(stf))


def run_all(files: list[Path], jobs: int, progress: bool = True) -> list[dict[str, Any]]:
    ctx = multiprocessing.get_context("fork")
    results: list[dict[str, Any]] = []
    pending = list(files)
    running: list[tuple[Any, Any, Path, float]] = []
    while pending or running:
        while pending and len(running) < jobs:
            stf = pending.pop(0)
            queue = ctx.Queue()
            proc = ctx.Process(target=_child, args=(stf, queue))
            proc.start()
            running.append((proc, queue, stf, time.monotonic()))
        for item in list(running):
            proc, queue, stf, started = item
            if not queue.empty():
                results.append(queue.get())
            elif proc.is_alive() and time.monotonic() - started < TIMEOUT:
                continue
            elif proc.is_alive():
                proc.kill()
                results.append({"name": stf.stem, "python": "error", "native": "error", "reason": "timeout"})
            else:
                proc.join(1)
                if queue.empty():
                    results.append({"name": stf.stem, "python": "error", "native": "error",
                                    "reason": f"child exited {proc.exitcode}"})
                else:
                    results.append(queue.get())
            proc.join(1)
            running.remove(item)
            if progress:
                print(f"corpus: {len(results)}/{len(files)} {results[-1]['name']}: python {results[-1]['python']}, "
                      f"native {results[-1]['native']}", flush=True)
        time.sleep(0.02)
    return sorted(results, key=lambda r: r["name"])


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, required=True, help="p4c's testdata/p4_16_samples")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--only", nargs="*", default=None, help="file stems to run")
    parser.add_argument("--json", type=Path, default=None, help="write every result here")
    args = parser.parse_args(argv)
    files = corpus(args.corpus)
    if args.only:
        files = [f for f in files if f.stem in set(args.only)]
    results = run_all(files, args.jobs)
    for side in ("python", "native"):
        counts = Counter(r[side] for r in results)
        print(f"{side}: {len(results)} files: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    for r in results:
        if r["native"] != "pass" or r["python"] != "pass":
            reason = r.get("native_reason") or r.get("python_reason") or r.get("reason", "")
            print(f"  {r['name']}: python {r['python']}, native {r['native']}: {reason}")
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
