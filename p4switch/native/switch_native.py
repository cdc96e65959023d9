"""The native switch loops of a loaded NativePipeline, driven from Python.

`NativeSwitch` hands the ports' AF_PACKET sockets to C threads (batched receive and send,
ingress, traffic manager, egress) that never take the GIL; a Python thread only waits for
frames the pipeline sends to the CPU port (PacketIn) and for digests. `SyncedTrafficManager`
is the Python traffic manager's configuration (what ``p4switch ctl`` changes and shows) with
every change also pushed to the running native switch.
"""

from __future__ import annotations

import ctypes
import logging
import threading
from collections.abc import Callable
from typing import Any

from p4switch.errors import P4SwitchError
from p4switch.traffic_manager import Rate, TrafficManager

log = logging.getLogger("p4switch.native")

STAT_NAMES = ("received", "transmitted", "queue_full", "bad_priority", "to_cpu", "no_such_port", "cpu_dropped",
              "digests", "failed", "oversize", "send_errors")
_PRIOS = 8
_PORTS = 512  # GF_PORTS of gf_switch.h
_MAX_FRAME = 65535 + 64  # GF_MAXFRAME of gf_runtime.h


def _declare(lib: Any) -> None:
    vp, u32, i32, dbl = ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_double
    sig = {
        "gf_sw_create": (vp, [vp, ctypes.POINTER(i32), ctypes.POINTER(u32), i32, i32, i32, u32]),
        "gf_sw_start": (i32, [vp]),
        "gf_sw_halt": (None, [vp]),
        "gf_sw_stop": (None, [vp, ctypes.POINTER(ctypes.c_uint64)]),
        "gf_sw_set_queue": (None, [vp, u32, i32, dbl, i32, u32]),
        "gf_sw_set_port_rate": (None, [vp, u32, dbl, i32]),
        "gf_sw_stats": (None, [vp, u32, ctypes.POINTER(ctypes.c_uint64)]),
        "gf_sw_queued": (u32, [vp, u32, i32]),
        "gf_sw_packet_in": (i32, [vp, ctypes.c_char_p, u32, i32, ctypes.POINTER(i32)]),
        "gf_sw_packet_out": (None, [vp, ctypes.c_char_p, u32]),
        "gf_sw_receive": (None, [vp, ctypes.c_char_p, u32, u32]),
    }
    for name, (res, args) in sig.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args


def _rate(rate: Rate | None) -> tuple[float, int]:
    return (0.0, 0) if rate is None else (float(rate.value), 1 if rate.per_bit else 0)


