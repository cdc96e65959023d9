"""TCP_INFO of a socket (experiments.training.tcp_info) on a real loopback connection, checked
against the kernel's other reader, ``ss -ti``."""

from __future__ import annotations

import re
import shutil
import socket
import struct
import subprocess
import threading
import time

import pytest

from experiments.training.tcp_info import decode, tcp_info


def _pair() -> tuple[socket.socket, socket.socket]:
    server = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(server.getsockname(), timeout=10)
    conn, _ = server.accept()
    server.close()
    return client, conn


def _drain(sock: socket.socket, n: int) -> None:
    got = 0
    while got < n:
        got += len(sock.recv(1 << 16))


def test_a_loopback_connection_as_the_kernel_reports_it() -> None:
    client, conn = _pair()
    try:
        sent = 4 << 20
        reader = threading.Thread(target=_drain, args=(conn, sent))
        reader.start()
        client.sendall(b"\0" * sent)
        reader.join(timeout=30)
        assert not reader.is_alive()
        deadline = time.monotonic() + 5
        info = tcp_info(client)
        while info["bytes_acked"] < sent and time.monotonic() < deadline:  # the last ACK may lag on a loaded machine
            time.sleep(0.01)
            info = tcp_info(client)
        assert info["state"] == 1  # TCP_ESTABLISHED
        assert sent <= info["bytes_acked"] <= sent + 1  # the SYN counts one
        assert info["bytes_sent"] >= sent and info["segs_out"] >= sent // 65536
        assert info["unacked"] == 0 and info["total_retrans"] == 0 and info["lost"] == 0
        assert 200_000 <= info["rto_us"] <= 120_000_000  # Linux's rto_min and rto_max
        assert info["rtt_us"] > 0 and info["snd_cwnd"] >= 2 and info["snd_mss"] > 0
        assert tcp_info(conn)["bytes_received"] >= sent
        if shutil.which("ss"):
            port = client.getsockname()[1]
            out = subprocess.run(["ss", "-tinH", "state", "established", f"( sport = :{port} )"],
                                 capture_output=True, text=True, timeout=10).stdout
            assert f"cwnd:{tcp_info(client)['snd_cwnd']}" in out
            rto_ms = float(re.search(r"\brto:([\d.]+)", out).group(1))  # type: ignore[union-attr]
            assert rto_ms == pytest.approx(tcp_info(client)["rto_us"] / 1000, abs=1)
    finally:
        client.close()
        conn.close()
    assert tcp_info(client) == {}  # closed: nothing to read


def test_a_shorter_structure_gives_the_fields_it_holds() -> None:
    raw = struct.pack("@8B24I", 1, 4, 2, 0, 3, 0, 0, 0, 612_000, 0, 1448, 536, 7, 0, 5, 2, 0, 0, 0, 0, 0, 65535,
                      0, 1500, 750, 20, 12, 0, 3, 0, 0, 9)
    info = decode(raw)
    assert (info["state"], info["ca_state"], info["retransmits"], info["backoff"]) == (1, 4, 2, 3)
    assert (info["rto_us"], info["snd_mss"], info["unacked"], info["lost"], info["retrans"]) == (612_000, 1448, 7, 5, 2)
    assert (info["rtt_us"], info["rttvar_us"], info["snd_ssthresh"], info["snd_cwnd"]) == (1500, 750, 20, 12)
    assert info["total_retrans"] == 9 and "pacing_rate_Bps" not in info and "bytes_acked" not in info
