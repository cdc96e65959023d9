"""A trace sweep stopped by its stopping rule, continued in a new folder (experiments/README.md).

:func:`continue_plan` writes into a new folder a ``plan.json`` holding the rounds a stopped
sweep did not complete: the same settings, configurations, seeds (``2000 + r``), rotation and
code fingerprint, each run keeping its round number. `gradfabric experiment trace --resume NEW`
then runs those rounds (the sweep refuses code other than the plan's), and the two folders'
records pool as distinct rounds, one pair per round (:func:`experiments.trace_report.summarize`).
"""

from __future__ import annotations

import argparse
import json
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from experiments.errors import ExperimentError

#: plan.json keys that belong to the invocation that wrote them, not to the plan
_OWN = ("started", "load_at_start", "elapsed_s", "load_at_end", "stopped", "resumed", "extended", "topology")


def continue_plan(src: Path, dst: Path, now: datetime | None = None) -> dict[str, Any]:
    """Write ``dst/plan.json``: the runs of ``src``'s plan in rounds from its completed count on.

    Raises ExperimentError when ``src`` was not stopped by its stopping rule, has nothing left,
    or ``dst`` already holds a plan."""
    meta = json.loads((src / "plan.json").read_text())
    stopped = meta.get("stopped")
    if not stopped:
        raise ExperimentError(f"{src}: plan.json has no 'stopped' (the sweep was not ended by its stopping rule)")
    done = int(stopped["rounds_completed"])
    runs = [r for r in meta["runs"] if r["repetition"] >= done]
    if not runs:
        raise ExperimentError(f"{src}: all {done} planned rounds completed; nothing to continue")
    if (dst / "plan.json").exists():
        raise ExperimentError(f"{dst}: already holds a plan.json")
    when = (now or datetime.now(timezone.utc)).strftime("%Y-%m-%d %H:%M:%S UTC")
    new = {k: v for k, v in meta.items() if k not in _OWN}
    new.update(runs=runs, started=when, load_at_start=[round(x, 2) for x in os.getloadavg()],
               continues={"folder": str(src), "rounds_there": done, "first_round_here": done})
    dst.mkdir(parents=True, exist_ok=True)
    (dst / "plan.json").write_text(json.dumps(new, indent=1) + "\n")
    return new


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.trace_continue", description=__doc__.splitlines()[0])
    p.add_argument("src", type=Path, help="a sweep folder ended by its stopping rule")
    p.add_argument("dst", type=Path, help="the new folder (then: gradfabric experiment trace --resume DST)")
    args = p.parse_args(argv)
    new = continue_plan(args.src, args.dst)
    rounds = sorted({r["repetition"] for r in new["runs"]})
    print(f"{args.dst}/plan.json: {len(new['runs'])} runs, rounds {rounds[0]}-{rounds[-1]} of {args.src}'s plan")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
