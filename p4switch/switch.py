"""The embedded switch: ports -> pipeline ingress -> traffic manager -> egress -> ports.

:class:`Datapath` is the packet path with time passed in from a clock, usable on its own
with in-memory ports and a virtual clock. :class:`Switch` runs it on real interfaces with an
ingress thread, an egress thread, the P4Runtime server, pcap files and a log.
"""

from __future__ import annotations

import logging
import selectors
import socket
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from p4switch.errors import P4SwitchError
from p4switch.native.switch_native import NativeSwitch, SyncedTrafficManager
from p4switch.ports import Clock, PcapSet, Port, PortSpec, RawSocketPort, WallClock
from p4switch.server import P4RuntimeServer
from p4switch.server.control import ControlService
from p4switch.traffic_manager import Departure, TrafficManager

log = logging.getLogger("p4switch.switch")

DROP_PORT = 511
PCAP_FLUSH_SECONDS = 0.5
DRAIN_BATCH = 64  # frames read from one port before the others get a turn
_HEX_PREVIEW = 32


class Datapath:
    """The packet path of one switch; the pipeline is swapped in by the P4Runtime server."""

    def __init__(self, traffic_manager: TrafficManager, clock: Clock | None = None,
                 cpu_port: int | None = None, pcaps: PcapSet | None = None, immediate: bool = False) -> None:
        self.tm = traffic_manager
        self.clock: Clock = clock or WallClock()
        self.cpu_port = cpu_port
        self.pcaps = pcaps
        #: A packet that finds its egress port idle goes through egress and out from
        #: :meth:`receive` itself instead of waiting for :meth:`transmit_due` (real ports).
        self.immediate = immediate
        self.lock = threading.RLock()  # pipeline state: packet path and P4Runtime writes
        self._tm_lock = threading.RLock()  # traffic manager state ...
        self.tm_ready = threading.Condition(self._tm_lock)  # ... and the egress thread's wake-up
        self._egress = threading.Lock()  # departures leave in order whichever thread sends them
        self.pipeline: Any = None
        #: Called with each newly installed pipeline (the switch starts native loops there).
        self.on_install: Callable[[Any], None] | None = None
        #: The native switch loops while a native pipeline runs (they own the packet path).
        self.native: Any = None
        self.ports: dict[int, Port] = {}
        self.packet_in: Callable[[bytes], None] | None = None
        #: Packet counts: received, transmitted, no_pipeline, pipeline_error, no_such_port...
        self.stats: Counter[str] = Counter()

    def add_port(self, port: Port) -> None:
        if port.number in self.ports or port.number == self.cpu_port:
            raise P4SwitchError(f"port {port.number} is given twice")
        self.ports[port.number] = port
        if self.pcaps is not None:
            self.pcaps.open(port.number, port.name)

    def install(self, pipeline: Any) -> None:
        """Switch to a new pipeline; packets queued for the old one are dropped."""
        with self.lock:
            self.pipeline = pipeline
            with self.tm_ready:
                self.tm.clear()
            if self.on_install is not None:
                self.on_install(pipeline)

    def packet_out(self, frame: bytes) -> None:
        """A PacketOut: the frame enters ingress on the CPU port, as on BMv2."""
        if self.cpu_port is None:
            raise P4SwitchError("PacketOut needs a CPU port (--cpu-port)")
        native = self.native
        if native is not None:
            native.packet_out(frame)
            return
        self.receive(frame, self.cpu_port)

    def receive(self, frame: bytes, port: int) -> int:
        """Run ingress on a frame and queue what it produces; returns how many were queued
        (with ``immediate``, copies that left at once count as queued)."""
        if self.immediate:
            with self._egress:
                return self._receive(frame, port)
        return self._receive(frame, port)

    def _receive(self, frame: bytes, port: int) -> int:
        now = self.clock.now_us()
        stats = self.stats
        if self.pcaps is not None:
            self.pcaps.write(port, "in", frame)
        tm = self.tm
        outgoing: list[tuple[int, bytes]] = []
        queued = 0
        with self.lock:
            native = self.native
            if native is not None:  # read by a Python thread as the native loops took over
                native.receive(frame, port)
                return 0
            stats["received"] += 1
            pipeline = self.pipeline
            if pipeline is None:
                stats["no_pipeline"] += 1
                return 0
            try:
                jobs = pipeline.ingress(frame, port, now)
            except Exception as exc:  # noqa: BLE001 - one bad packet must not stop the switch
                self._pipeline_error("ingress", port, frame, exc)
                return 0
            departures = []
            with self._tm_lock:
                for job in jobs:
                    egress_port = job.egress_port
                    if egress_port == DROP_PORT:
                        continue
                    if self.immediate:
                        departure = tm.pass_through(job, egress_port, job.priority, len(frame), now)
                        if departure is not None:
                            departures.append(departure)
                            queued += 1
                            continue
                    if tm.enqueue(job, egress_port, job.priority, len(frame), now):
                        queued += 1
                if tm.queued:
                    due = tm.next_departure_us()
                    if due is not None and due > now:
                        self.tm_ready.notify()  # the egress thread times future departures
            for departure in departures:
                outgoing.extend(self._run_egress(pipeline, departure))
        for out_port, out_frame in outgoing:
            self._emit(out_port, out_frame)
        if log.isEnabledFor(logging.DEBUG):
            log.debug("port %d in: %d bytes, %d copies queued", port, len(frame), queued)
        return queued

    def _run_egress(self, pipeline: Any, departure: Departure) -> list[tuple[int, bytes]]:
        """Egress for one departure (the caller holds the pipeline lock)."""
        try:
            return pipeline.egress(departure.item, departure.queue)
        except Exception as exc:  # noqa: BLE001 - one bad packet must not stop the switch
            self._pipeline_error("egress", departure.port, b"", exc)
            return []

    def transmit_due(self) -> int:
        """Run egress for every packet whose departure time has come; returns frames sent."""
        sent = 0
        with self._egress:
            with self._tm_lock:
                if not self.tm.queued:
                    return 0
                departures = self.tm.dequeue(self.clock.now_us())
            for departure in departures:
                with self.lock:
                    pipeline = self.pipeline
                    if pipeline is None:
                        continue
                    frames = self._run_egress(pipeline, departure)
                for port, frame in frames:
                    sent += self._emit(port, frame)
        return sent

    def _emit(self, port: int, frame: bytes) -> int:
        if port == DROP_PORT:
            return 0
        if port == self.cpu_port:
            self.stats["to_cpu"] += 1
            if self.packet_in is not None:
                self.packet_in(frame)
            return 1
        target = self.ports.get(port)
        if target is None:
            self.stats["no_such_port"] += 1
            log.debug("frame for port %d dropped: no such port", port)
            return 0
        target.send(frame)
        self.stats["transmitted"] += 1
        if self.pcaps is not None:
            self.pcaps.write(port, "out", frame)
        if log.isEnabledFor(logging.DEBUG):
            log.debug("port %d out: %d bytes", port, len(frame))
        return 1

    def _pipeline_error(self, stage: str, port: int, frame: bytes, exc: Exception) -> None:
        self.stats["pipeline_error"] += 1
        log.warning("%s error on port %d (%s: %s); packet dropped: %s", stage, port,
                    type(exc).__name__, exc, frame[:_HEX_PREVIEW].hex())

