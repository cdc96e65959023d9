"""`gradfabric counters`: the fabric's counters as tables or JSON, now, since a snapshot, or live.

For measuring a phase: ``gradfabric counters --json > before.json``, run the phase, then
``gradfabric counters --since before.json [--json]`` prints what each counter added in between.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from gradfabric.errors import GradfabricError

#: Opens the fabric's controller for parsed arguments: yields (fabric, controller).
OpenController = Callable[..., AbstractContextManager[tuple[Any, Any]]]
#: The first key of a snapshot: what wrote it and in which format.
FORMAT = "gradfabric-counters/1"


def add_command(sub: argparse._SubParsersAction, add_fabric: Callable[..., None], open_controller: OpenController) -> None:
    counters = sub.add_parser("counters", help="per port and priority, drops by reason, spraying balance, per job")
    add_fabric(counters, timeout=2.0)
    counters.add_argument("--switch", action="append", help="only this switch (repeatable)")
    counters.add_argument("--json", action="store_true",
                          help="one JSON document on stdout (a snapshot for --since); with --watch one a line")
    counters.add_argument("--since", type=Path, default=None, metavar="SNAPSHOT",
                          help="show what each counter added since SNAPSHOT (the output of --json)")
    counters.add_argument("--watch", action="store_true", help="refresh, showing what changed since the last refresh")
    counters.add_argument("--interval", type=float, default=2.0, help="seconds between refreshes (default 2)")
    counters.add_argument("--count", type=int, default=0, help="with --watch: stop after N refreshes (0: until Ctrl-C)")
    counters.set_defaults(handler=lambda args: show(args, open_controller))


def load_snapshot(path: Path) -> dict[str, Any]:
    """A snapshot written by ``counters --json``, checked enough to subtract from."""
    from controller.counters import from_json

    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise GradfabricError(f"cannot read counters snapshot {path}: {exc.strerror}") from exc
    except ValueError as exc:
        raise GradfabricError(f"{path}: not JSON ({exc})") from exc
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise GradfabricError(f"{path}: not a snapshot of `gradfabric counters --json` (format {FORMAT} expected)")
    data["counters"] = {name: from_json(sw, f"{path}: switches.{name}") for name, sw in data["switches"].items()}
    return data


def document(counters: dict, unreachable: dict[str, str], fabric: Any, notes: list[str],
             since: dict[str, Any] | None = None, seconds: float | None = None) -> dict[str, Any]:
    from controller.counters import to_json

    now = datetime.now(timezone.utc)
    doc: dict[str, Any] = {
        "format": FORMAT, "fabric": fabric.name, "target": fabric.target,
        "taken_at": now.isoformat(timespec="milliseconds"), "taken_at_unix": now.timestamp(),
        "switches": {name: to_json(c) for name, c in counters.items()},
        "unreachable": unreachable, "notes": notes,
    }
    if since is not None:
        doc["since"] = {"snapshot": since["path"], "taken_at": since["taken_at"], "seconds": round(seconds or 0.0, 3)}
    if seconds is not None and since is None:
        doc["interval_s"] = seconds
    return doc


def show(args: argparse.Namespace, open_controller: OpenController) -> int:
    from rich.console import Group
    from rich.live import Live
    from rich.text import Text

    from controller.counters import drop_reason_names, gather, policy_jobs, render
    from gradfabric.console import console as make_console

    if args.since is not None and args.watch:
        raise GradfabricError("--since and --watch do not go together: --watch shows changes since its last refresh")
    snapshot = load_snapshot(args.since) if args.since is not None else None
    console = make_console()
    with open_controller(args, load_pipeline=False) as (fabric, controller):
        names = args.switch or list(controller.sessions)
        for n in names:
            controller[n]  # an unknown name is an error before anything is read
        source = fabric.path(fabric.program.source) if fabric.program.source else None
        reasons = drop_reason_names(source if source is not None and source.is_file() else None)
        # Read only the cells that can count: the switch's ports, the policy's jobs (all jobs without one).
        ports = {n: [p.port for p in fabric.switch(n).ports] for n in names}
        jobs: dict[str, list[int] | None] = {}
        unreachable: dict[str, str] = {}
        notes = []
        if fabric.target == "bmv2":
            from controller.counters import BMV2_QUEUE_NOTE

            notes.append(BMV2_QUEUE_NOTE)

        def read(session) -> object:
            try:
                if session.name not in jobs:
                    jobs[session.name] = policy_jobs(session) or None
                return gather(session, ports[session.name], jobs[session.name],
                              with_queue_drops=fabric.target == "embedded", reasons=reasons)
            except GradfabricError as exc:
                return str(exc)

        def read_all() -> dict:
            got = dict(zip(names, controller.each(read, names)))
            unreachable.clear()
            unreachable.update({n: v for n, v in got.items() if isinstance(v, str)})
            return {n: v for n, v in got.items() if not isinstance(v, str)}

        def problems() -> list[Text]:
            return [Text(f"{n}: UNREACHABLE ({why})", style="bold red") for n, why in unreachable.items()]

        previous = read_all()
        if snapshot is not None:
            seconds = time.time() - float(snapshot.get("taken_at_unix", time.time()))
            before = snapshot["counters"]
            missing = [n for n in previous if n not in before]
            if missing:
                notes.append(f"not in the snapshot, shown since they started: {', '.join(missing)}")
            previous = {n: c.minus(before[n]) if n in before else c for n, c in previous.items()}
            backwards = [n for n, c in previous.items() if c.went_backwards()]
            if backwards:
                notes.append(f"counters went backwards since the snapshot on {', '.join(backwards)} "
                             "(switch restarted?): their differences mean nothing")
            since = {"path": str(args.since), "taken_at": snapshot.get("taken_at")}
            if args.json:
                print(json.dumps(document(previous, unreachable, fabric, notes, since, seconds), indent=2))
                return 1 if unreachable else 0
            for note in notes:
                console.print(Text(note, style="dim"))
            console.print(f"counters: differences since {args.since} (taken at {since['taken_at']}, "
                          f"{seconds:,.1f} s before this reading)", soft_wrap=True)
            for item in [*render(previous, " (since the snapshot)"), *problems()]:
                console.print(item)
            if not any(previous.values()) and not unreachable:
                console.print(f"counters: nothing counted since {args.since}")
            return 1 if unreachable else 0
        if args.json and not args.watch:
            print(json.dumps(document(previous, unreachable, fabric, notes), indent=2))
            return 1 if unreachable else 0
        if not args.json:
            for note in notes:
                console.print(Text(note, style="dim"))
        if not args.watch:
            for item in [*render(previous), *problems()]:
                console.print(item)
            if not any(previous.values()) and not unreachable:
                console.print("counters: every counter is zero")
            return 1 if unreachable else 0

        def frame(delta: dict, refreshes: int) -> Group:
            tables = render(delta, f" (per second, last {args.interval:g} s)", per_second=args.interval)
            body = tables or [Text(f"no traffic in the last {args.interval:g} s")]
            stamp = Text(f"refresh {refreshes} at {time.strftime('%H:%M:%S')}", style="dim")
            return Group(stamp, *body, *problems())

        refreshes = 0
        live = None
        if console.is_terminal and not args.json:
            live = Live(console=console, auto_refresh=False, transient=False)
        with live if live is not None else _nothing():
            while args.count == 0 or refreshes < args.count:
                time.sleep(args.interval)
                now = read_all()
                delta = {n: now[n].minus(previous[n]) if n in previous else now[n] for n in now}
                refreshes += 1
                if args.json:  # one document a line: what each counter added in the interval
                    print(json.dumps(document(delta, unreachable, fabric, notes, seconds=args.interval)), flush=True)
                elif live is not None:
                    live.update(frame(delta, refreshes), refresh=True)
                else:  # piped: one frame after another
                    console.print(frame(delta, refreshes))
                previous = now
    return 1 if unreachable else 0


@contextmanager
def _nothing() -> Iterator[None]:
    yield
