"""``p4switch run`` (the switch process, like ``simple_switch_grpc``) and ``p4switch ctl``
(queue settings at run time, like ``simple_switch_CLI``'s ``set_queue_rate``/``set_queue_depth``,
plus the embedded-only ``set_port_rate``).
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import signal
import threading
from pathlib import Path
from typing import Any

from p4switch.errors import P4SwitchError

LOG_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING,
              "error": logging.ERROR}
DEFAULT_ADDRESS = "127.0.0.1:9559"


def parse_queue_setting(text: str) -> tuple[int, int | None, str]:
    """``PORT[:PRIO]=VALUE`` -> (port, priority or None, value)."""
    match = re.fullmatch(r"\s*(\d+)(?::(\d+))?\s*=\s*(\S+)\s*", text)
    if not match:
        raise P4SwitchError(f"bad queue setting {text!r}: expected PORT[:PRIO]=VALUE")
    priority = int(match.group(2)) if match.group(2) is not None else None
    return int(match.group(1)), priority, match.group(3)


def parse_port_setting(text: str) -> tuple[int, str]:
    """``PORT=VALUE`` -> (port, value)."""
    match = re.fullmatch(r"\s*(\d+)\s*=\s*(\S+)\s*", text)
    if not match:
        raise P4SwitchError(f"bad port setting {text!r}: expected PORT=VALUE")
    return int(match.group(1)), match.group(2)


def parse_queue_target(text: str) -> tuple[int, int | None]:
    """``PORT[:PRIO]`` -> (port, priority or None)."""
    match = re.fullmatch(r"\s*(\d+)(?::(\d+))?\s*", text)
    if not match:
        raise P4SwitchError(f"bad queue {text!r}: expected PORT or PORT:PRIO")
    return int(match.group(1)), int(match.group(2)) if match.group(2) is not None else None


def add_commands(subparsers: Any) -> None:
    run = subparsers.add_parser(
        "run", help="run a switch on Linux interfaces, serving P4Runtime (like simple_switch_grpc)",
        description="Run the embedded switch. It is ready when its gRPC port accepts connections; "
                    "SIGTERM stops it cleanly.")
    run.add_argument("program", nargs="?", type=Path,
                     help="P4-16 source (or a device config .json with --p4info) to load at start")
    run.add_argument("--no-p4", action="store_true",
                     help="start without a program; SetForwardingPipelineConfig installs one")
    run.add_argument("--p4info", type=Path, help="P4Info text file (only with a device config .json)")
    run.add_argument("-i", "--interface", action="append", default=[], metavar="PORT@IFACE",
                     help="attach a Linux interface as a switch port (repeatable)")
    run.add_argument("--device-id", type=int, default=0)
    run.add_argument("--grpc-server-addr", default=DEFAULT_ADDRESS, metavar="ADDR",
                     help=f"P4Runtime listen address (default {DEFAULT_ADDRESS}; port 0 picks one)")
    run.add_argument("--cpu-port", type=int, help="port number of the CPU port (PacketIn/PacketOut)")
    run.add_argument("--priority-queues", type=int, default=1, metavar="N",
                     help="strict-priority queues per egress port (standard_metadata.priority)")
    run.add_argument("--log-file", type=Path, help="write the switch log here (default: stderr)")
    run.add_argument("--log-level", choices=tuple(LOG_LEVELS), default="info")
    run.add_argument("--pcap", nargs="?", const=Path("."), type=Path, metavar="DIR",
                     help="write <iface>_in.pcap and <iface>_out.pcap for every port into DIR")
    run.add_argument("--p4runtime-log", type=Path, metavar="FILE",
                     help="log every P4Runtime request to FILE")
    run.add_argument("--datapath", choices=("native", "python"), default="native",
                     help="native: the program compiled to C with packet I/O and queues in native "
                          "threads (falls back to python, with a log line, when the program or the "
                          "options need it); python: the Python pipeline (default: %(default)s)")
    run.add_argument("--queue-rate", action="append", default=[], metavar="PORT[:PRIO]=RATE",
                     help="rate of each priority queue of a port, or of one (as BMv2's set_queue_rate): "
                          "N[k|M|G][pps|bps]")
    run.add_argument("--port-rate", action="append", default=[], metavar="PORT=RATE",
                     help="embedded only: one rate shared by all priority queues of a port, "
                          "so strict priority decides who gets it (BMv2 has no equivalent)")
    run.add_argument("--queue-depth", action="append", default=[], metavar="PORT[:PRIO]=PACKETS",
                     help="queue depth in packets of a port's priority queues, or of one")
    run.set_defaults(handler=run_switch)

    ctl = subparsers.add_parser(
        "ctl", help="change queue rates and depths of a running switch (like simple_switch_CLI)")
    ctl.add_argument("--grpc-server-addr", default=DEFAULT_ADDRESS, metavar="ADDR",
                     help=f"the switch's gRPC address (default {DEFAULT_ADDRESS})")
    actions = ctl.add_subparsers(dest="ctl_command", metavar="ACTION")
    actions.required = True
    rate = actions.add_parser(
        "set_queue_rate", help="PORT[:PRIO] RATE: each priority queue of PORT, or one (N[k|M|G][pps|bps]; "
                               "'none' = unlimited)")
    rate.add_argument("queue")
    rate.add_argument("rate")
    port_rate = actions.add_parser(
        "set_port_rate", help="PORT RATE: embedded only, one rate shared by all priority queues of PORT "
                              "('none' = no port rate, as BMv2)")
    port_rate.add_argument("port", type=int)
    port_rate.add_argument("rate")
    depth = actions.add_parser("set_queue_depth", help="PORT[:PRIO] PACKETS")
    depth.add_argument("queue")
    depth.add_argument("depth", type=int)
    show = actions.add_parser("show_queues", help="queue settings and occupancy [of one port]")
    show.add_argument("port", nargs="?", type=int)
    actions.add_parser("stats", help="packet counts and queue drops")
    ctl.set_defaults(handler=run_ctl)


def run_ctl(args: argparse.Namespace) -> int:
    from p4switch.server.control import call

    request: dict[str, Any]
    if args.ctl_command == "set_queue_rate":
        port, priority = parse_queue_target(args.queue)
        rate = None if args.rate.lower() in ("none", "unlimited") else args.rate
        method, request = "SetQueueRate", {"port": port, "priority": priority, "rate": rate}
    elif args.ctl_command == "set_port_rate":
        rate = None if args.rate.lower() in ("none", "unlimited") else args.rate
        method, request = "SetPortRate", {"port": args.port, "rate": rate}
    elif args.ctl_command == "set_queue_depth":
        port, priority = parse_queue_target(args.queue)
        method, request = "SetQueueDepth", {"port": port, "priority": priority, "depth": args.depth}
    elif args.ctl_command == "show_queues":
        method, request = "ShowQueues", {"port": args.port}
    else:
        method, request = "Stats", {}
    print(json.dumps(call(args.grpc_server_addr, method, request), indent=2))
    return 0


def _configure_logging(args: argparse.Namespace) -> logging.Handler:
    if args.log_file:
        args.log_file.parent.mkdir(parents=True, exist_ok=True)
        handler: logging.Handler = logging.FileHandler(args.log_file)
    else:
        handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger("p4switch")
    root.addHandler(handler)
    root.setLevel(LOG_LEVELS[args.log_level])
    return handler


def run_switch(args: argparse.Namespace) -> int:
    from p4switch.ports import PortSpec
    from p4switch.switch import Switch, SwitchConfig
    from p4switch.traffic_manager import Rate

    if args.program is None and not args.no_p4:
        raise P4SwitchError("give a program (PROG.p4) or --no-p4")
    if args.program is not None and args.no_p4:
        raise P4SwitchError("give either a program or --no-p4, not both")
    config = SwitchConfig(
        interfaces=[PortSpec.parse(text) for text in args.interface],
        device_id=args.device_id,
        grpc_address=args.grpc_server_addr,
        cpu_port=args.cpu_port,
        priority_queues=args.priority_queues,
        pcap_dir=args.pcap,
        request_log=args.p4runtime_log,
        datapath=args.datapath,
    )
    rates = [parse_queue_setting(text) for text in args.queue_rate]
    port_rates = [parse_port_setting(text) for text in args.port_rate]
    depths = [parse_queue_setting(text) for text in args.queue_depth]
    handler = _configure_logging(args)
    log = logging.getLogger("p4switch.run")
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
    switch = None
    try:
        switch = Switch(config)
        for port, priority, value in rates:
            switch.tm.set_queue_rate(port, None if value == "none" else Rate.parse(value), priority)
        for port, value in port_rates:
            switch.tm.set_port_rate(port, None if value == "none" else Rate.parse(value))
        for port, priority, value in depths:
            switch.tm.set_queue_depth(port, int(value), priority)
        if args.program is not None:
            switch.load_program(args.program, args.p4info)
        switch.start()
        while not stop.wait(0.5):
            pass
        log.info("stop requested")
        return 0
    except P4SwitchError as exc:
        log.error("%s", exc)
        raise
    finally:
        if switch is not None:
            switch.stop()
        for sig, old in previous.items():
            signal.signal(sig, old)
        logging.getLogger("p4switch").removeHandler(handler)
        handler.close()
