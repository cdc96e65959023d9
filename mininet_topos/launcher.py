"""Boot an emulated fabric: compile, start switches, configure hosts, program, tear down.

:class:`Fabric` is a context manager; leaving it (normally or by an exception) stops every
process and removes every interface the fabric made. What it made is recorded in
``build/fabric-state.json`` as it goes, so ``gradfabric stop`` cleans up after a crash too.
"""

from __future__ import annotations

import os
import random
import shlex
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from mininet.link import TCLink
from mininet.log import setLogLevel
from mininet.net import Mininet
from mininet.node import Host

from gradfabric import fabric as fabric_description
from gradfabric import paths
from gradfabric.errors import GradfabricError
from gradfabric.fabric import Fabric as FabricDescription
from mininet_topos import cleanup
from mininet_topos.builder import FabricTopo, describe, root_interfaces
from mininet_topos.spec import TopologySpec, load_topology
from mininet_topos.switches import BridgeSwitchNode, P4SwitchNode, SwitchConfig, require_bmv2

FABRIC_FILE = "fabric.json"
#: Switch kinds: "p4" runs the target's switch program, "bridge" plain Linux bridges (L2
#: only, loop-free topologies; checks the plumbing without any P4 switch).
SWITCH_KINDS = ("p4", "bridge")


class FabricError(GradfabricError):
    """The fabric could not be booted or is in a state that prevents it."""


@dataclass
class LaunchOptions:
    topo: str | Path = "leafspine"
    target: str = "embedded"
    pcap: bool = False
    workdir: Path = field(default_factory=paths.workdir)
    #: Prepended to every node name (lets a test fabric run beside a user's fabric).
    prefix: str = ""
    log_level: str = "info"
    switch_kind: str = "p4"
    #: Policy pushed after routes; None pushes none.
    policy: Path | None = None
    start_timeout_s: float = 90.0
    #: Called with each boot step's description (the launcher's progress lines).
    progress: Callable[[str], None] = field(default=lambda _msg: None)

    @property
    def build_dir(self) -> Path:
        return self.workdir / "build"

    @property
    def logs_dir(self) -> Path:
        return self.workdir / "logs"

    @property
    def pcaps_dir(self) -> Path:
        return self.workdir / "pcaps"


def free_port() -> int:
    """A TCP port on loopback that nothing listens on right now."""
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """`count` distinct TCP ports on loopback that nothing listens on right now.

    Ports come from below the kernel's ephemeral range, so no outgoing connection can take
    one before its switch binds it, and every socket stays bound until all are chosen (ports
    taken one after another can repeat).
    """
    low = _ephemeral_low()
    rng = random.Random()
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            for _attempt in range(200):
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                try:
                    sock.bind(("127.0.0.1", rng.randrange(_FIRST_PORT, low) if low > _FIRST_PORT + count else 0))
                except OSError:
                    sock.close()
                    continue
                socks.append(sock)
                break
            else:
                raise FabricError(f"no free TCP port on 127.0.0.1 below {low} after 200 tries")
        return [int(sock.getsockname()[1]) for sock in socks]
    finally:
        for sock in socks:
            sock.close()


_FIRST_PORT = 20000


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (32768 when it cannot be read)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


