"""`gradfabric sim ...`: trace-based simulation of data-parallel iteration time.

* ``sim run``: schedulers x worker counts on one model trace and cluster; Markdown table
  on stdout, and Markdown + CSV + PNG with ``--out``.
* ``sim fit``: alpha-beta from OSU all-reduce latencies (optionally compared with a trace's
  measured per-blob all-reduce times).
* ``sim reproduce``: regenerate every figure of the reproduction table.
* ``sim validate``: predict the training experiment's raw runs and compare.
* ``sim port-predict``: the same model's prediction for sweeps moved to another port rate.
* ``sim profile``: make a trace (pytorch format) from a PyTorch model on this machine (needs torch).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from gradfabric import paths
from simulator.errors import SimulatorError

#: Copies of the reference traces (public data; sources in its README.md).
DEFAULT_TRACES = Path(__file__).resolve().parent / "data" / "traces"
#: The committed results, regenerated with ``gradfabric sim reproduce --out experiments/results/simulation``.
COMMITTED_RESULTS = paths.ROOT / "experiments" / "results" / "simulation"


def default_results() -> Path:
    """Where ``sim reproduce`` writes without --out: under build/, never into tracked files."""
    return paths.build_dir() / "results" / "simulation"


def _shown(path: Path) -> str:
    """``path`` as a command line shows it: relative to the repository when inside it."""
    try:
        return shlex.quote(str(path.resolve().relative_to(paths.ROOT)))
    except ValueError:
        return shlex.quote(str(path))


def _int_list(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, not {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError("worker counts must be positive")
    return values


def _name_list(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def _trace_pick_options(parser: argparse.ArgumentParser) -> None:
    """--model/--precision/--passes: which rows of a pytorch-format trace, and its pass times."""
    parser.add_argument("--model", default=None,
                        help="model to take from a pytorch-format trace (e.g. resnet50; the error lists the file's)")
    parser.add_argument("--precision", default=None, help="precision to take from a pytorch-format trace (fp32, bf16)")
    parser.add_argument("--passes", type=Path, default=None,
                        help="forward/backward/optimizer times of a pytorch-format trace "
                             "(default: h100_pytorch_passes.json beside it)")


def load_picked_trace(args: argparse.Namespace, **options: float | int | None):  # type: ignore[no-untyped-def]
    """The trace ``--trace`` names, with the rows --model/--precision pick."""
    from simulator.traces import load_trace

    return load_trace(args.trace, passes=args.passes, model=args.model, precision=args.precision, **options)


def add_commands(sub: argparse._SubParsersAction) -> None:
    sim = sub.add_parser("sim", help="trace-based simulation of iteration time (4 to 2048 workers)")
    simsub = sim.add_subparsers(dest="sim_command", metavar="SIM_COMMAND")
    simsub.required = True

    run = simsub.add_parser("run", help="simulate schedulers on a model trace and cluster")
    run.add_argument("--trace", type=Path, required=True, help="model trace CSV (see simulator/README.md)")
    _trace_pick_options(run)
    run.add_argument("--forward-ms", type=float, default=None, help="total forward time (spread over layers)")
    run.add_argument("--batch", type=int, default=None, help="samples per worker per iteration")
    run.add_argument("--workers", type=_int_list, default=[4, 8, 16, 32, 64],
                     help="worker counts to simulate, comma-separated (default: 4,8,16,32,64)")
    run.add_argument("--arch", choices=("ring", "ps"), default="ring",
                     help="ring all-reduce or parameter server with push, aggregation and pull")
    run.add_argument("--servers", type=int, default=None, help="PS servers (default: one per worker)")
    run.add_argument("--aggregation-us", type=float, default=0.0,
                     help="PS: server delay between a transfer's last push and its pull")
    net = run.add_argument_group("network (one of)")
    net.add_argument("--gbps", type=float, default=None, help="link bandwidth in Gbit/s (with --latency-us)")
    net.add_argument("--latency-us", type=float, default=10.0, help="per-step latency with --gbps")
    net.add_argument("--alpha", type=float, default=None, help="ring all-reduce alpha (s) at --fit-workers")
    net.add_argument("--beta", type=float, default=None, help="ring all-reduce beta (s/byte) at --fit-workers")
    net.add_argument("--fit-workers", type=int, default=None, help="worker count --alpha/--beta were measured at")
    net.add_argument("--osu", type=Path, default=None, help="fit alpha/beta from OSU all-reduce latencies")
    run.add_argument("--schedulers", type=_name_list,
                     default=["wfbp", "synceasgd", "fusion", "mgwfbp", "p3", "prophet", "dlcp"],
                     help="schedulers to compare, comma-separated "
                          "(default: wfbp,synceasgd,fusion,mgwfbp,p3,prophet,dlcp)")
    run.add_argument("--baseline", default="wfbp", help="the scheduler speed-ups are relative to")
    run.add_argument("--no-overlap", action="store_true",
                     help="next forward waits for every update (Caffe, MG-WFBP's testbed)")
    run.add_argument("--partition-bytes", type=int, default=None, help="p3/prophet/dlcp partition size")
    run.add_argument("--bucket-mb", type=float, default=None, help="fusion bucket size (MiB; default 25)")
    tail = run.add_argument_group("DLCP tail model")
    tail.add_argument("--loss-rate", type=float, default=None, help="per-packet loss probability")
    tail.add_argument("--rto-ms", type=float, default=5.0,
                      help="retransmission timeout a reliable transfer waits after any loss, in ms")
    tail.add_argument("--paths", type=int, default=1, help="equal-cost paths")
    tail.add_argument("--flows", type=int, default=None, help="flows hashed onto the paths (default: paths)")
    run.add_argument("--out", type=Path, default=None, help="folder for .md, .csv and .png")
    run.set_defaults(handler=_run)

    fit = simsub.add_parser("fit", help="fit alpha and beta to OSU all-reduce latencies")
    fit.add_argument("osu", type=Path, help="OSU all-reduce latency CSV (see simulator/README.md)")
    fit.add_argument("--min-bytes", type=int, default=0, help="leave out message sizes below this")
    fit.add_argument("--trace", type=Path, default=None, help="compare with this trace's allreduce_us")
    fit.set_defaults(handler=_fit)

    rep = simsub.add_parser("reproduce", help="regenerate the reproduction table and its figures")
    rep.add_argument("--traces", type=Path, default=DEFAULT_TRACES,
                     help="folder of model traces and OSU latencies")
    rep.add_argument("--out", type=Path, default=None,
                     help="folder for the report, tables and figures (default: build/results/simulation/; "
                          "--out experiments/results/simulation regenerates the committed ones)")
    rep.set_defaults(handler=_reproduce)

    val = simsub.add_parser("validate", help="predict the training experiment's runs and compare (table and plot)")
    val.add_argument("results", type=Path, help="a sweep folder of `gradfabric experiment training`, or a folder of them")
    val.add_argument("--job-trace", type=Path, default=None,
                     help="the CNN job's trace (a `sim profile` of experiments.training.cnn:build_cnn), for runs "
                          "that do not name an H100 model")
    val.add_argument("--baseline", type=Path, default=None,
                     help="runs of the same job without the fabric (`experiment training --loopback`): their "
                          "iteration times replace the trace's compute (the hosts' own time, replayed)")
    val.add_argument("--traces", type=Path, default=DEFAULT_TRACES, help="folder holding the H100 traces")
    val.add_argument("--cpu", default="dlcp-recorded",
                     choices=("summed", "recorded", "recorded-summed", "wall", "recorded-apart", "dlcp-recorded"),
                     help="how a run's CPU share is taken: the DLCP transport's runs per process where recorded, "
                          "calibrated apart, kernel TCP's the rank's summed figure and the load (dlcp-recorded, "
                          "default); the summed figure and the load for every run (summed); per process where the "
                          "run records it, else from the load (recorded), else from the rank's summed figure and "
                          "the load (recorded-summed), or that calibrated apart (recorded-apart); 1 - the wait "
                          "share of wall time (wall)")
    val.add_argument("--without", type=lambda text: frozenset(t for t in text.split(",") if t), default=frozenset(),
                     help="model terms to leave out, comma-separated: server-cost (a star server's recorded CPU per "
                          "packet), background (the background's packets off the switches' budget), spread (the "
                          "iterations' recorded spread about their median, from the other sweeps), tenant-use (jobs "
                          "share the switches by their recorded CPU use, else equally), incast-flows (a star's TCP "
                          "pushes as one flow per worker in the server's FIFO), message-cost (the DLCP transport's "
                          "measured CPU per message on the GSO transport's runs), background-acks (the background TCP "
                          "flows' ACKs, one per two data packets, among the switches' packets), host-code (the DLCP "
                          "transport's host CPU at the hosts' code's measured ratio: probes answered in C), paced (the "
                          "paced DLCP transport takes what the background leaves at the switches, no max-min half), tcp-acks (a "
                          "kernel-TCP ring's own ACKs, one per two segments, among its port's packets))")
    val.add_argument("--with", dest="with_terms", type=lambda text: frozenset(t for t in text.split(",") if t),
                     default=frozenset(), help="terms off by default to put in: reordering (each run's recorded "
                     "reordered packets at a cost per packet fitted with the host cost, leave one sweep out)")
    val.add_argument("--notes", type=Path, default=None,
                     help="a Markdown file put under the ranking (the measured causes of the pairs it swaps)")
    val.add_argument("--leave-out", type=lambda text: tuple(t for t in text.split(",") if t), default=(),
                     help="sweeps not to read, by the start of their folder names, comma-separated (named in the table)")
    val.add_argument("--cache", type=Path, default=None,
                     help="folder keeping the calibration's curves per run, code and settings (speed only: the "
                          "table is the same; not named in it)")
    val.add_argument("--out", type=Path, default=None,
                     help="folder for validation.md/.csv/.png (default: build/results/simulation/validation/)")
    val.set_defaults(handler=_validate)

    pp = simsub.add_parser("port-predict", help="the validation model's prediction for sweeps moved to another port "
                                                "rate (before its runs exist)")
    pp.add_argument("sources", type=Path, nargs="+", help="sweep folders of `experiment trace` at their own port rate")
    pp.add_argument("--port-pps", type=float, required=True, help="the new port rate (packets a second)")
    pp.add_argument("--k", type=float, required=True, help="the scaling rule's time multiplier there (b kept)")
    pp.add_argument("--tcp-cost-us", type=float, default=7.0, help="kernel TCP's host cost per packet (us)")
    pp.add_argument("--p3-cost-us", type=float, default=None,
                    help="a P3 ring's kernel TCP's host cost per packet (us; default: --tcp-cost-us)")
    pp.add_argument("--dlcp-cost-us", type=float, default=14.0,
                    help="the GSO DLCP transport's host cost per packet at its per-process CPU share (us)")
    pp.add_argument("--transport-cost-us", type=float, default=None,
                    help="the GSO DLCP transport's host cost per packet without the switches' marks (configurations "
                         "transport, dropping; us; default: none, those runs are not predicted)")
    pp.add_argument("--as", dest="stand_ins", type=_stand_ins, default={},
                    help="configurations no source ran, each predicted from another's runs' records, comma-separated "
                         "CONFIG=SOURCE[:LOSS] (LOSS: the DLCP transport's loss per packet to use instead of the "
                         "records', e.g. transport=dlcp:0.044)")
    pp.add_argument("--traces", type=Path, default=DEFAULT_TRACES, help="folder holding the H100 traces")
    pp.add_argument("--against", type=Path, nargs="+", default=None,
                    help="sweeps made at the new port rate: compare them with the model instead (against.md)")
    pp.add_argument("--before", type=Path, default=None,
                    help="with --against: a prediction.md made before those runs, set beside them with its rankings")
    pp.add_argument("--p99", action="store_true", help="with --before: its p99s beside the runs' too")
    pp.add_argument("--out", type=Path, default=None,
                    help="folder for prediction.md or against.md (default: build/results/simulation/port-predict/)")
    pp.set_defaults(handler=_port_predict)

    prof = simsub.add_parser("profile", help="make a trace (pytorch format) from a PyTorch model on this machine "
                                             "(needs torch)")
    prof.add_argument("--model", default="convnet", help="built-in model (mlp, convnet) or module:function")
    prof.add_argument("--batch", type=int, default=32, help="samples per iteration")
    prof.add_argument("--input-shape", type=_int_list, default=None,
                      help="input shape without the batch, for module:function models (e.g. 3,224,224)")
    prof.add_argument("--time-scale", type=float, default=1.0,
                      help="multiply measured times by this factor (e.g. 0.05 for a target 20x faster)")
    prof.add_argument("--repeats", type=int, default=5, help="timed iterations; medians are kept")
    prof.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    prof.add_argument("--out", type=Path, required=True,
                      help="trace CSV to write (pytorch format); its passes go to NAME.passes.json beside it")
    prof.set_defaults(handler=_profile)

    from simulator.packet.cli import add_packet_command  # declares the command; ns-3 loads only when it runs

    add_packet_command(simsub)


def _cluster(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from hosts.schedulers import AlphaBeta
    from simulator.cluster import Network
    from simulator.dlcp_model import TailModel
    from simulator.fit import fit_alpha_beta, load_osu
    from simulator.sweep import ClusterSpec

    given = [args.gbps is not None, args.alpha is not None or args.beta is not None, args.osu is not None]
    if sum(given) != 1:
        raise SimulatorError("give exactly one network: --gbps, --alpha with --beta, or --osu")
    costs = {}
    if args.gbps is not None:
        network = Network.from_gbps(args.gbps, args.latency_us)
    elif args.osu is not None:
        fit = fit_alpha_beta(load_osu(args.osu))
        network = Network.from_ring_fit(fit.cost, fit.nodes)
        if args.arch == "ring":
            costs[fit.nodes] = fit.cost
    else:
        if args.alpha is None or args.beta is None or args.fit_workers is None:
            raise SimulatorError("--alpha needs --beta and --fit-workers")
        cost = AlphaBeta(args.alpha, args.beta)
        network = Network.from_ring_fit(cost, args.fit_workers)
        if args.arch == "ring":
            costs[args.fit_workers] = cost
    tail = None
    if args.loss_rate is not None or args.paths > 1:
        tail = TailModel(loss_rate=args.loss_rate or 0.0, rto_s=args.rto_ms * 1e-3, paths=args.paths, flows=args.flows)
    return ClusterSpec(args.arch, network, servers=args.servers, tail=tail,
                       overlap_forward=not args.no_overlap, costs=costs, aggregation_s=args.aggregation_us * 1e-6)


def _run(args: argparse.Namespace) -> int:
    from simulator.report import rows_markdown, write_rows
    from simulator.sweep import sweep

    trace = load_picked_trace(args, forward_total_s=None if args.forward_ms is None else args.forward_ms * 1e-3,
                              batch_size=args.batch)
    cluster = _cluster(args)
    options: dict[str, dict[str, object]] = {}
    if args.partition_bytes is not None:
        for name in ("p3", "prophet", "dlcp"):
            options[name] = {"partition_bytes": args.partition_bytes}
    if args.bucket_mb is not None:
        options["fusion"] = {"bucket_bytes": int(args.bucket_mb * 1024 * 1024)}
    rows = sweep(trace, cluster, args.workers, args.schedulers, baseline=args.baseline, options=options)
    print(rows_markdown(rows, args.baseline), end="")
    if args.out is not None:
        stem = f"{trace.name}_{args.arch}"
        written = write_rows(rows, args.out, stem, f"{trace.name}, {args.arch}", args.baseline)
        print("wrote " + ", ".join(str(p) for p in written), file=sys.stderr)
    return 0


def _fit(args: argparse.Namespace) -> int:
    import numpy as np

    from simulator.fit import compare_with_measured, fit_alpha_beta, load_osu
    from simulator.traces import load_trace

    fit = fit_alpha_beta(load_osu(args.osu), min_bytes=args.min_bytes)
    print(f"nodes {fit.nodes}: alpha {fit.cost.alpha * 1e6:.2f} us, beta {fit.cost.beta * 1e9:.4f} ns/B "
          f"({8 / fit.cost.beta / 1e9:.2f} Gbit/s), R^2 {fit.r_squared:.4f}, sizes {fit.min_bytes}..{fit.max_bytes} B")
    if args.trace is not None:
        trace = load_trace(args.trace)
        if trace.measured_allreduce_s is None:
            raise SimulatorError(f"{args.trace} has no measured all-reduce times")
        cmp = compare_with_measured(fit.cost, np.array([l.numel for l in trace.layers], dtype=float),
                                    np.array(trace.measured_allreduce_s))
        print(f"against {args.trace.name}: {int(cmp['messages'])} messages, median measured/predicted "
              f"{cmp['median_ratio']:.2f}, sum measured {cmp['measured_sum_s'] * 1e3:.1f} ms, "
              f"sum predicted {cmp['predicted_sum_s'] * 1e3:.1f} ms")
    return 0


def _reproduce(args: argparse.Namespace) -> int:
    from simulator.reproduce import reproduce

    command = "gradfabric sim reproduce"
    if args.traces != DEFAULT_TRACES:
        command += f" --traces {_shown(args.traces)}"
    out = default_results() if args.out is None else args.out
    if args.out is not None:
        command += f" --out {_shown(args.out)}"
    print(reproduce(args.traces, out, command), end="")
    print(f"wrote {out}", file=sys.stderr)
    return 0


def _validate(args: argparse.Namespace) -> int:
    from simulator.validate import validate

    command = f"gradfabric sim validate {_shown(args.results)}"
    if args.job_trace is not None:
        command += f" --job-trace {_shown(args.job_trace)}"
    if args.baseline is not None:
        command += f" --baseline {_shown(args.baseline)}"
    if args.traces != DEFAULT_TRACES:
        command += f" --traces {_shown(args.traces)}"
    if args.cpu != "dlcp-recorded":
        command += f" --cpu {args.cpu}"
    if args.without:
        command += f" --without {','.join(sorted(args.without))}"
    if args.with_terms:
        command += f" --with {','.join(sorted(args.with_terms))}"
    if args.notes is not None:
        command += f" --notes {_shown(args.notes)}"
    if args.leave_out:
        command += f" --leave-out {','.join(args.leave_out)}"
    out = default_results() / "validation" if args.out is None else args.out
    if args.out is not None:
        command += f" --out {_shown(args.out)}"
    try:
        notes = args.notes.read_text().strip() if args.notes is not None else ""
    except OSError as exc:
        raise SimulatorError(f"--notes {args.notes}: {exc.strerror}") from None
    print(validate(args.results, out, args.job_trace, args.traces, command, args.baseline, cpu_measure=args.cpu,
                   without=args.without, notes=notes, leave_out=args.leave_out, cache_dir=args.cache,
                   with_terms=args.with_terms), end="")
    print(f"wrote {out}", file=sys.stderr)
    return 0


def _stand_ins(text: str) -> dict[str, tuple[str, float | None]]:
    """``CONFIG=SOURCE[:LOSS],...`` of ``sim port-predict --as``."""
    out: dict[str, tuple[str, float | None]] = {}
    for item in (t for t in text.split(",") if t):
        config, _, rest = item.partition("=")
        source, _, loss = rest.partition(":")
        try:
            out[config.strip()] = (source.strip(), float(loss) if loss else None)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{item!r}: a loss per packet is a number (CONFIG=SOURCE[:LOSS])") from None
        if not config.strip() or not source.strip():
            raise argparse.ArgumentTypeError(f"{item!r}: give CONFIG=SOURCE[:LOSS]")
    return out


def _port_predict(args: argparse.Namespace) -> int:
    from simulator.port_predict import against, port_predict, read_prediction
    from simulator.run_model import P3_RING_FAMILY

    command = (f"gradfabric sim port-predict {' '.join(_shown(p) for p in args.sources)} --port-pps {args.port_pps:g} "
               f"--k {args.k:g}")
    if (args.tcp_cost_us, args.dlcp_cost_us) != (7.0, 14.0):
        command += f" --tcp-cost-us {args.tcp_cost_us:g} --dlcp-cost-us {args.dlcp_cost_us:g}"
    if args.transport_cost_us is not None:
        command += f" --transport-cost-us {args.transport_cost_us:g}"
    if args.traces != DEFAULT_TRACES:
        command += f" --traces {_shown(args.traces)}"
    if args.stand_ins:
        command += " --as " + ",".join(f"{c}={src}" + (f":{loss:g}" if loss is not None else "")
                                        for c, (src, loss) in args.stand_ins.items())
    out = default_results() / "port-predict" if args.out is None else args.out
    if args.out is not None:
        command += f" --out {_shown(args.out)}"
    if args.p3_cost_us is not None:
        command += f" --p3-cost-us {args.p3_cost_us:g}"
    p3 = args.tcp_cost_us if args.p3_cost_us is None else args.p3_cost_us
    costs = {"trace/tcp": args.tcp_cost_us * 1e-6, "trace/tcp" + P3_RING_FAMILY: p3 * 1e-6,
             "trace/dlcp+ecn (gso) [per process]": args.dlcp_cost_us * 1e-6}
    if args.transport_cost_us is not None:
        costs["trace/dlcp (gso) [per process]"] = args.transport_cost_us * 1e-6
    if args.against:
        command += f" --against {' '.join(_shown(p) for p in args.against)}"
        before = before_p99 = None
        if args.p99:
            command += " --p99"
        if args.before is not None:
            command += f" --before {_shown(args.before)}"
            before = read_prediction(args.before)
            before_p99 = read_prediction(args.before, 9) if args.p99 else None
        name, text = "against.md", f"Made by `{command}`.\n\n" + against(args.against, args.traces, costs,
                                                                           before=before, before_p99=before_p99)
    else:
        name, text = "prediction.md", port_predict(args.sources, args.port_pps, args.k, args.traces, command, costs,
                                                   stand_ins=args.stand_ins)
    out.mkdir(parents=True, exist_ok=True)
    (out / name).write_text(text)
    print(text, end="")
    print(f"wrote {out / name}", file=sys.stderr)
    return 0


def _profile(args: argparse.Namespace) -> int:
    import importlib

    from simulator.torch_profile import builtin_model, profile_model, require_torch
    from simulator.traces import format_passes, format_pytorch, passes_path

    torch = require_torch()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    if ":" in args.model:
        module_name, _, func = args.model.partition(":")
        try:
            model = getattr(importlib.import_module(module_name), func)()
        except (ImportError, AttributeError) as exc:
            raise SimulatorError(f"cannot build model {args.model}: {exc}") from None
        if args.input_shape is None:
            raise SimulatorError("--input-shape is needed for module:function models")
        example = torch.randn(args.batch, *args.input_shape)
        name = func
    else:
        model, make_input = builtin_model(args.model)
        example = make_input(args.batch)
        name = args.model
    prof = profile_model(model, example, name=name, repeats=args.repeats, time_scale=args.time_scale)
    p = prof.passes
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(format_pytorch(name, p.precision, p.batch, prof.tensors))
    env = {"device": "cpu", "torch": str(torch.__version__), "optimizer": "SGD momentum 0.9",
           "time_scale": str(args.time_scale)}
    passes_path(args.out).write_text(format_passes([p], env))
    print(f"{name}: {len(prof.tensors)} tensors, {p.numel:,} parameters, forward {p.forward_s * 1e3:.2f} ms, "
          f"backward {p.backward_s * 1e3:.2f} ms, optimizer {p.optimizer_s * 1e3:.2f} ms (times x {args.time_scale}); "
          f"wrote {args.out} and {passes_path(args.out)}")
    return 0
