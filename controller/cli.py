"""`gradfabric` subcommands of the control plane.

Exit codes: 0 success; 1 error (message on stderr: unreachable switch, refused write,
invalid policy or fabric); 3 for ``status`` when a switch is unreachable, not primary or
without the pipeline. ``routes`` and ``policy apply`` print how many updates they wrote
(0 when the fabric already matched).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from gradfabric.errors import GradfabricError

STATUS_NOT_READY = 3


def _add_fabric(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--fabric", type=Path, default=None, help="fabric description (default: build/fabric.json)")
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds to wait for each switch (default 5)")


def add_commands(sub: argparse._SubParsersAction) -> None:
    routes = sub.add_parser("routes", help="install base forwarding (routes, next hops, ECMP groups) on every switch")
    _add_fabric(routes)
    routes.add_argument("--dry-run", action="store_true", help="print the updates, write nothing")
    routes.set_defaults(handler=_routes)

    policy = sub.add_parser("policy", help="DLCP policies: apply a YAML file, show what switches hold")
    policy_sub = policy.add_subparsers(dest="policy_command", metavar="ACTION")
    policy_sub.required = True
    apply = policy_sub.add_parser("apply", help="validate FILE, then write only what differs, on all switches or none")
    apply.add_argument("file", type=Path)
    _add_fabric(apply)
    apply.add_argument("--dry-run", action="store_true", help="validate and print the updates, write nothing")
    apply.set_defaults(handler=_policy_apply)
    show_policy = policy_sub.add_parser("show", help="the policy entries every switch holds")
    _add_fabric(show_policy)
    show_policy.set_defaults(handler=_policy_show)

    show = sub.add_parser("show", help="entries of a switch's tables, in p4runtime-shell syntax")
    show.add_argument("switch")
    show.add_argument("table", nargs="?", help="table name or unique suffix (default: every table)")
    _add_fabric(show)
    show.set_defaults(handler=_show)

    counters = sub.add_parser("counters", help="per port and priority, drops by reason, spraying balance")
    _add_fabric(counters)
    counters.add_argument("--switch", action="append", help="only this switch (repeatable)")
    counters.add_argument("--watch", action="store_true", help="refresh, showing what changed since the last refresh")
    counters.add_argument("--interval", type=float, default=2.0, help="seconds between refreshes (default 2)")
    counters.add_argument("--count", type=int, default=0, help="with --watch: stop after N refreshes (0: until Ctrl-C)")
    counters.set_defaults(handler=_counters)

    shell = sub.add_parser("shell", help="open p4runtime-shell on a switch")
    shell.add_argument("switch")
    _add_fabric(shell)
    shell.set_defaults(handler=_shell)

    status = sub.add_parser("status", help="each switch: reachable, primary, pipeline loaded (exit 3 if not all)")
    _add_fabric(status)
    status.set_defaults(handler=_status)


# -- helpers ---------------------------------------------------------------------------------
def _fabric(args: argparse.Namespace):
    from gradfabric import fabric

    return fabric.load(args.fabric)


@contextmanager
def _controller(args: argparse.Namespace, *, load_pipeline: bool = True) -> Iterator:
    from controller.fabric_controller import FabricController
    from controller.pipeline import Pipeline

    fabric = _fabric(args)
    pipeline = Pipeline.load(fabric.path(fabric.program.p4info), fabric.path(fabric.program.device_config))
    controller = FabricController.for_fabric(fabric, pipeline, connect_timeout=args.timeout)
    for session in controller.sessions.values():
        session.load_pipeline = load_pipeline
        session.reconnect_timeout = args.timeout
    try:
        yield fabric, controller
    finally:
        controller.close()


def _print_result(what: str, result, schema, dry_run: bool) -> None:
    if dry_run:
        for name, updates in result.items():
            for u in updates:
                print(f"{name}: {u.describe(schema)}")
        total = sum(len(u) for u in result.values())
        print(f"{what}: {total} update(s) would be written (dry run)")
        return
    per_switch = ", ".join(f"{name} {len(u)}" for name, u in result.updates.items())
    if result.total == 0:
        print(f"{what}: every switch already up to date (0 updates)")
    else:
        print(f"{what}: {result.total} update(s) written ({per_switch})")


def _dry_run(controller, desired, tables) -> dict:
    from controller.diff import compute_diff

    plans = {}
    for name, entities in desired.items():
        session = controller[name]
        plans[name] = compute_diff(entities, session.snapshot(tables, entities), tables)
    return plans


def _write_or_plan(what: str, controller, desired, tables, schema, dry_run: bool) -> None:
    """Write ``desired`` (or, on a dry run, only compute the updates) and print the outcome."""
    result = _dry_run(controller, desired, tables) if dry_run else controller.apply(desired, tables)
    _print_result(what, result, schema, dry_run)


# -- handlers --------------------------------------------------------------------------------
def _routes(args: argparse.Namespace) -> int:
    from controller.routing import ROUTE_TABLES, route_entries

    with _controller(args) as (fabric, controller):
        schema = next(iter(controller.sessions.values())).schema
        _write_or_plan("routes", controller, route_entries(fabric, schema), ROUTE_TABLES, schema, args.dry_run)
    return 0


def _policy_apply(args: argparse.Namespace) -> int:
    from controller.policy import POLICY_TABLES, load_policy, policy_entries

    fabric = _fabric(args)
    policy = load_policy(args.file, hosts={h.name for h in fabric.hosts})
    with _controller(args) as (fabric, controller):
        schema = next(iter(controller.sessions.values())).schema
        entries = policy_entries(policy, schema)
        desired = {name: entries for name in controller.sessions}
        _write_or_plan("policy", controller, desired, POLICY_TABLES, schema, args.dry_run)
    return 0


def _policy_show(args: argparse.Namespace) -> int:
    from controller.policy import LAYER_PRIORITY, POLICY_TABLES, mechanisms_held

    with _controller(args, load_pipeline=False) as (fabric, controller):
        held = {}
        for name, session in controller.sessions.items():
            entries = session.read_entries(sorted(POLICY_TABLES))
            held[name] = (sorted(entries, key=_sort_key), [session.read_default(LAYER_PRIORITY)])
        first_name = next(iter(held))
        first, first_default = held[first_name]
        schema = controller[first_name].schema
        print(f"mechanisms on {first_name}, per job (each on or off by itself):")
        for job_id, state in mechanisms_held(first).items():
            print(f"  job {job_id}: " + "  ".join(f"{k}={v}" for k, v in state.items()))
        print(f"policy entries on {first_name} ({len(first)} entries and the default entry):")
        for e in first_default + first:
            print(f"  {e.text(schema)}")
        for name, (entries, default) in list(held.items())[1:]:
            same = entries == first and default == first_default
            verdict = f"same as {first_name}" if same else f"DIFFERS from {first_name}"
            print(f"{name}: {len(entries)} entries, {verdict}")
    return 0


def _sort_key(entry) -> tuple:
    return (entry.table, repr(entry.match), -entry.priority)


def _show(args: argparse.Namespace) -> int:
    with _controller(args, load_pipeline=False) as (fabric, controller):
        session = controller[args.switch]
        schema = session.schema
        tables = [schema.tables[args.table].name] if args.table else sorted(t.name for t in schema.tables)
        entries = session.read_entries(tables)
        for table in tables:
            rows = sorted((e for e in entries if e.table == table), key=_sort_key)
            print(f"{table}: {len(rows)} entries")
            for e in rows:
                print(f"  {e.text(schema)}")
    return 0


def _counters(args: argparse.Namespace) -> int:
    from rich.console import Console

    from controller.counters import gather, policy_jobs, render

    console = Console()
    with _controller(args, load_pipeline=False) as (fabric, controller):
        names = args.switch or list(controller.sessions)
        sessions = [controller[n] for n in names]
        # Read only the cells that can count: the switch's ports, the policy's jobs (all jobs without one).
        ports = {n: [p.port for p in fabric.switch(n).ports] for n in names}
        jobs = {s.name: policy_jobs(s) or None for s in sessions}

        def read_all() -> dict:
            return {s.name: gather(s, ports[s.name], jobs[s.name]) for s in sessions}

        previous = read_all()
        if not args.watch:
            for table in render(previous):
                console.print(table)
            return 0
        refreshes = 0
        while args.count == 0 or refreshes < args.count:
            time.sleep(args.interval)
            now = read_all()
            delta = {n: now[n].minus(previous[n]) for n in now}
            if console.is_terminal:
                console.clear()
            for table in render(delta, f" (last {args.interval:g} s)"):
                console.print(table)
            previous = now
            refreshes += 1
    return 0


def _shell(args: argparse.Namespace) -> int:
    from controller.arbitration import ElectionId

    fabric = _fabric(args)
    switch = fabric.switch(args.switch)
    election = ElectionId.new()
    argv = [
        sys.executable, "-m", "p4runtime_sh",
        "--grpc-addr", switch.grpc_addr,
        "--device-id", str(switch.device_id),
        "--election-id", f"{election.high},{election.low}",
    ]
    print(f"shell: {' '.join(argv[1:])}", file=sys.stderr)
    try:
        os.execv(sys.executable, argv)
    except OSError as exc:
        raise GradfabricError(f"cannot start p4runtime-shell: {exc.strerror}") from exc
    return 0  # not reached


def _status(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    with _controller(args, load_pipeline=False) as (fabric, controller):
        statuses = controller.status()
    table = Table(title=f"fabric {fabric.name}")
    for col in ("switch", "address", "reachable", "primary", "pipeline", "detail"):
        table.add_column(col)
    yes = {True: "yes", False: "NO"}
    for s in statuses:
        table.add_row(s.name, s.address, yes[s.reachable], yes[s.primary], yes[s.pipeline_loaded], s.detail)
    Console().print(table)
    if not any(s.reachable for s in statuses):
        # the description outlives the fabric: say so rather than leave a table of NOs
        from gradfabric.fabric import default_path

        print(f"status: no switch of {args.fabric or default_path()} answers; is the fabric up? "
              "(start it with `make run`)", file=sys.stderr)
    ready = all(s.reachable and s.primary and s.pipeline_loaded for s in statuses)
    return 0 if ready else STATUS_NOT_READY
