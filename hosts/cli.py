"""`gradfabric agent ...`: parameter server, worker, and a DLCP send/receive check.

Every command writes JSON lines on stdout (and to ``--json FILE`` when given): first
``{"event": "listening", "address": "IP:PORT"}`` once its socket is bound, then one line
per iteration (or message).
"""

from __future__ import annotations

import argparse
import json
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TextIO

from hosts.errors import HostError

DLCP_PORT = 19600  # hosts.wire.DLCP_PORT, without importing Scapy for --help
DEFAULT_ALPHA = 9.08e-4  # MG-WFBP's fitted 10GbE startup cost (s)
DEFAULT_BETA = 7.40e-10  # and per-byte cost (s/B)


def add_commands(sub: argparse._SubParsersAction) -> None:
    agent = sub.add_parser("agent", help="host agents: parameter server, worker, DLCP checks")
    cmds = agent.add_subparsers(dest="agent_command", metavar="ROLE")
    cmds.required = True

    ps = cmds.add_parser("ps", help="run a parameter server for N workers")
    ps.add_argument("--bind", default="0.0.0.0:19600", help="IP:PORT to listen on (port 0: any)")
    ps.add_argument("--workers", type=int, required=True, help="number of workers")
    _model_args(ps)
    ps.add_argument("--update", choices=("sum", "mean", "sgd"), default="mean",
                    help="what the server makes of the pushed gradients")
    ps.add_argument("--lr", type=float, default=0.1, help="learning rate of --update sgd")
    _common(ps)
    ps.set_defaults(handler=_run_ps)

    worker = cmds.add_parser("worker", help="run a training worker that sends tagged gradients")
    worker.add_argument("--rank", type=int, required=True, help="worker id (ring position)")
    where = worker.add_mutually_exclusive_group(required=True)
    where.add_argument("--ps", help="IP:PORT of the parameter server")
    where.add_argument("--ring", help="comma-separated IP:PORT of every rank, in rank order")
    worker.add_argument("--bind", default=None,
                        help="IP[:PORT] to use (default 0.0.0.0:19600, so that pulls reach the DLCP port; "
                             "ring: its own entry of --ring)")
    _model_args(worker)
    worker.add_argument("--scheduler", default="wfbp", help="wfbp, synceasgd, fusion, mgwfbp, p3, prophet, dlcp")
    worker.add_argument("--alpha", type=float, default=DEFAULT_ALPHA, help="all-reduce startup cost (s)")
    worker.add_argument("--beta", type=float, default=DEFAULT_BETA, help="all-reduce cost per byte (s)")
    worker.add_argument("--source", default="random", help="gradients: 'random' or an .npz file")
    worker.add_argument("--seed", type=int, default=0, help="seed of the synthetic gradients")
    worker.add_argument("--time-scale", type=float, default=1.0, help="multiply the model's compute times")
    _common(worker)
    worker.set_defaults(handler=_run_worker)

    send = cmds.add_parser("send", help="send seeded test tensors to a 'recv' (transport check)")
    send.add_argument("--to", required=True, help="IP:PORT of the receiver")
    send.add_argument("--bind", default="0.0.0.0:0", help="IP:PORT to send from (port 0: any)")
    send.add_argument("--messages", type=int, default=10, help="messages to send")
    send.add_argument("--elements", type=int, default=100_000, help="float32 elements per message")
    send.add_argument("--seed", type=int, default=0, help="seed of the message contents")
    send.add_argument("--worker-id", type=int, default=1, help="worker id carried in each packet")
    send.add_argument("--in-flight", type=int, default=2,
                      help="messages sent at once (the next is packed and sent while the last answers come back)")
    _common(send)
    send.set_defaults(handler=_run_send)

    recv = cmds.add_parser("recv", help="receive and check seeded test tensors from 'send'")
    recv.add_argument("--bind", default="0.0.0.0:19600", help="IP:PORT to listen on")
    recv.add_argument("--messages", type=int, default=10, help="messages to receive, then exit")
    recv.add_argument("--seed", type=int, default=0, help="seed the sender used, to check contents")
    recv.add_argument("--linger", type=float, default=1.0,
                      help="at the end, keep answering probes until this many seconds pass without any")
    _common(recv)
    recv.set_defaults(handler=_run_recv)

    decode = cmds.add_parser("decode", help="print the DLCP packets of a pcap file as JSON lines")
    decode.add_argument("pcap", type=Path, help="capture file to decode")
    decode.add_argument("--limit", type=int, default=None, help="stop after this many DLCP packets")
    decode.set_defaults(handler=_run_decode)

    relay = cmds.add_parser("relay", help="forward DLCP traffic with random loss, duplication and reordering")
    relay.add_argument("--listen", required=True, help="IP:PORT senders talk to")
    relay.add_argument("--to", required=True, help="IP:PORT of the receiver")
    relay.add_argument("--loss", type=float, default=0.0, help="probability of dropping a data packet")
    relay.add_argument("--duplicate", type=float, default=0.0, help="probability of sending it twice")
    relay.add_argument("--reorder", type=int, default=1, help="reverse every group of this many data packets")
    relay.add_argument("--seed", type=int, default=None, help="seed of the loss and reordering (default: random)")
    relay.add_argument("--seconds", type=float, default=60.0, help="run this long, then report and exit")
    relay.add_argument("--json", type=Path, default=None, help="also write the JSON lines to this file")
    relay.set_defaults(handler=_run_relay)


