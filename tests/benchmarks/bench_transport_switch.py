"""The DLCP transport against raw UDP through one embedded switch, no port rate limit.

The three namespace hosts of :mod:`tests.benchmarks.bench_transport_fabric` on one
``p4switch`` running ``p4src/dlcp.p4`` with routes only and no rate limit, so the switch
(and the hosts' CPU) is the bottleneck. In the same run:

* what the switch forwards of UDP frames of a full DLCP packet's size (1,514 bytes) sent by
  the C sender of :mod:`tests.benchmarks.bench_switch` (``blaster.c``, sendmmsg), counted by
  the receiving interface: the most it forwarded over offered rates from 100,000 frames/s up
  to flat out (offered flat out the switch drops most frames and forwards less than at a
  lower offered rate, so flat out alone is no baseline);
* the packets per second one DLCP sender moves through the same switch (bound 0, 1 MB
  messages, four in flight), counted as the packets of the messages it completed, with UDP
  GSO (the hosts' veths do not offer UDP segmentation, so the kernel splits each datagram
  before the veth) and with one datagram per packet (``GRADFABRIC_UDP_GSO=0``), alternating,
  medians of ``ROUNDS``;
* the CPU time per packet of the DLCP sender and of the receiving endpoint while sending.

Needs root and iproute2; takes the namespace lock (``/tmp/gradfabric-netns.lock``).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import statistics
import tempfile
from pathlib import Path

from tests.benchmarks import bench_transport_fabric as tf
from tests.benchmarks.figure import Figure

SECONDS = 6.0
ROUNDS = 2
#: UDP payload of a DLCP data packet: 28-byte header and 361 float32 values.
PAYLOAD = 28 + 361 * 4
#: Offered UDP rates (frames/s; 0: flat out) whose best forwarded rate is the baseline.
UDP_OFFERED = (100_000, 150_000, 200_000, 250_000, 300_000, 400_000, 0)


def run() -> list[Figure]:
    if shutil.which("ip") is None:
        print("bench_transport_switch: skipped (needs iproute2)")
        return []
    tf.LOCK.touch(exist_ok=True)
    with open(tf.LOCK) as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _measure()


def _measure() -> list[Figure]:
    from gradfabric import fabric as fabric_mod
    from tests.benchmarks.bench_switch import _build_blaster, _forwarded_pps, _udp_frame

    with tempfile.TemporaryDirectory(prefix="gf-bench-") as tmp, tf._bed(rate_pps=None) as hosts:
        blaster = _build_blaster(Path(tmp))
        sender, receiver = hosts["sender"], hosts["receiver"]
        gateway = fabric_mod.switch_port_mac(1, tf.HOSTS["sender"][0])
        frame = _udp_frame(sender, receiver, gateway, 19601, bytes(PAYLOAD))
        udp_rates = []
        for offered in UDP_OFFERED:
            print(f"  UDP through the switch (blaster, {f'{offered:,}/s' if offered else 'flat out'}) ...", flush=True)
            udp_rates.append(_forwarded_pps(blaster, sender, receiver, frame, offered))
            print(f"    offered {udp_rates[-1].offered_pps:,.0f}/s, forwarded {udp_rates[-1].received_pps:,.0f}/s",
                  flush=True)
        udp = max(udp_rates, key=lambda r: r.received_pps)
        runs: dict[str, list[tuple[float, float, float]]] = {"no GSO": [], "GSO": []}
        for round_ in range(ROUNDS):  # alternating, so load from elsewhere weighs on both
            for label, env in (("no GSO", "0"), ("GSO", "1")):
                print(f"  one DLCP stream, bound 0, {label}, round {round_ + 1} ...", flush=True)
                os.environ["GRADFABRIC_UDP_GSO"] = env
                try:
                    run = tf._dlcp_run(hosts, [("sender", 1, "stream")], bound=0.0, seconds=SECONDS)[0]
                finally:
                    os.environ.pop("GRADFABRIC_UDP_GSO", None)
                sent = max(1, run["packets"] + run["retransmitted"])
                runs[label].append((run["packets"] / run["seconds"], run["cpu_s"] / sent * 1e9,
                                    run["receiver_cpu_s"] / sent * 1e9))
                pps, snd, rcv = runs[label][-1]
                print(f"    DLCP {pps:,.0f} packets/s, {run['retransmitted']} resent, CPU per packet: "
                      f"sender {snd:,.0f} ns, receiver {rcv:,.0f} ns (user + system, all threads, while "
                      f"sending)", flush=True)
        dlcp = {label: tuple(statistics.median(r[k] for r in rs) for k in range(3)) for label, rs in runs.items()}
    best = dlcp["GSO"]
    return [Figure("DLCP packets/s through one switch, 1 stream, bound 0 (sender UDP GSO)", best[0],
                   f"UDP frames of the same size, the most forwarded (blaster, offered "
                   f"{udp.offered_pps:,.0f}/s)", udp.received_pps, "packets/s"),
            Figure("DLCP packets/s through one switch, sender UDP GSO", best[0],
                   "one datagram per packet (GRADFABRIC_UDP_GSO=0)", dlcp["no GSO"][0], "packets/s"),
            Figure("DLCP sender CPU per packet through one switch, UDP GSO", best[1],
                   "one datagram per packet", dlcp["no GSO"][1], "ns", higher_is_better=False)]


if __name__ == "__main__":
    from tests.benchmarks.figure import print_table

    print_table(run())
