"""The DLCP transport against TCP through one embedded switch with a rate-limited port.

Three namespace hosts (``sender``, ``second``, ``receiver``) on one ``p4switch`` running
``p4src/dlcp.p4`` with routes installed; the receiver's port egresses at
:data:`PORT_RATE_PPS` packets/s with a :data:`DEPTH`-packet queue (tail drop, one queue for
everything). Every figure is measured against TCP (iperf3, or a TCP socket for messages)
over the same port in the same run:

* goodput of one DLCP stream of 1 MB messages, loss bound 0, four in flight, against one
  iperf3 TCP flow;
* completion time p50/p99 of 1 MB messages sent one after another with 1 % random loss
  (DLCP through :mod:`hosts.relay`; TCP through ``tc netem`` on the sender, or, on kernels
  without netem, a ``tc`` classic-BPF random match steering 1 % of the sender's packets
  into a class that drops them) at bound 0 and at bound 1 %;
* two DLCP senders sharing the port (the slower one's goodput against the faster one's);
* a DLCP stream and an iperf3 TCP flow sharing the port (DLCP's goodput against TCP's).

Needs root, iproute2 and iperf3; takes the namespace lock (``/tmp/gradfabric-netns.lock``).
"""

from __future__ import annotations

import fcntl
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from tests.benchmarks.figure import Figure

PORT_RATE_PPS = 2000
DEPTH = 64
SECONDS = 8.0
MESSAGE = 1 << 18  # float32 elements: 1 MiB
SERIAL = 30  # messages per completion-time run
LOCK = Path("/tmp/gradfabric-netns.lock")
HOSTS = {"sender": (1, "10.0.1.1"), "blaster": (2, "10.0.2.1"), "receiver": (3, "10.0.3.1")}
RECEIVER_IP = HOSTS["receiver"][1]

RECEIVER = """
import sys
from hosts.endpoint import Endpoint
from hosts.wire import MsgType
bound = float(sys.argv[3])
with Endpoint(worker_id=0, host=sys.argv[1], port=int(sys.argv[2]), linger=0,
              bounds={MsgType.GRADIENT: bound, MsgType.PARAMETER: bound}) as ep:
    print("ready", flush=True)
    while True:
        ep.receive(timeout=3600)
"""

SENDER = """
import json, sys, time
import numpy as np
from hosts.endpoint import Endpoint
from hosts.wire import MsgType
dest, seconds, bound, inflight, worker, mode, elements = ((sys.argv[1], int(sys.argv[2])), float(sys.argv[3]),
    float(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]), sys.argv[7], int(sys.argv[8]))
values = np.random.default_rng(worker).normal(size=elements).astype(np.float32)
with Endpoint(worker_id=worker, host=sys.argv[9], peer_timeout=30,
              bounds={MsgType.GRADIENT: bound, MsgType.PARAMETER: bound}) as ep:
    print("ready", flush=True)
    started, cpu0 = time.perf_counter(), time.process_time()
    times, done_bytes, retx, packets = [], 0, 0, 0
    if mode == "serial":
        for i in range(int(seconds)):
            r = ep.send(dest, values, iteration=i)
            times.append(r.seconds); retx += r.retransmitted; packets += r.packets
        done_bytes = int(seconds) * values.nbytes
    else:
        futures, i = [], 0
        while time.perf_counter() - started < seconds:
            while len(futures) < inflight:
                futures.append(ep.send_async(dest, values, copy=False, iteration=i)); i += 1  # values never change
            r = futures.pop(0).result()
            done_bytes += values.nbytes; retx += r.retransmitted; packets += r.packets
        for f in futures:
            r = f.result(); done_bytes += values.nbytes; retx += r.retransmitted; packets += r.packets
    took = time.perf_counter() - started
    print("result " + json.dumps({"bytes": done_bytes, "seconds": took, "times": times, "retransmitted": retx,
                                  "packets": packets, "cwnd": ep.window.cwnd, "cuts": ep.window.decreases,
                                  "cpu_s": time.process_time() - cpu0}),
          flush=True)
"""

TCP_MESSAGES = """
import json, socket, sys, time
mode, host, port, count, size = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
if mode == "server":
    srv = socket.create_server((host, port)); print("ready", flush=True)
    conn, _ = srv.accept()
    for _ in range(count):
        got = 0
        while got < size:
            data = conn.recv(1 << 20)
            if not data:
                raise SystemExit("the client closed early")
            got += len(data)
        conn.sendall(b"k")
else:
    sock = socket.create_connection((host, port)); sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    payload, times = bytes(size), []
    for _ in range(count):
        t = time.perf_counter(); sock.sendall(payload); sock.recv(1); times.append(time.perf_counter() - t)
    print("result " + json.dumps({"times": times}), flush=True)
"""


