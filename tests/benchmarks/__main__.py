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
    wanted = set(argv)
    here = Path(__file__).parent
    figures: list[Figure] = []
    names = sorted(m.name for m in pkgutil.iter_modules([str(here)]) if m.name.startswith("bench_"))
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
