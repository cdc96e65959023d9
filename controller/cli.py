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
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from gradfabric.errors import GradfabricError

STATUS_NOT_READY = 3


def _add_fabric(parser: argparse.ArgumentParser, timeout: float = 5.0) -> None:
    parser.add_argument("--fabric", type=Path, default=None, help="fabric description (default: build/fabric.json)")
    parser.add_argument("--timeout", type=float, default=timeout,
                        help=f"seconds to wait for each switch (default {timeout:g})")


def add_commands(sub: argparse._SubParsersAction) -> None:
    routes = sub.add_parser("routes", help="install base forwarding (routes, next hops, ECMP groups) on every switch")
    _add_fabric(routes)
    routes.add_argument("--dry-run", action="store_true", help="print the updates, write nothing")
    routes.set_defaults(handler=_routes)

    policy = sub.add_parser("policy", help="DLCP policies: apply a YAML file, show what switches hold")
    policy_sub = policy.add_subparsers(dest="policy_command", metavar="ACTION")
    policy_sub.required = True
    apply = policy_sub.add_parser("apply", help="validate FILE, then write only what differs, on all switches or none")
    apply.add_argument("file", type=Path, help="policy YAML (format: controller/README.md)")
    _add_fabric(apply)
    apply.add_argument("--dry-run", action="store_true", help="validate and print the updates, write nothing")
    apply.set_defaults(handler=_policy_apply)
    show_policy = policy_sub.add_parser("show", help="the policy entries every switch holds")
    _add_fabric(show_policy, timeout=2.0)
    show_policy.set_defaults(handler=_policy_show)
    render = policy_sub.add_parser("render", help="FILE as configuration of a commodity switch or Linux host (stdout)")
    render.add_argument("file", type=Path, help="policy YAML")
    render.add_argument("--for", dest="target", choices=("sonic", "linux"), required=True,
                        help="sonic: config_db.json fragment; linux: tc script (sh SCRIPT DEV [RATE])")
    render.add_argument("--ports", default=None,
                        help="sonic: comma-separated port names (default Ethernet0,Ethernet4,...,Ethernet60)")
    render.add_argument("--packet-bytes", type=int, default=None,
                        help="bytes per packet for thresholds given in packets (default 1500)")
    render.add_argument("--out", type=Path, default=None, help="write here instead of stdout")
    render.set_defaults(handler=_policy_render)

    show = sub.add_parser("show", help="entries of a switch's tables, in p4runtime-shell syntax")
    show.add_argument("switch", help="switch name, as in the fabric description")
    show.add_argument("table", nargs="?", help="table name or unique suffix (default: every table)")
    _add_fabric(show, timeout=2.0)
    show.set_defaults(handler=_show)

    from controller import counters_cli

    counters_cli.add_command(sub, _add_fabric, _controller)

    shell = sub.add_parser("shell", help="open p4runtime-shell on a switch")
    shell.add_argument("switch", help="switch name, as in the fabric description")
    _add_fabric(shell)
    shell.set_defaults(handler=_shell)

    status = sub.add_parser("status", help="each switch: reachable, primary, pipeline loaded (exit 3 if not all)")
    _add_fabric(status, timeout=2.0)
    status.set_defaults(handler=_status)


def run(argv: Sequence[str]) -> int:
    """Run one of these subcommands in this process (``["routes", "--fabric", F]``) and return
    its exit code; a failure raises its :class:`GradfabricError`. For the parts below the
    ``gradfabric`` command (the fabric launcher, experiments), which must not import it."""
    parser = argparse.ArgumentParser(prog="gradfabric")
    add_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(list(argv))
    return int(args.handler(args) or 0)


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
    for line in result.restored:
        print(line)


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
    from controller.policy import LAYER_PRIORITY, POLICY_TABLES, PROFILE, describe_held

    def read(session) -> tuple[list, list] | str:
        try:
            entries = session.read_entries(sorted(POLICY_TABLES))
            return sorted(entries, key=_sort_key), [session.read_default(PROFILE), session.read_default(LAYER_PRIORITY)]
        except GradfabricError as exc:
            return str(exc)

    with _controller(args, load_pipeline=False) as (fabric, controller):
        held = dict(zip(controller.sessions, controller.each(read)))
        answered = {name: got for name, got in held.items() if not isinstance(got, str)}
        if answered:
            first_name = next(iter(answered))
            first, first_default = answered[first_name]
            schema = controller[first_name].schema
            print(f"mechanisms on {first_name}, per job (each on or off by itself):")
            for line in describe_held(first, first_default[0]):
                print(line)
            print(f"policy entries on {first_name} ({len(first)} entries and the default entries):")
            for e in first_default + first:
                print(f"  {e.text(schema)}")
        for name, got in held.items():
            if isinstance(got, str):
                print(f"{name}: UNREACHABLE ({got})")
            elif name != first_name:
                entries, default = got
                same = entries == first and default == first_default
                verdict = f"same as {first_name}" if same else f"DIFFERS from {first_name}"
                print(f"{name}: {len(entries)} entries, {verdict}")
    return 0 if len(answered) == len(held) else 1


def _policy_render(args: argparse.Namespace) -> int:
    from controller.policy import load_policy
    from controller.render import PACKET_BYTES

    policy = load_policy(args.file)
    size = args.packet_bytes or PACKET_BYTES
    if size < 64:
        raise GradfabricError(f"policy render: --packet-bytes must be at least 64, got {size}")
    if args.target == "sonic":
        from controller.render.sonic import DEFAULT_PORTS, render_sonic

        ports = tuple(p.strip() for p in args.ports.split(",") if p.strip()) if args.ports else DEFAULT_PORTS
        rendered = render_sonic(policy, ports, size)
    else:
        from controller.render.linux import render_linux

        rendered = render_linux(policy, size)
    for note in rendered.notes:
        print(f"note: {note}", file=sys.stderr)
    if args.out is None:
        sys.stdout.write(rendered.text)
    else:
        args.out.write_text(rendered.text)
        print(f"policy render: wrote {args.out}", file=sys.stderr)
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
            default = session.read_default(table)
            print(f"{table}: {len(rows)} entries and the default entry")
            for e in [default, *rows]:
                print(f"  {e.text(schema)}")
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
    from rich.table import Table

    from gradfabric.console import console

    with _controller(args, load_pipeline=False) as (fabric, controller):
        statuses = controller.status()
    table = Table(title=f"fabric {fabric.name}")
    for col in ("switch", "address", "reachable", "primary", "pipeline", "detail"):
        table.add_column(col)
    yes = {True: "yes", False: "NO"}
    for s in statuses:
        table.add_row(s.name, s.address, yes[s.reachable], yes[s.primary], yes[s.pipeline_loaded], s.detail)
    console().print(table)
    if not any(s.reachable for s in statuses):
        # the description outlives the fabric: say so rather than leave a table of NOs
        from gradfabric.fabric import default_path

        print(f"status: no switch of {args.fabric or default_path()} answers; is the fabric up? "
              "(start it with `make run`)", file=sys.stderr)
    ready = all(s.reachable and s.primary and s.pipeline_loaded for s in statuses)
    return 0 if ready else STATUS_NOT_READY
