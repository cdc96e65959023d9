"""A UDP relay that loses, duplicates or reorders DLCP packets on purpose (for experiments).

It sits between one sender and one receiver on loopback: the sender talks to the relay's
address, the relay forwards to the receiver through its own socket and carries the replies
back. A `verdict(header, data)` function decides per forwarded datagram how many copies to
send (0 drops it); `hold` reverses the order of every group of that many forwarded data
packets (a probe first flushes the group, so it never overtakes data). Three impairments of a
sprayed, congested fabric can be added: `overtake` lets each control packet (probe) pass
the last that many data packets before it, which follow right behind it (as when the probe
took a shorter path); `control_delay` holds control packets back for that many seconds (or
`control_delay(header)` seconds, each its own); and
`mark_ce(header)` chooses data packets to forward with IP ECN = CE, as a congested switch
marks them; `late(header)` holds a data packet back that many seconds (0: not at all), as a
long queue on another path does.
"""

from __future__ import annotations

import bisect
import random
import select
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from hosts.endpoint import SOCKET_BUFFER, set_buffer
from hosts.receiver import Address
from hosts.wire import HEADER_LEN, Header, unpack_header

Verdict = Callable[[Header, bytes], int]
_CE = struct.pack("i", 3)  # IP_TOS ancillary value: ECN = CE


@dataclass
class RelayStats:
    forwarded: int = 0
    dropped: int = 0
    duplicated: int = 0
    replies: int = 0
    overtaken: int = 0  # data packets a control packet overtook
    ce_marked: int = 0
    seen: list[Header] = field(default_factory=list)


class Relay:
    """See the module doc. Use as a context manager."""

    def __init__(self, target: Address, verdict: Verdict | None = None, hold: int = 1,
                 listen: Address = ("127.0.0.1", 0), record: bool = True, *, overtake: int = 0,
                 control_delay: float | Callable[[Header], float] = 0.0, mark_ce: Callable[[Header], bool] | None = None,
                 late: Callable[[Header], float] | None = None) -> None:
        self.target = target
        self.verdict = verdict or (lambda header, data: 1)
        self.hold = max(1, hold)
        self.stats = RelayStats()
        self.record = record  # keep every header seen in stats.seen
        self.overtake = max(0, overtake)
        self.control_delay = control_delay
        self.mark_ce = mark_ce
        self.late = late
        self._late: list[tuple[float, bytes]] = []  # data held back and when they are due
        self._lagging: deque[bytes] = deque()  # the last data packets, for a probe to overtake
        self._delayed: list[tuple[float, bytes]] = []  # control packets and when they are due, in order
        self._front = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._back = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        for sock, where in ((self._front, listen), (self._back, (listen[0], 0))):
            set_buffer(sock, getattr(socket, "SO_RCVBUFFORCE", 33), socket.SO_RCVBUF, SOCKET_BUFFER)
            sock.bind(where)
        self._client: Address | None = None
        self._held: list[bytes] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="dlcp-relay", daemon=True)
        self._thread.start()

    @property
    def address(self) -> Address:
        return self._front.getsockname()

    @property
    def source(self) -> Address:
        """The address the relay forwards from (what the receiver sees as the sender)."""
        return self._back.getsockname()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self._front.close()
        self._back.close()

    def __enter__(self) -> Relay:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _loop(self) -> None:
        poller = select.poll()
        poller.register(self._front, select.POLLIN)
        poller.register(self._back, select.POLLIN)
        front, back = self._front.fileno(), self._back.fileno()
        while not self._stop.is_set():
            wait_ms = 50
            due = [t for t, _ in self._delayed[:1] + self._late]
            if due:
                wait_ms = max(0, min(50, int((min(due) - time.monotonic()) * 1000) + 1))
            events = poller.poll(wait_ms)
            if self._late:
                now = time.monotonic()
                for item in [x for x in self._late if x[0] <= now]:
                    self._late.remove(item)
                    self._send_data(item[1])
            while self._delayed and self._delayed[0][0] <= time.monotonic():
                self._send_control(self._delayed.pop(0)[1])
            if not events and self._held:
                self._flush()
            if not events and self._lagging and not self._delayed:
                self._release_lagging(overtaken=False)  # idle link: nothing to overtake them
            for fd, _ in events:
                if fd == front:
                    data, self._client = self._front.recvfrom(65536)
                    self._forward(data)
                elif fd == back:
                    data, _ = self._back.recvfrom(65536)
                    if self._client is not None:
                        self.stats.replies += 1
                        self._front.sendto(data, self._client)

    def _forward(self, data: bytes) -> None:
        if len(data) < HEADER_LEN:
            copies = 1
        else:
            header = unpack_header(data)
            if self.record:
                self.stats.seen.append(header)
            copies = self.verdict(header, data)
            if header.msg_type > 1 and copies > 0:
                self._flush()  # control packets never overtake the data held back
                self.stats.forwarded += 1
                hold = self.control_delay(header) if callable(self.control_delay) else self.control_delay
                if hold > 0:
                    bisect.insort(self._delayed, (time.monotonic() + hold, data), key=lambda item: item[0])
                else:
                    self._send_control(data)
                return
        if copies <= 0:
            self.stats.dropped += 1
            return
        delay = self.late(header) if self.late is not None and len(data) >= HEADER_LEN else 0.0
        if delay > 0:
            self.stats.forwarded += 1
            self._late.extend([(time.monotonic() + delay, data)] * copies)
            return
        self.stats.forwarded += 1
        self.stats.duplicated += copies - 1
        self._held.extend([data] * copies)
        if len(self._held) >= self.hold:
            self._flush()

    def _flush(self) -> None:
        for data in reversed(self._held):
            if self.overtake:
                self._lagging.append(data)
                while len(self._lagging) > self.overtake:
                    self._send_data(self._lagging.popleft())
            else:
                self._send_data(data)
        self._held.clear()

    def _send_data(self, data: bytes) -> None:
        if self.mark_ce is not None and len(data) >= HEADER_LEN and self.mark_ce(unpack_header(data)):
            self.stats.ce_marked += 1
            self._back.sendmsg([data], [(socket.IPPROTO_IP, socket.IP_TOS, _CE)], 0, self.target)
        else:
            self._back.sendto(data, self.target)

    def _send_control(self, data: bytes) -> None:
        if self.overtake:
            self._lagging.append(data)  # sent first below; the lagging data follow it
            self._lagging.rotate(1)
        else:
            self._back.sendto(data, self.target)
        self._release_lagging()

    def _release_lagging(self, overtaken: bool = True) -> None:
        while self._lagging:
            data = self._lagging.popleft()
            if len(data) < HEADER_LEN or data[0] & 0x0F <= 1:
                self.stats.overtaken += overtaken
                self._send_data(data)
            else:
                self._back.sendto(data, self.target)


def random_impairment(*, loss: float, duplicate: float, seed: int | None = None) -> Verdict:
    """Drop each data packet with probability `loss`, send it twice with `duplicate`
    (control packets are never touched: lose them with a real link when needed)."""
    rng = random.Random(seed)

    def verdict(header: Header, data: bytes) -> int:
        if header.msg_type > 1:
            return 1
        if rng.random() < loss:
            return 0
        return 2 if rng.random() < duplicate else 1

    return verdict