def _model_args(p: argparse.ArgumentParser) -> None:
    model = p.add_mutually_exclusive_group(required=True)
    model.add_argument("--model", type=Path, help="trace CSV (traces/*.csv formats)")
    model.add_argument("--layers", help="comma-separated layer sizes in elements (1 ms backward each)")
    p.add_argument("--iterations", type=int, default=3, help="training iterations to run")


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--job", type=int, default=1, help="DLCP job id")
    p.add_argument("--grad-bound", type=float, default=0.01, help="tolerated loss of a gradient message")
    p.add_argument("--param-bound", type=float, default=0.002, help="tolerated loss of a parameter message")
    p.add_argument("--rate", type=float, default=50_000.0,
                   help="ceiling of the pacing rate in packets/s (set it to the port rate when known); the "
                        "congestion window starts at 10 packets and finds the rate by slow start (default 50000)")
    p.add_argument("--timeout", type=float, default=30.0,
                   help="seconds a peer may be silent (nothing at all heard from it) before the command gives "
                        "up naming it; recv: seconds to wait for each message (default 30)")
    p.add_argument("--json", type=Path, default=None, help="also write the JSON lines to this file")
    p.add_argument("--marking", choices=("p4", "commodity"), default="p4",
                   help="IP header marking: p4 (DSCP 0, ECT(0); the P4 switches read the DLCP header) or commodity "
                        "(DSCP per priority class, Not-ECT on drop-eligible packets, ECT(0) on the rest)")
    p.add_argument("--key-file", type=Path, default=None,
                   help="file holding the job's shared key (>= 16 bytes): sign every datagram and drop unsigned "
                        "ones (default: no key)")


def parse_address(text: str, *, default_port: int | None = None) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = text, ""
    if not port:
        if default_port is None:
            raise HostError(f"address {text!r} needs a port (IP:PORT)")
        return host, default_port
    try:
        number = int(port)
    except ValueError:
        raise HostError(f"address {text!r}: port {port!r} is not a number") from None
    if not 0 <= number <= 65535:
        raise HostError(f"address {text!r}: port out of range")
    return host or "0.0.0.0", number


class _Lines:
    """JSON lines to stdout and, optionally, a file."""

    def __init__(self, path: Path | None) -> None:
        self._file: TextIO | None = path.open("w") if path else None

    def emit(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, sort_keys=True)
        print(line, flush=True)
        if self._file:
            self._file.write(line + "\n")
            self._file.flush()

    def close(self) -> None:
        if self._file:
            self._file.close()


def _layers(args: argparse.Namespace) -> tuple[Any, ...]:
    from hosts.model import load_model, model_from_sizes

    if args.model is not None:
        return load_model(args.model)
    try:
        sizes = [int(x) for x in args.layers.split(",") if x.strip()]
    except ValueError:
        raise HostError(f"--layers must be comma-separated integers, got {args.layers!r}") from None
    return model_from_sizes(sizes)