class Fabric:
    """One booted fabric: the Mininet network, its switch processes and its description."""

    def __init__(self, options: LaunchOptions) -> None:
        if options.switch_kind not in SWITCH_KINDS:
            raise FabricError(f"unknown switch kind {options.switch_kind!r}")
        self.options = options
        spec = load_topology(options.topo)
        self.spec: TopologySpec = spec.with_prefix(options.prefix) if options.prefix else spec
        self.net: Mininet | None = None
        self.configs: dict[str, SwitchConfig] = {}
        self.state = cleanup.FabricState(options.build_dir / cleanup.STATE_FILE)
        self.program: dict[str, str] = {"source": "", "p4info": "", "device_config": ""}
        self.description_path = options.build_dir / FABRIC_FILE
        self.description: FabricDescription | None = None
        #: Whether the state file is ours to remove (not when another fabric holds it).
        self.owns_state = False
        #: What the user should know about how the topology runs on this target (banner).
        self.notes: list[str] = []

    # -- context manager -------------------------------------------------------------
    def __enter__(self) -> Fabric:
        try:
            self.boot()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    @property
    def p4(self) -> bool:
        return self.options.switch_kind == "p4"

    def node(self, name: str) -> Host:
        """A Mininet node by its name in the topology file (without the prefix)."""
        assert self.net is not None, "boot() first"
        return self.net.get(self.options.prefix + name)

    # -- boot ------------------------------------------------------------------------
    def boot(self) -> None:
        opts = self.options
        setLogLevel("output")  # the CLI prints node output at this level
        if self.p4 and opts.target == "bmv2":
            require_bmv2()
        self.refuse_if_running()
        self.owns_state = True
        if self.p4:
            opts.progress("compiling the P4 program")
            self.compile()
        self.configs = self.switch_configs()
        planned = root_interfaces(self.spec)
        if not self.p4:
            planned += [s.name for s in self.spec.switches]
        taken = [name for name in planned if cleanup.interface_exists(name)]
        if taken:
            raise FabricError(
                f"interfaces this fabric needs already exist: {', '.join(taken)}; another fabric "
                "with the same node names is running (stop it with `make stop` in its own "
                "checkout) or left them behind (remove them with `ip link del NAME`)"
            )
        self.state.interfaces = planned
        self.state.track(os.getpid(), "launcher", group=False)
        opts.progress(f"building {self.spec.name}: {len(self.spec.switches)} switches, "
                      f"{len(self.spec.hosts)} hosts, {len(self.spec.links)} links")
        self.net = Mininet(
            topo=FabricTopo(self.spec, self.configs if self.p4 else None, opts.target),
            switch=P4SwitchNode if self.p4 else BridgeSwitchNode,
            link=TCLink, controller=None, autoSetMacs=False, build=False,
        )
        try:
            self.net.build()
        except Exception as exc:  # Mininet raises bare Exceptions
            raise FabricError(f"Mininet could not build {self.spec.name}: {exc}") from exc
        for node in self.net.hosts + self.net.switches:
            iface = node.defaultIntf().name if node.inNamespace else None
            self.state.track(node.pid, f"shell of {node.name}", netns_iface=iface, stop_signal="SIGHUP")
        opts.progress("starting switches")
        self.net.start()
        if self.p4:
            self.wait_switches()
            if opts.target == "bmv2":
                self.configure_bmv2_queues()
        self.configure_hosts()
        self.write_description()

    def refuse_if_running(self) -> None:
        previous = cleanup.FabricState.load(self.state.path)
        if previous is None:
            return
        if any(p.alive() for p in previous.processes):
            raise FabricError(
                f"a fabric is already running from {self.options.workdir} "
                f"(recorded in {self.state.path}); stop it first with `make stop` "
                "(gradfabric stop)"
            )
        cleanup.remove(previous)  # leftovers of a crashed fabric

    def compile(self) -> None:
        from gradfabric.p4build import DEFAULT_SOURCE, compile_program

        result = compile_program(DEFAULT_SOURCE, self.options.build_dir,
                                 use_p4c=True if self.options.target == "bmv2" else False)
        artifacts = result.bmv2 if self.options.target == "bmv2" and result.bmv2 else result.embedded
        self.program = {
            "source": str(Path(result.source).resolve()),
            "p4info": str(Path(artifacts.p4info).resolve()),
            "device_config": str(Path(artifacts.device_config).resolve()),
        }

    def switch_configs(self) -> dict[str, SwitchConfig]:
        opts = self.options
        configs = {}
        bmv2 = opts.target == "bmv2"
        ports = iter(free_ports(len(self.spec.switches) * (2 if bmv2 else 1)))
        for sw in self.spec.switches:
            configs[sw.name] = SwitchConfig(
                name=sw.name, device_id=sw.device_id, grpc_port=next(ports),
                # BMv2's --log-file X writes X.txt.
                log_file=opts.logs_dir / f"{sw.name}.{'txt' if opts.target == 'bmv2' else 'log'}",
                p4runtime_log=opts.logs_dir / f"{sw.name}-p4runtime.log",
                priority_queues=sw.params.priority_queues,
                egress_rate_pps=sw.params.egress_rate_pps,
                queue_depth=sw.params.queue_depth,
                rate_scope=sw.params.rate_scope,
                log_level=opts.log_level,
                pcap_dir=opts.pcaps_dir if opts.pcap else None,
                thrift_port=next(ports) if bmv2 else 0,
            )
        return configs

    def switch_nodes(self) -> list[P4SwitchNode]:
        assert self.net is not None
        return [s for s in self.net.switches if isinstance(s, P4SwitchNode)]

    def wait_switches(self) -> None:
        nodes = self.switch_nodes()
        for node in nodes:
            assert node.process is not None
            self.state.track(node.process.pid, f"switch {node.name}")
        deadline = time.monotonic() + self.options.start_timeout_s
        for node in nodes:
            assert node.process is not None
            node.process.wait_ready(deadline)
            self.configs[node.name] = node.config

    def configure_bmv2_queues(self) -> None:
        """BMv2 takes queue rate and depth only over Thrift (simple_switch_CLI), after start.

        ``set_queue_rate R PORT`` gives R to each priority queue of the port; BMv2 has no rate
        shared by a port's queues, so ``rate_scope: port`` runs as ``queue`` and says so.
        """
        from controller.bmv2_queues import QueueSetting, apply_queue_settings

        shared = sorted(name for name, cfg in self.configs.items() if cfg.rate_scope == "port")
        if shared:
            cfg = self.configs[shared[0]]
            self.notes.append(
                f"rate_scope port is embedded-only: on BMv2 each of the {cfg.priority_queues} priority "
                f"queues of every port gets {cfg.egress_rate_pps} pps (set_queue_rate), so a port "
                f"carries up to {cfg.priority_queues * cfg.egress_rate_pps} pps and priority only orders "
                f"packets due at the same time ({', '.join(shared)})")
        for cfg in self.configs.values():
            settings = [QueueSetting(port=port, rate_pps=cfg.egress_rate_pps, depth_packets=cfg.queue_depth)
                        for port, _ in cfg.ports]
            apply_queue_settings(cfg.thrift_port, settings)

    def configure_hosts(self) -> None:
        """Offloads off, IPv6 off, our commands on PATH; with P4 switches every peer is reached
        through the gateway MAC."""
        assert self.net is not None
        # The hosts' shells get the launcher's environment; `make run` does not put the
        # virtual environment on PATH, so `h1 gradfabric agent ...` needs it added.
        bin_dir = shlex.quote(str(Path(sys.executable).parent))
        for spec in self.spec.hosts:
            node = self.net.get(spec.name)
            iface = node.defaultIntf().name
            cmds = [f"export PATH={bin_dir}:$PATH",
                    f"ethtool -K {iface} tx off rx off >/dev/null 2>&1",
                    "sysctl -qw net.ipv6.conf.all.disable_ipv6=1",
                    "sysctl -qw net.ipv6.conf.default.disable_ipv6=1"]
            if self.p4:
                cmds.append(f"ip route replace default dev {iface}")
                cmds += [f"ip neigh replace {peer.ip} lladdr {spec.gateway_mac} dev {iface} nud permanent"
                         for peer in self.spec.hosts if peer.name != spec.name]
            node.cmd("; ".join(cmds))

    def write_description(self) -> None:
        """Write build/fabric.json: relative paths when readers resolve them against our workdir."""
        workdir = self.options.workdir.resolve()
        relative_to = workdir if workdir == paths.workdir().resolve() else None
        self.description = describe(self.spec, self.configs, self.options.target, self.program,
                                    relative_to=relative_to)
        fabric_description.save(self.description, self.description_path)

    # -- stop ------------------------------------------------------------------------
    def stop(self) -> None:
        """Stop processes and remove interfaces; safe to call more than once."""
        net, self.net = self.net, None
        try:
            if net is not None:
                net.stop()
        finally:
            if self.owns_state:
                cleanup.remove(self.state)