@dataclass
class SwitchConfig:
    """Everything ``p4switch run`` is told."""

    interfaces: list[PortSpec]
    device_id: int = 0
    grpc_address: str = "127.0.0.1:9559"
    cpu_port: int | None = None
    priority_queues: int = 1
    pcap_dir: Path | None = None
    request_log: Path | None = None
    datapath: str = "native"  # native (C compiled from the program, where it works) or python


class Switch:
    """One running switch: raw-socket ports, packet threads and the P4Runtime server."""

    def __init__(self, config: SwitchConfig, pipeline_factory: Callable[[bytes], Any] | None = None) -> None:
        self.config = config
        if config.datapath not in ("native", "python"):
            raise P4SwitchError(f"datapath must be native or python, not {config.datapath!r}")
        self.tm = SyncedTrafficManager(priority_queues=config.priority_queues)
        pcaps = PcapSet(config.pcap_dir) if config.pcap_dir else None
        self.datapath = Datapath(self.tm, WallClock(), config.cpu_port, pcaps, immediate=True)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._wake_r, self._wake_w = socket.socketpair()
        self.server: P4RuntimeServer | None = None
        self._pipeline_factory = pipeline_factory
        self.datapath.on_install = self._on_install
        self._initial: tuple[Any, bytes, Any] | None = None
        #: Counts of the native switches that ran and stopped (a pipeline replaced, or the end).
        self._native_packets: Counter[str] = Counter()
        self._native_drops: Counter[str] = Counter()
        try:
            for spec in config.interfaces:
                self.datapath.add_port(RawSocketPort(spec.number, spec.iface))
        except BaseException:
            self._close_ports()
            self._wake_r.close()
            self._wake_w.close()
            raise

    def statistics(self) -> dict[str, Any]:
        """Packet counts and queue drops of both datapaths, summed (the Python one counts
        what arrives before a pipeline is loaded, and runs when the native one cannot; each
        native switch a pipeline ran on adds its counts), for ``p4switch ctl stats`` and the
        shutdown line."""
        drops: Counter[str] = Counter({f"{port}:{prio}:{reason}": n
                                       for (port, prio, reason), n in self.tm.drops.items()})
        packets: Counter[str] = Counter(self.datapath.stats)
        packets["send_errors"] += sum(getattr(p, "send_errors", 0) for p in self.datapath.ports.values())
        packets.update(self._native_packets)
        drops.update(self._native_drops)
        native = self.datapath.native
        if native is not None:
            packets.update(native.stats())
            drops.update(self._queue_drops(native))
        return {"packets": {k: v for k, v in sorted(packets.items()) if v},
                "queue_drops": {k: v for k, v in sorted(drops.items()) if v},
                "datapath": "native" if native is not None else "python"}

    def _queue_drops(self, native: NativeSwitch) -> Counter[str]:
        return Counter({f"{port}:{prio}:queue_full": n for port in self.datapath.ports
                        for prio, n in enumerate(native.queue_drops(port)) if n})

    def make_pipeline(self, device_config: bytes) -> Any:
        """The pipeline for a device config: native where the program, the options and the
        machine allow it (else the Python pipeline, with one log line saying why)."""
        from p4switch.device_config import program_from_device_config
        from p4switch.pipeline import Pipeline

        program = program_from_device_config(device_config)
        if self.config.datapath == "native":
            reason = None
            if self.config.pcap_dir is not None:
                reason = "--pcap is written by the Python datapath only"
            elif not any(isinstance(p, RawSocketPort) for p in self.datapath.ports.values()):
                reason = "no interface ports"
            else:
                from p4switch.native.pipeline import try_native

                native, reason = try_native(program, self.config.device_id, for_switch=True)
                if native is not None:
                    log.info("pipeline runs on the native datapath (%s)", native.path.name)
                    return native
            log.warning("pipeline runs on the Python datapath: %s", reason)
        return Pipeline(program, seed=self.config.device_id)  # random() drawn per device

    def _on_install(self, pipeline: Any) -> None:
        from p4switch.native.pipeline import NativePipeline

        self._stop_native()
        if not isinstance(pipeline, NativePipeline):
            return
        sockets = {p.number: p.sock.fileno() for p in self.datapath.ports.values()
                   if isinstance(p, RawSocketPort)}
        native = NativeSwitch(pipeline, sockets, self.config.priority_queues, self.config.cpu_port,
                              self.tm.default_depth, packet_in=self._native_packet_in)
        native.configure(self.tm)
        native.start()
        self.datapath.native = self.tm.native = native

    def _native_packet_in(self, frame: bytes) -> None:
        if self.datapath.packet_in is not None:
            self.datapath.packet_in(frame)

    def _stop_native(self) -> None:
        native = self.datapath.native
        if native is not None:
            self.datapath.native = self.tm.native = None
            native.stop()  # its last counts stay with the totals
            self._native_packets.update(native.stats())
            self._native_drops.update(self._queue_drops(native))

    def load_program(self, source: Path, p4info_path: Path | None = None) -> None:
        """Compile a program given on the command line (P4 source, or device config + P4Info);
        :meth:`start` installs it before the P4Runtime port opens."""
        if source.suffix == ".json":
            from google.protobuf import text_format
            from p4.config.v1 import p4info_pb2

            from p4switch.device_config import pipeline_from_device_config

            if p4info_path is None:
                raise P4SwitchError(f"{source}: a device config needs --p4info (the P4Info text file)")
            p4info = text_format.Parse(p4info_path.read_text(), p4info_pb2.P4Info())
            data = source.read_bytes()
        else:
            from p4switch.device_config import pipeline_from_device_config, write_device_config
            from p4switch.frontend import load_program
            from p4switch.p4info import build_p4info

            program = load_program(source)
            p4info = build_p4info(program)
            with tempfile.TemporaryDirectory() as tmp:
                path = Path(tmp) / "device_config.json"
                write_device_config(program, path)
                data = path.read_bytes()
        make = self._pipeline_factory or self.make_pipeline
        self._initial = (p4info, data, make(data))
        log.info("program %s loaded", source)

    def start(self) -> None:
        """Open the P4Runtime port, install the initial program, start the packet threads, then
        serve (the switch is ready when its port accepts connections)."""
        kwargs = {"pipeline_factory": self._pipeline_factory or self.make_pipeline}
        control = ControlService(self.tm, self.datapath.tm_ready, self.statistics)
        self.server = P4RuntimeServer(self.datapath, self.config.device_id, self.config.grpc_address,
                                      request_log=self.config.request_log,
                                      extra_handlers=(control.generic_handler(),), **kwargs)
        self.datapath.packet_in = self.server.servicer.packet_in
        if self._initial is not None:
            self.server.servicer.load(*self._initial)
        for name, target in (("ingress", self._ingress_loop), ("egress", self._egress_loop)):
            thread = threading.Thread(target=target, name=f"p4switch-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)
        self.server.start()
        log.info("switch device %d ready: P4Runtime on %s, ports %s", self.config.device_id,
                 self.server.address,
                 ", ".join(f"{p.number}@{p.name}" for p in self.datapath.ports.values()) or "none")

    def _ingress_loop(self) -> None:
        selector = selectors.DefaultSelector()
        for port in self.datapath.ports.values():
            if isinstance(port, RawSocketPort):
                port.sock.setblocking(False)
                selector.register(port.sock, selectors.EVENT_READ, port)
        selector.register(self._wake_r, selectors.EVENT_READ, None)
        try:
            while not self._stop.is_set():
                if self.datapath.native is not None:  # the native loops read the ports
                    self._stop.wait(0.2)
                    continue
                for key, _ in selector.select(timeout=0.5):
                    port = key.data
                    if port is None:
                        continue
                    self._drain(port)
        finally:
            selector.close()

    def _drain(self, port: RawSocketPort) -> None:
        datapath = self.datapath
        receive, number, tm = port.receive, port.number, datapath.tm
        for _ in range(DRAIN_BATCH):
            try:
                frame = receive()
            except BlockingIOError:
                return
            except OSError as exc:
                log.warning("port %d (%s): receive failed: %s", number, port.name, exc)
                return
            if frame is not None:
                # A frame whose port is idle leaves from this thread during receive(); queued
                # departures that are already due leave here too, the egress thread times the rest.
                datapath.receive(frame, number)
                if tm.queued:
                    datapath.transmit_due()

    def _egress_loop(self) -> None:
        datapath = self.datapath
        next_flush = time.monotonic() + PCAP_FLUSH_SECONDS
        while not self._stop.is_set():
            if datapath.pcaps is not None and time.monotonic() >= next_flush:
                datapath.pcaps.flush()
                next_flush = time.monotonic() + PCAP_FLUSH_SECONDS
            with datapath.tm_ready:
                due = datapath.tm.next_departure_us()
                now = datapath.clock.now_us()
                if due is None or due > now:
                    wait = PCAP_FLUSH_SECONDS if due is None else min(PCAP_FLUSH_SECONDS, (due - now) / 1e6)
                    datapath.tm_ready.wait(timeout=wait)
                    continue
            datapath.transmit_due()

    def stop(self) -> None:
        """Stop the server and the packet threads, then close ports, pcaps and the request log."""
        self._stop.set()
        self._wake_w.send(b"x")
        with self.datapath.tm_ready:
            self.datapath.tm_ready.notify_all()
        if self.server is not None:
            self.server.stop(0.5)
        for thread in self._threads:
            thread.join(timeout=5)
        self._stop_native()
        self._close_ports()
        if self.datapath.pcaps is not None:
            self.datapath.pcaps.close()
        self._wake_r.close()
        self._wake_w.close()
        stats = self.statistics()
        packets = ", ".join(f"{k} {v}" for k, v in stats["packets"].items()) or "no packets"
        log.info("switch stopped: %s; %d queue drop(s)", packets, sum(stats["queue_drops"].values()))

    def _close_ports(self) -> None:
        for port in self.datapath.ports.values():
            port.close()
