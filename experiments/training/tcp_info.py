"""The kernel's view of a TCP socket (Linux ``TCP_INFO``, as ``ss -ti`` shows it).

:func:`tcp_info` reads ``getsockopt(IPPROTO_TCP, TCP_INFO)`` and decodes the fields of
``struct tcp_info`` (``include/uapi/linux/tcp.h``) that say why a connection was slow:
retransmissions (``retransmits`` now, ``total_retrans`` over the connection, ``lost``),
timers (``rto_us``, ``backoff``), the window (``snd_cwnd``, ``snd_ssthresh``, ``unacked``),
round trips (``rtt_us``, ``rttvar_us``, ``min_rtt_us``), rates and what limited the sender
(``busy_time_us``, ``rwnd_limited_us``, ``sndbuf_limited_us``). A field the running kernel's
structure is too short for is left out.
"""

from __future__ import annotations

import socket
import struct

#: ``struct tcp_info`` in order, native layout: (name or None to skip, struct code).
_LAYOUT: tuple[tuple[str | None, str], ...] = (
    ("state", "B"), ("ca_state", "B"), ("retransmits", "B"), ("probes", "B"), ("backoff", "B"),
    (None, "B"), (None, "B"), (None, "B"),  # options, wscales, app-limited bits
    ("rto_us", "I"), ("ato_us", "I"), ("snd_mss", "I"), ("rcv_mss", "I"),
    ("unacked", "I"), ("sacked", "I"), ("lost", "I"), ("retrans", "I"), (None, "I"),  # fackets
    (None, "I"), (None, "I"), (None, "I"), (None, "I"),  # last data/ack sent/received
    ("pmtu", "I"), (None, "I"), ("rtt_us", "I"), ("rttvar_us", "I"),  # rcv_ssthresh
    ("snd_ssthresh", "I"), ("snd_cwnd", "I"), (None, "I"), ("reordering", "I"),  # advmss
    (None, "I"), (None, "I"),  # rcv_rtt, rcv_space
    ("total_retrans", "I"),
    ("pacing_rate_Bps", "Q"), (None, "Q"), ("bytes_acked", "Q"), ("bytes_received", "Q"),
    ("segs_out", "I"), ("segs_in", "I"),
    ("notsent_bytes", "I"), ("min_rtt_us", "I"), (None, "I"), (None, "I"),  # data segs in/out
    ("delivery_rate_Bps", "Q"),
    ("busy_time_us", "Q"), ("rwnd_limited_us", "Q"), ("sndbuf_limited_us", "Q"),
    ("delivered", "I"), ("delivered_ce", "I"),
    ("bytes_sent", "Q"), ("bytes_retrans", "Q"), ("dsack_dups", "I"), ("reord_seen", "I"),
)
_READ = 512  # more than any kernel's struct tcp_info so far; the kernel returns its own length


def decode(raw: bytes) -> dict[str, int]:
    """The named fields of a ``struct tcp_info`` as the kernel returned it (shorter: fewer fields)."""
    out: dict[str, int] = {}
    fmt = "@"
    for name, code in _LAYOUT:
        fmt += code
        size = struct.calcsize(fmt)
        if size > len(raw):
            break
        if name is not None:
            out[name] = struct.unpack_from(fmt, raw)[-1]
    return out


def tcp_info(sock: socket.socket) -> dict[str, int]:
    """``sock``'s ``TCP_INFO`` (module doc); an empty dict when the socket is closed or not TCP."""
    try:
        raw = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _READ)
    except OSError:
        return {}
    return decode(raw)
