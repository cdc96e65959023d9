"""`gradfabric run` and `gradfabric stop`: boot and tear down the emulated fabric.

Thin on purpose: the topologies, the launcher and the cleanup live in ``mininet_topos``.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from gradfabric import paths
from gradfabric.errors import GradfabricError


def add_commands(sub: argparse._SubParsersAction) -> None:
    run = sub.add_parser("run", help="boot the emulated fabric (Mininet + P4 switches)")
    run.add_argument("--topo", default="leafspine",
                     help="topology name (leafspine, dumbbell, fattree) or YAML file")
    run.add_argument("--target", choices=("embedded", "bmv2"), default="embedded",
                     help="switch target: the embedded p4switch, or BMv2's simple_switch_grpc")
    run.add_argument("--no-cli", action="store_true",
                     help="run the scenario (default: pingall, exit 1 on any loss) and exit")
    run.add_argument("--scenario", type=Path, default=None,
                     help="run these Mininet CLI commands (one a line) instead of the CLI, then exit")
    run.add_argument("--pcap", action="store_true", help="capture every switch port into pcaps/")
    run.add_argument("--policy", type=Path, default=None,
                     help="policy pushed after the routes (default: controller/policies/default.yaml)")
    run.add_argument("--no-policy", action="store_true", help="push routes only")
    run.add_argument("--log-level", choices=("debug", "info", "warn", "error"), default="info",
                     help="switch log level")
    run.set_defaults(handler=_run)
    stop = sub.add_parser("stop", help="stop the fabric and remove what it made (also after a crash)")
    stop.set_defaults(handler=_stop)


def _require_root() -> None:
    if os.geteuid() != 0:
        raise GradfabricError("the fabric needs root (network namespaces and interfaces): "
                              "run it as root, e.g. sudo make run")


def _run(args: argparse.Namespace) -> int:
    _require_root()
    from mininet_topos import runner
    from mininet_topos.launcher import LaunchOptions
    from mininet_topos.programming import DEFAULT_POLICY

    if args.scenario is not None and not args.scenario.is_file():
        raise GradfabricError(f"scenario file {args.scenario} does not exist")
    policy = None if args.no_policy else (args.policy or DEFAULT_POLICY)
    if policy is not None and not policy.is_file():
        raise GradfabricError(f"policy file {policy} does not exist")
    options = LaunchOptions(
        topo=args.topo, target=args.target, pcap=args.pcap, log_level=args.log_level,
        policy=policy, progress=lambda msg: print(f"run: {msg}", file=sys.stderr, flush=True),
    )
    interactive = not (args.no_cli or args.scenario is not None)
    return runner.run(options, interactive=interactive, scenario=args.scenario)


def _stop(args: argparse.Namespace) -> int:
    _require_root()
    from mininet_topos import runner

    done = runner.stop(paths.workdir())
    if done is None:
        print("stop: no fabric recorded, nothing to stop")
    else:
        for line in done:
            print(f"stop: {line}")
        print(f"stop: fabric removed ({len(done)} item(s))")
    return 0