def _endpoint(args: argparse.Namespace, bind: tuple[str, int], worker_id: int, **kw: Any) -> Any:
    from hosts.endpoint import Endpoint
    from hosts.pacing import Aimd
    from hosts.wire import MsgType

    key = None
    if getattr(args, "key_file", None) is not None:
        try:
            key = args.key_file.read_bytes()
        except OSError as exc:
            raise HostError(f"cannot read the job key {args.key_file}: {exc.strerror}") from None
        if len(key) < 16:
            raise HostError(f"the job key in {args.key_file} has {len(key)} bytes; it needs at least 16")
    return Endpoint(worker_id=worker_id, job_id=args.job, host=bind[0], port=bind[1],
                    bounds={MsgType.GRADIENT: args.grad_bound, MsgType.PARAMETER: args.param_bound},
                    aimd=Aimd(rate=args.rate), peer_timeout=args.timeout, key=key,
                    marking=getattr(args, "marking", "p4"), **kw)


def _with_lines(args: argparse.Namespace, body: Callable[[_Lines], int]) -> int:
    lines = _Lines(args.json)
    try:
        return body(lines)
    finally:
        lines.close()


def _listening(lines: _Lines, endpoint: Any) -> None:
    host, port = endpoint.address
    lines.emit({"event": "listening", "address": f"{host}:{port}"})


def _run_ps(args: argparse.Namespace) -> int:
    from hosts.ps import PS_WORKER_ID, ParameterServer

    layers = _layers(args)
    tensor_ids = [l.index for l in layers if l.numel > 0]

    def body(lines: _Lines) -> int:
        with _endpoint(args, parse_address(args.bind), PS_WORKER_ID) as endpoint:
            _listening(lines, endpoint)
            ps = ParameterServer(endpoint, args.workers, update=args.update, lr=args.lr)
            for it in range(args.iterations):
                served = ps.serve_iteration(it, tensor_ids, num_layers=len(layers), timeout=args.timeout)
                lines.emit({
                    "event": "iteration", "iteration": it, "role": "ps", "seconds": served.seconds,
                    "tensors": served.tensors, "gradient_loss": served.gradient_loss,
                    "bytes": sum(p.payload_bytes for p in served.pulls),
                    "retransmissions": sum(p.retransmitted for p in served.pulls),
                    "drops": dict(endpoint.reassembler.stats.drops),
                })
            endpoint.drain()
        return 0

    return _with_lines(args, body)


def _run_worker(args: argparse.Namespace) -> int:
    from hosts.agent import WorkerAgent
    from hosts.model import npz_source, random_source
    from hosts.ps import PsClient
    from hosts.ring import RingAllReduce
    from hosts.schedulers import AlphaBeta, create

    layers = _layers(args)
    scheduler = create(args.scheduler, cost=AlphaBeta(args.alpha, args.beta))
    source = (random_source(layers, seed=args.seed, rank=args.rank) if args.source == "random"
              else npz_source(args.source, layers))
    peers = [parse_address(p) for p in args.ring.split(",")] if args.ring else []
    if peers and not 0 <= args.rank < len(peers):
        raise HostError(f"--rank {args.rank} is not a position in a ring of {len(peers)}")
    if args.bind:
        bind = parse_address(args.bind, default_port=DLCP_PORT)
    else:
        bind = peers[args.rank] if peers else ("0.0.0.0", DLCP_PORT)

    def body(lines: _Lines) -> int:
        with _endpoint(args, bind, args.rank) as endpoint:
            _listening(lines, endpoint)
            collective: Any = (RingAllReduce(endpoint, args.rank, peers) if peers
                               else PsClient(endpoint, parse_address(args.ps)))
            agent = WorkerAgent(layers, scheduler, collective, rank=args.rank,
                                time_scale=args.time_scale, timeout=args.timeout)
            for it in range(args.iterations):
                _, report = agent.run_iteration(it, source(it))
                lines.emit({"event": "iteration", **json.loads(report.to_json())})
            endpoint.drain()
        return 0

    return _with_lines(args, body)


def _test_tensor(seed: int, index: int, elements: int) -> Any:
    import numpy as np

    rng = np.random.default_rng([seed, index])
    return rng.standard_normal(elements, dtype=np.float32) + np.float32(0.5)  # never exactly 0


