"""Switch ports: Linux interfaces through AF_PACKET raw sockets, or in-memory ports; pcaps.

In-memory ports and :class:`VirtualClock` play the role of BMv2's ``--use-files``: a test
injects frames and reads what left, with time under its control.
"""

from __future__ import annotations

import re
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Protocol

from p4switch.errors import P4SwitchError

ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4
SOL_PACKET = 263  # linux/socket.h
PACKET_IGNORE_OUTGOING = 23  # linux/if_packet.h, Linux 4.20+
MAX_FRAME = 65535 + 14


class PortError(P4SwitchError):
    """A port that cannot be opened or a bad port specification."""


class Clock(Protocol):
    def now_us(self) -> int: ...


class WallClock:
    """Microseconds from a monotonic clock."""

    def __init__(self) -> None:
        self._start = time.monotonic_ns()

    def now_us(self) -> int:
        return (time.monotonic_ns() - self._start) // 1000


@dataclass
class VirtualClock:
    """A clock that moves only when told to."""

    time_us: int = 0

    def now_us(self) -> int:
        return self.time_us

    def advance(self, delta_us: int) -> int:
        self.time_us += delta_us
        return self.time_us


class Port(Protocol):
    """One switch port: a number and a way to send frames out of it."""

    number: int
    name: str

    def send(self, frame: bytes) -> None: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class PortSpec:
    """``NUMBER@IFACE`` as given to ``-i``/``--interface``."""

    number: int
    iface: str

    @classmethod
    def parse(cls, text: str) -> PortSpec:
        match = re.fullmatch(r"(\d+)@([\w.:-]{1,15})", text.strip())
        if not match:
            raise PortError(f"bad interface {text!r}: expected PORT@IFACE, e.g. 1@veth1")
        number = int(match.group(1))
        if not 0 <= number < 511:
            raise PortError(f"bad interface {text!r}: port must be 0..510 (511 is the drop port)")
        return cls(number, match.group(2))


class RawSocketPort:
    """A Linux interface opened as an AF_PACKET raw socket (frames in and out, no kernel stack)."""

    def __init__(self, number: int, iface: str) -> None:
        self.number = number
        self.name = iface
        try:
            sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        except OSError as exc:
            raise PortError(f"port {number}: cannot open a raw socket ({exc}); run as root") from exc
        try:
            sock.bind((iface, 0))
        except OSError as exc:
            sock.close()
            raise PortError(f"port {number}: cannot bind to interface {iface!r}: {exc}") from exc
        try:
            sock.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
            ignores_outgoing = True
        except OSError:
            ignores_outgoing = False  # older kernels: outgoing frames are filtered in receive()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
        self.sock = sock
        self.send_errors = 0
        self._buffer = bytearray(MAX_FRAME)
        self._view = memoryview(self._buffer)
        self._filter_outgoing = not ignores_outgoing

    def fileno(self) -> int:
        return self.sock.fileno()

    def receive(self) -> bytes | None:
        """One frame that arrived on the interface (None for frames this socket sent)."""
        if self._filter_outgoing:
            frame, address = self.sock.recvfrom(MAX_FRAME)
            return None if address[2] == PACKET_OUTGOING else frame
        size = self.sock.recv_into(self._buffer)  # no 64 KiB allocation per frame
        return self._view[:size].tobytes()

    def send(self, frame: bytes) -> None:
        try:
            self.sock.send(frame)
        except OSError:
            # Oversize frames or a link that went down: the frame is lost, the switch lives on.
            self.send_errors += 1

    def close(self) -> None:
        self.sock.close()


@dataclass
class MemoryPort:
    """A port whose traffic stays in memory: frames sent out are kept with their time."""

    number: int
    clock: Clock
    name: str = ""
    sent: list[tuple[int, bytes]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        self.name = self.name or f"mem{self.number}"

    def send(self, frame: bytes) -> None:
        with self._lock:
            self.sent.append((self.clock.now_us(), bytes(frame)))

    def take(self) -> list[bytes]:
        """The frames sent so far (and forget them)."""
        with self._lock:
            frames = [f for _, f in self.sent]
            self.sent.clear()
        return frames

    def close(self) -> None:
        pass


class PcapFile:
    """A classic pcap file (microsecond timestamps, Ethernet)."""

    def __init__(self, path: Path) -> None:
        self._file: BinaryIO = path.open("wb")
        self._file.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        self._lock = threading.Lock()

    def write(self, frame: bytes) -> None:
        now = time.time()
        with self._lock:
            if self._file.closed:
                return
            self._file.write(struct.pack("<IIII", int(now), int(now % 1 * 1e6), len(frame), len(frame)))
            self._file.write(frame)

    def flush(self) -> None:
        with self._lock:
            if not self._file.closed:
                self._file.flush()

    def close(self) -> None:
        with self._lock:
            self._file.close()


@dataclass
class PcapSet:
    """``<port name>_in.pcap`` and ``<port name>_out.pcap`` for every port, as BMv2's --pcap."""

    directory: Path
    files: dict[tuple[int, str], PcapFile] = field(default_factory=dict)

    def open(self, port: int, name: str) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        for way in ("in", "out"):
            self.files[(port, way)] = PcapFile(self.directory / f"{name}_{way}.pcap")

    def write(self, port: int, way: str, frame: bytes) -> None:
        pcap = self.files.get((port, way))
        if pcap is not None:
            pcap.write(frame)

    def flush(self) -> None:
        for pcap in self.files.values():
            pcap.flush()

    def close(self) -> None:
        for pcap in self.files.values():
            pcap.close()
