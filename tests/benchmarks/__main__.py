"""`make bench`: run every benchmark module and print its figures.

A benchmark module in this folder is named ``bench_*.py`` and exposes
``run() -> list[Figure]``. Each figure is a measurement *and* the baseline measured in the
same run, so the ratio is what to read: absolute numbers depend on the machine.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from pathlib import Path

from tests.benchmarks.figure import Figure, print_table


def main(argv: list[str]) -> int:
    """Run the benchmarks named in `argv` (``transport`` for ``bench_transport``), or all of them."""
    here = Path(__file__).parent
    figures: list[Figure] = []
    names = sorted(m.name for m in pkgutil.iter_modules([str(here)]) if m.name.startswith("bench_"))
    known = [n.removeprefix("bench_") for n in names]
    if any(a in ("-h", "--help") for a in argv):
        print(f"usage: python -m tests.benchmarks [NAME ...]\nNAME is one of: {', '.join(known)} (default: all)")
        return 0
    unknown = [a for a in argv if a not in known]
    if unknown:
        print(f"bench: no benchmark named {', '.join(map(repr, unknown))}; known: {', '.join(known)}",
              file=sys.stderr)
        return 2
    wanted = set(argv)
    if not names:
        print("bench: no benchmark modules yet")
        return 0
    for name in names:
        if wanted and name.removeprefix("bench_") not in wanted:
            continue
        print(f"bench: {name} ...", flush=True)
        module = importlib.import_module(f"tests.benchmarks.{name}")
        figures.extend(module.run())
    print_table(figures)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