class NativeSwitch:
    """C packet threads over the given sockets for one native pipeline."""

    def __init__(self, pipeline: Any, sockets: dict[int, int], priority_queues: int,
                 cpu_port: int | None, default_depth: int,
                 packet_in: Callable[[bytes], None] | None = None) -> None:
        self.pipeline = pipeline
        self.lib = pipeline.lib
        _declare(self.lib)
        n = len(sockets)
        fds = (ctypes.c_int * max(n, 1))(*sockets.values())
        numbers = (ctypes.c_uint32 * max(n, 1))(*sockets.keys())
        handle = self.lib.gf_sw_create(pipeline.prog, fds, numbers, n, priority_queues,
                                       -1 if cpu_port is None else cpu_port, default_depth)
        if not handle:
            raise P4SwitchError("the native switch could not be created")
        self.sw = ctypes.c_void_p(handle)
        self.packet_in = packet_in
        self._stop = threading.Event()
        self._cpu_thread: threading.Thread | None = None
        self._running = False
        #: The last counts, kept when the switch stops (its C side is freed then).
        self._final: list[int] | None = None

    def configure(self, tm: TrafficManager) -> None:
        """Apply the rates and depths of the Python traffic manager's configuration."""
        for port in tm.ports():
            state = tm._port(port)
            for prio, queue in enumerate(state.queues):
                value, per_bit = _rate(queue.rate)
                self.lib.gf_sw_set_queue(self.sw, port, prio, value, per_bit, queue.depth)
            value, per_bit = _rate(state.rate)
            self.lib.gf_sw_set_port_rate(self.sw, port, value, per_bit)

    def start(self) -> None:
        if self.lib.gf_sw_start(self.sw) != 0:
            raise P4SwitchError("the native switch threads could not be started")
        self._running = True
        self._cpu_thread = threading.Thread(target=self._cpu_loop, name="p4switch-native-cpu", daemon=True)
        self._cpu_thread.start()

    def _cpu_loop(self) -> None:
        buf = ctypes.create_string_buffer(_MAX_FRAME)
        kind = ctypes.c_int()
        while not self._stop.is_set():
            n = self.lib.gf_sw_packet_in(self.sw, buf, _MAX_FRAME, 200, ctypes.byref(kind))  # waits without the GIL
            if n < 0:
                continue
            try:
                if kind.value == 1:
                    self.pipeline.deliver_digests(list(memoryview(buf.raw[:n]).cast("Q")))
                elif self.packet_in is not None:
                    self.packet_in(buf.raw[:n])
            except Exception as exc:  # noqa: BLE001 - a failed PacketIn must not stop the thread
                log.warning("%s failed: %s", "digest" if kind.value == 1 else "PacketIn", exc)

    def packet_out(self, frame: bytes) -> None:
        self.lib.gf_sw_packet_out(self.sw, frame, len(frame))

    def receive(self, frame: bytes, port: int) -> None:
        """A frame that arrived on `port` but was read outside the native loops (by a Python
        thread as the native switch took over): it goes through the native path, counted there."""
        if self._running:
            self.lib.gf_sw_receive(self.sw, frame, len(frame), port)

    def stats(self, port: int = 0) -> dict[str, int]:
        """Packet counts (the last ones once stopped)."""
        if self._final is not None:
            return {name: self._final[i] for i, name in enumerate(STAT_NAMES)}
        out = (ctypes.c_uint64 * (len(STAT_NAMES) + _PRIOS))()
        self.lib.gf_sw_stats(self.sw, port, out)
        return {name: int(out[i]) for i, name in enumerate(STAT_NAMES)}

    def queue_drops(self, port: int) -> list[int]:
        """Queue drops of `port` per priority (the last ones once stopped)."""
        if self._final is not None:
            at = len(STAT_NAMES) + port * _PRIOS
            return self._final[at:at + _PRIOS] if 0 <= port < _PORTS else [0] * _PRIOS
        out = (ctypes.c_uint64 * (len(STAT_NAMES) + _PRIOS))()
        self.lib.gf_sw_stats(self.sw, port, out)
        return [int(out[len(STAT_NAMES) + q]) for q in range(_PRIOS)]

    def queued(self, port: int, priority: int | None = None) -> int:
        return int(self.lib.gf_sw_queued(self.sw, port, -1 if priority is None else priority))

    def stop(self) -> None:
        """Stop the threads (the sockets stay open: they belong to the ports)."""
        if not self._running:
            return
        self._running = False
        self._stop.set()
        self.lib.gf_sw_halt(self.sw)  # the CPU thread's wait ends at once ...
        final = (ctypes.c_uint64 * (len(STAT_NAMES) + _PORTS * _PRIOS))()
        if self._cpu_thread is not None:
            self._cpu_thread.join(timeout=10)  # ... and it leaves before the C side is freed
            if self._cpu_thread.is_alive():  # stuck in a PacketIn: keep the C side (a leak, not a crash)
                log.warning("the native switch's CPU thread did not stop; its state is not freed")
                self.lib.gf_sw_stats(self.sw, _PORTS, final)
                self._final = [int(v) for v in final]
                return
        self.lib.gf_sw_stop(self.sw, final)
        self._final = [int(v) for v in final]


class SyncedTrafficManager(TrafficManager):
    """A TrafficManager whose configuration changes also reach `native` when one runs."""

    native: NativeSwitch | None = None

    def set_queue_rate(self, port: int, rate: Rate | None, priority: int | None = None) -> None:
        super().set_queue_rate(port, rate, priority)
        self._push()

    def set_port_rate(self, port: int, rate: Rate | None) -> None:
        super().set_port_rate(port, rate)
        self._push()

    def set_queue_depth(self, port: int, depth: int, priority: int | None = None) -> None:
        super().set_queue_depth(port, depth, priority)
        self._push()

    def _push(self) -> None:
        if self.native is not None:
            self.native.configure(self)

    def queue_settings(self, port: int) -> dict[str, object]:
        settings = super().queue_settings(port)
        native = self.native
        if native is not None:
            for entry in settings["queues"]:  # type: ignore[union-attr]
                entry["queued"] = native.queued(port, entry["priority"])
        return settings