def _run_send(args: argparse.Namespace) -> int:
    def body(lines: _Lines) -> int:
        with _endpoint(args, parse_address(args.bind, default_port=0), args.worker_id) as endpoint:
            _listening(lines, endpoint)
            dest = parse_address(args.to)
            pending: deque[tuple[int, Future[Any]]] = deque()

            def done(i: int, r: Any) -> None:
                window = endpoint.window
                srtt = window.rtt.srtt if window.rtt is not None else None
                lines.emit({"event": "sent", "iteration": i, "packets": r.packets, "bytes": r.payload_bytes,
                            "retransmissions": r.retransmitted, "rounds": r.rounds, "probes": r.probes,
                            "probe_timeouts": r.timeouts, "missing": r.missing, "eligible": r.eligible,
                            "ecn_echoes": r.ecn_echoes, "seconds": r.seconds, "cwnd": round(window.cwnd, 1),
                            "lost_by_class": r.lost_by_class, "eligible_elements": r.eligible_elements,
                            "reordered": r.reordered,
                            "window_cuts": window.decreases,
                            "srtt_ms": round(srtt * 1e3, 3) if srtt is not None else None,
                            "rate_pps": round(window.rate, 1)})

            for i in range(args.messages):  # up to --in-flight messages at once, lines in order
                if len(pending) >= max(1, args.in_flight):
                    done(pending[0][0], pending.popleft()[1].result())
                pending.append((i, endpoint.send_async(dest, _test_tensor(args.seed, i, args.elements), copy=False,
                                                       iteration=i)))
            while pending:
                done(pending[0][0], pending.popleft()[1].result())
        return 0

    return _with_lines(args, body)


def _run_recv(args: argparse.Namespace) -> int:
    import numpy as np

    def body(lines: _Lines) -> int:
        bad = 0
        with _endpoint(args, parse_address(args.bind, default_port=DLCP_PORT), 0) as endpoint:
            _listening(lines, endpoint)
            for _ in range(args.messages):
                got = endpoint.receive(timeout=args.timeout)
                expected = _test_tensor(args.seed, got.key.iteration, got.values.size)
                exact = got.values == expected
                zero_filled = int(np.sum(~exact & (got.values == 0)))
                wrong = int(np.sum(~exact & (got.values != 0)))
                bad += wrong > 0
                # zero_filled: elements lost within the bound (filled with 0); wrong: elements
                # holding a value that was never sent (must be 0).
                lines.emit({"event": "received", "iteration": got.key.iteration, "worker": got.key.worker_id,
                            "elements": int(got.values.size), "zero_filled": zero_filled, "wrong": wrong,
                            "loss_rate": got.loss_rate})
            endpoint.drain(quiet=args.linger, limit=10 * args.linger)  # late probes still get their bitmap
            stats = endpoint.reassembler.stats
            lines.emit({"event": "stats", "data_packets": stats.data_packets, "duplicates": stats.duplicates,
                        "probes": stats.probes, "ce_marked": stats.ce_marked, "ecn_echoes": stats.ecn_echoes,
                        "drops": dict(stats.drops)})
        if bad:
            raise HostError(f"{bad} message(s) held values that were neither sent nor zero")
        return 0

    return _with_lines(args, body)


def _run_relay(args: argparse.Namespace) -> int:
    import time

    from hosts.relay import Relay, random_impairment

    def body(lines: _Lines) -> int:
        impair = random_impairment(loss=args.loss, duplicate=args.duplicate, seed=args.seed)
        with Relay(parse_address(args.to), impair, hold=args.reorder, listen=parse_address(args.listen),
                   record=False) as relay:
            host, port = relay.address
            lines.emit({"event": "listening", "address": f"{host}:{port}"})
            time.sleep(args.seconds)
            s = relay.stats
        lines.emit({"event": "stats", "forwarded": s.forwarded, "dropped": s.dropped,
                    "duplicated": s.duplicated, "replies": s.replies})
        return 0

    return _with_lines(args, body)


def _run_decode(args: argparse.Namespace) -> int:
    from scapy.error import Scapy_Exception
    from scapy.layers.inet import IP, UDP
    from scapy.utils import PcapReader

    from hosts.wire import DLCP

    shown = 0
    try:
        with PcapReader(str(args.pcap)) as reader:
            for frame in reader:
                if not frame.haslayer(DLCP):
                    continue
                d = frame[DLCP]
                print(json.dumps({
                    "src": frame[IP].src if frame.haslayer(IP) else None,
                    "dst": frame[IP].dst if frame.haslayer(IP) else None,
                    "sport": frame[UDP].sport, "dport": frame[UDP].dport,
                    **{f.name: int(d.getfieldval(f.name)) for f in DLCP.fields_desc},
                    "payload_bytes": len(bytes(d.payload)),
                }, sort_keys=True), flush=True)
                shown += 1
                if args.limit is not None and shown >= args.limit:
                    break
    except (OSError, Scapy_Exception) as exc:
        raise HostError(f"cannot read {args.pcap}: {exc}") from None
    return 0