def _python(ns: str, script: str, *args: str) -> subprocess.Popen[str]:
    from gradfabric.paths import ROOT

    return subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, "-c", script, *args], cwd=str(ROOT),
                            text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def _line(proc: subprocess.Popen[str], prefix: str) -> str:
    assert proc.stdout is not None
    said = []
    for line in proc.stdout:
        if line.startswith(prefix):
            return line[len(prefix):].strip()
        said.append(line)
    raise RuntimeError(f"no {prefix!r} line (exit {proc.wait(10)}):\n{''.join(said[-20:])}")


def _stop(*procs: subprocess.Popen[str]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        if proc.stdout:
            proc.stdout.close()


@contextmanager
def _bed(rate_pps: int | None = PORT_RATE_PPS) -> Iterator[dict]:
    """The three hosts on one switch; the receiver's port limited to `rate_pps` (None: not)."""
    from controller.fabric_controller import FabricController
    from controller.routing import ROUTE_TABLES, route_entries
    from gradfabric.p4build import compile_embedded
    from gradfabric.paths import ROOT
    from tests import netns
    from tests.test_hosts_switch_e2e import _build
    from tests.test_switch_process import switch_process

    with tempfile.TemporaryDirectory(prefix="gf-bench-") as tmp, netns.lab() as lab:
        hosts, ports = {}, {}
        for name, (port, ip) in HOSTS.items():
            hosts[name], ports[name] = lab.add_host(port, ip)
        args = ["--no-p4", "--device-id", "1", "--cpu-port", "510", "--log-level", "warn"]
        if rate_pps is not None:
            args += ["--queue-rate", f"3={rate_pps}pps", "--queue-depth", f"3={DEPTH}"]
        for name, (port, _) in HOSTS.items():
            args += ["-i", f"{port}@{ports[name]}"]
        with switch_process(args, Path(tmp) / "s1.log") as (_, address):
            artifacts = compile_embedded(ROOT / "p4src" / "dlcp.p4", Path(tmp) / "build")
            bed = _build(hosts, ports, artifacts, address)
            with FabricController.for_fabric(bed.fabric, bed.pipeline, request_logs=False) as controller:
                controller.apply(route_entries(bed.fabric, bed.pipeline.schema), ROUTE_TABLES)
            yield {name: host for name, host in bed.hosts.items()}


def _dlcp_run(hosts: dict, senders: list[tuple[str, int, str]], *, bound: float, inflight: int = 4,
              seconds: float = SECONDS, relay_loss: float | None = None) -> list[dict]:
    """Run DLCP senders ((host, worker id, mode)) to one receiver; their result lines."""
    receiver, relay = hosts["receiver"], None
    if relay_loss is None:
        recv = _python(receiver.ns, RECEIVER, RECEIVER_IP, "19600", str(bound))
        port = 19600
    else:
        recv = _python(receiver.ns, RECEIVER, "127.0.0.1", "19700", str(bound))
        relay = subprocess.Popen(
            ["ip", "netns", "exec", receiver.ns, sys.executable, "-m", "gradfabric.command.cli", "agent", "relay",
             "--listen", f"{RECEIVER_IP}:19600", "--to", "127.0.0.1:19700", "--loss", str(relay_loss),
             "--seed", "1", "--seconds", "600"], text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        _line(relay, '{"address"')
        port = 19600
    procs = [recv] + ([relay] if relay else [])
    try:
        _line(recv, "ready")
        started = []
        for name, worker, mode in senders:
            proc = _python(hosts[name].ns, SENDER, RECEIVER_IP, str(port), str(seconds), str(bound), str(inflight),
                           str(worker), mode, str(MESSAGE), HOSTS[name][1])
            procs.append(proc)
            started.append(proc)
        for proc in started:
            _line(proc, "ready")
        cpu0 = _cpu_seconds(recv.pid)
        results = [json.loads(_line(proc, "result ")) for proc in started]
        results[0]["receiver_cpu_s"] = _cpu_seconds(recv.pid) - cpu0
        return results
    finally:
        _stop(*procs)


def _cpu_seconds(pid: int) -> float:
    """User and system CPU time of process `pid` and its finished children (``/proc/<pid>/stat``)."""
    import os

    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def _iperf(hosts: dict, client: str, seconds: float) -> tuple[subprocess.Popen[str], subprocess.Popen[str]]:
    server = subprocess.Popen(["ip", "netns", "exec", hosts["receiver"].ns, "iperf3", "-s", "-1", "-B", RECEIVER_IP],
                              text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    time.sleep(0.5)
    proc = subprocess.Popen(["ip", "netns", "exec", hosts[client].ns, "iperf3", "-c", RECEIVER_IP, "-t", f"{seconds:g}",
                             "-J"], text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    return server, proc


def _iperf_goodput(server: subprocess.Popen[str], proc: subprocess.Popen[str]) -> float:
    out, _ = proc.communicate(timeout=SECONDS * 4 + 30)
    _stop(server)
    report = json.loads(out)
    if "error" in report:
        raise RuntimeError(f"iperf3: {report['error']}")
    return float(report["end"]["sum_received"]["bytes"]) / float(report["end"]["sum_received"]["seconds"])


def _random_match(probability: float) -> str:
    """Classic BPF for ``tc filter ... bpf``: match (return -1) when the kernel's random
    number is below `probability` of its range (ld rand; jge threshold: no match)."""
    threshold = int(probability * 2**32)
    return f"4,32 0 0 {2**32 - 4096 + 56},53 1 0 {threshold},6 0 0 4294967295,6 0 0 0"


@contextmanager
def _lossy(host: object, loss: float) -> Iterator[str | None]:
    """Random loss of `loss` on everything `host` sends: netem when the kernel has it, else
    an htb class whose tbf leaf drops every full-size packet, chosen by a classic-BPF random
    match. Yields how, or None when neither works."""
    from tests import netns

    ns, dev = host.ns, host.iface  # type: ignore[attr-defined]
    tc = ("tc", "qdisc", "del", "dev", dev, "root")
    if netns.in_ns(ns, "tc", "qdisc", "add", "dev", dev, "root", "netem", "loss", f"{loss * 100:g}%",
                   check=False).returncode == 0:
        how: str | None = "netem"
    else:
        # One packet per skb, so that a drop is one packet (no GSO batches).
        netns.in_ns(ns, "ethtool", "-K", dev, "gso", "off", "tso", "off", "gro", "off", check=False)
        steps = [
            ("tc", "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "1"),
            ("tc", "class", "add", "dev", dev, "parent", "1:", "classid", "1:1", "htb", "rate", "10gbit"),
            ("tc", "class", "add", "dev", dev, "parent", "1:", "classid", "1:2", "htb", "rate", "10gbit"),
            ("tc", "qdisc", "add", "dev", dev, "parent", "1:2", "tbf", "rate", "1mbit", "burst", "200",
             "limit", "1000"),
            ("tc", "filter", "add", "dev", dev, "parent", "1:", "bpf", "bytecode", _random_match(loss),
             "classid", "1:2"),
        ]
        how = "random tc bpf drop"
        for step in steps:
            if netns.in_ns(ns, *step, check=False).returncode != 0:
                how = None
                break
    try:
        yield how
    finally:
        netns.in_ns(ns, *tc, check=False)


def _tcp_counters(ns: str) -> dict[str, int]:
    """The namespace's TCP segment counters (nstat, absolute, without touching its history)."""
    from tests import netns

    out = netns.in_ns(ns, "nstat", "-asz", "TcpOutSegs", "TcpRetransSegs", check=False).stdout
    return {f[0]: int(f[1]) for f in (line.split() for line in out.splitlines()) if len(f) >= 2 and f[1].isdigit()}


def _tcp_messages(hosts: dict, loss: float) -> tuple[list[float], str] | None:
    sender = hosts["sender"]
    before = _tcp_counters(sender.ns)
    with _lossy(sender, loss) as how:
        if how is None:
            return None
        server = _python(hosts["receiver"].ns, TCP_MESSAGES, "server", RECEIVER_IP, "5301", str(SERIAL),
                         str(MESSAGE * 4))
        _line(server, "ready")
        client = _python(sender.ns, TCP_MESSAGES, "client", RECEIVER_IP, "5301", str(SERIAL), str(MESSAGE * 4))
        try:
            times = list(json.loads(_line(client, "result "))["times"])
        finally:
            _stop(client, server)
    after = _tcp_counters(sender.ns)
    sent = after.get("TcpOutSegs", 0) - before.get("TcpOutSegs", 0)
    resent = after.get("TcpRetransSegs", 0) - before.get("TcpRetransSegs", 0)
    print(f"    TCP: {resent} of {sent} segments retransmitted", flush=True)
    return times, f"{how}; {resent} of {sent} segments resent"


def _goodput(result: dict) -> float:
    return result["bytes"] / result["seconds"]


def _percentiles(times: list[float]) -> tuple[float, float]:
    return float(np.percentile(times, 50)) * 1e3, float(np.percentile(times, 99)) * 1e3


def run() -> list[Figure]:
    if shutil.which("iperf3") is None or shutil.which("ip") is None:
        print("bench_transport_fabric: skipped (needs iperf3 and iproute2)")
        return []
    LOCK.touch(exist_ok=True)
    with open(LOCK) as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _measure()


#: Where the run's plot and table go (linked from hosts/README.md).
RESULTS = Path(__file__).resolve().parents[2] / "hosts" / "results"


def _write_results(figures: list[Figure], times: dict[str, list[float]]) -> None:
    """hosts/results/transport_fabric.{md,png}: the table and the completion-time CDFs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    RESULTS.mkdir(parents=True, exist_ok=True)
    lines = ["| benchmark | value | baseline | baseline value | ratio |", "|---|---:|---|---:|---:|"]
    lines += [f"| {f.name} | {f.value:,.1f} {f.unit} | {f.baseline_name} | {f.baseline:,.1f} {f.unit} | "
              f"{f.ratio:.3f}x |" for f in figures]
    (RESULTS / "transport_fabric.md").write_text(
        "Made by `make bench` (`python -m tests.benchmarks transport_fabric`): one embedded switch, "
        f"receiver port {PORT_RATE_PPS} packets/s, {DEPTH}-packet queue.\n\n" + "\n".join(lines) + "\n")
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for label, values in times.items():
        ordered = np.sort(np.asarray(values) * 1e3)
        ax.plot(ordered, np.arange(1, ordered.size + 1) / ordered.size, label=label)
    ax.set_xlabel("1 MB message completion time (ms), 1 % random loss")
    ax.set_ylabel("share of messages")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(RESULTS / "transport_fabric.png", dpi=110)
    plt.close(fig)


def _measure() -> list[Figure]:
    figures: list[Figure] = []
    times: dict[str, list[float]] = {}
    rate = f"{PORT_RATE_PPS} packets/s port"
    with _bed() as hosts:
        print("  one DLCP stream, bound 0 ...", flush=True)
        dlcp = _dlcp_run(hosts, [("sender", 1, "stream")], bound=0.0)[0]
        print("  one iperf3 TCP flow ...", flush=True)
        tcp = _iperf_goodput(*_iperf(hosts, "sender", SECONDS))
        figures.append(Figure(f"DLCP goodput, 1 stream, bound 0, {rate}", _goodput(dlcp) / 1e6,
                              "iperf3 TCP, same port", tcp / 1e6, "MB/s"))
        print(f"    DLCP {dlcp}", flush=True)
        tcp = _tcp_messages(hosts, 0.01)
        for bound in (0.0, 0.01):
            print(f"  1 MB messages, 1% loss, bound {bound:g} ...", flush=True)
            serial = _dlcp_run(hosts, [("sender", 1, "serial")], bound=bound, seconds=SERIAL, relay_loss=0.01)[0]
            p50, p99 = _percentiles(serial["times"])
            times[f"DLCP, bound {bound:g}"] = serial["times"]
            print(f"    DLCP {serial}", flush=True)
            if tcp is None:
                print(f"    DLCP p50 {p50:.1f} ms p99 {p99:.1f} ms; TCP baseline unavailable (no netem, no tc bpf)")
                continue
            t50, t99 = _percentiles(tcp[0])
            figures.append(Figure(f"1 MB completion p50, 1% loss, bound {bound:g}", p50,
                                  f"TCP, 1% loss ({tcp[1]})", t50, "ms", higher_is_better=False))
            figures.append(Figure(f"1 MB completion p99, 1% loss, bound {bound:g}", p99,
                                  f"TCP, 1% loss ({tcp[1]})", t99, "ms", higher_is_better=False))
        print("  two DLCP senders sharing the port ...", flush=True)
        pair = _dlcp_run(hosts, [("sender", 1, "stream"), ("blaster", 2, "stream")], bound=0.0)
        a, b = sorted(_goodput(r) for r in pair)
        figures.append(Figure("two DLCP senders: slower one's goodput", a / 1e6, "faster one's", b / 1e6, "MB/s"))
        print("  DLCP and TCP sharing the port ...", flush=True)
        server, iperf = _iperf(hosts, "blaster", SECONDS)
        try:
            shared = _dlcp_run(hosts, [("sender", 1, "stream")], bound=0.0)[0]
        finally:
            tcp_shared = _iperf_goodput(server, iperf)
        figures.append(Figure("DLCP goodput sharing the port with TCP", _goodput(shared) / 1e6,
                              "the TCP flow's goodput", tcp_shared / 1e6, "MB/s"))
    if tcp is not None:
        times[f"TCP ({tcp[1]})"] = tcp[0]
    _write_results(figures, times)
    return figures


if __name__ == "__main__":
    from tests.benchmarks.figure import print_table

    print_table(run())
