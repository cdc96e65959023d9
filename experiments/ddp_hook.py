"""A PyTorch DDP communication hook that all-reduces gradient buckets over the DLCP transport.

For users of ``torch.nn.parallel.DistributedDataParallel``: each gradient bucket DDP hands
to the hook is all-reduced over UDP by DLCP endpoints, so its packets carry the tags the
switches act on:

* ``tensor_id``: the forward-order index of the bucket's front-most parameter (0 = the
  input-side layer), so the fabric's layer-priority table ranks buckets like layers;
* ``prio_hint``: the layer priority of that index (front layers most urgent);
* ``mag_class`` per packet (from the values it carries) and, when a gradient loss bound is
  set, the drop-eligible flag on the smallest-magnitude packets within that bound.

Two collectives: ``ring`` (:class:`hosts.ring.RingAllReduce`) and ``star`` (rank 0
aggregates: every other rank sends its bucket to rank 0, which sends the mean back; a
parameter server placed on rank 0, the incast pattern). Either way what arrives goes straight
into the bucket (added as it arrives, or placed), as gloo reduces in place; rank 0 of the star
adds the other ranks' values in the order their packets arrive, so the last bit of a sum may
differ between runs (never between ranks: they all take rank 0's). The hook is asynchronous: buckets
are handed to `in_flight` sender threads and DDP gets a future, so several buckets (layers)
travel at once, as in wait-free backpropagation, and a switch's layer priorities have
something to reorder. The process group (e.g. gloo) is used once, to exchange addresses::

    state = connect(model)            # or connect(model, host=my_ip), or $GRADFABRIC_DLCP_HOST
    ddp.register_comm_hook(state, dlcp_allreduce_hook)
    ...
    state.close()

(No ``from __future__ import annotations`` here: DDP checks the hook's annotations at run time.)
"""

import fcntl
import os
import socket
import struct
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from experiments.errors import ExperimentError
from hosts.endpoint import Endpoint, SendReport
from hosts.messages import MessageKey
from hosts.pacing import Aimd
from hosts.ring import MAX_PARTS, RingAllReduce
from hosts.schedulers import layer_priority
from hosts.wire import MsgType

COLLECTIVES = ("ring", "star")


@dataclass
class HookStats:
    """What the buckets cost on the wire, summed since the last `take_stats`."""

    packets: int = 0
    retransmitted: int = 0
    lost_elements: int = 0  # gradient values zero-filled (reduce stage)
    reduced_elements: int = 0  # gradient values this rank received in the reduce stage
    buckets: int = 0
    marked_elements: int = 0  # values this rank sent in drop-eligible packets
    sent_elements: int = 0  # values this rank sent (both stages)
    lost_by_class: dict[int, int] = field(default_factory=dict)  # its values lost at receivers, by class


@dataclass
class DlcpHookState:
    """The endpoint a rank's buckets travel on, and what they cost."""

    endpoint: Endpoint
    rank: int
    world: int
    peers: list[Any]
    parameter_index: dict[int, int]  # id(parameter) -> forward-order index
    num_layers: int
    collective: str = "ring"
    grad_bound: float = 0.0
    timeout_s: float = 30.0
    in_flight: int = 4
    step: int = 0  # completed iterations (advanced after the last bucket)
    tensor_ids: list[int] = field(default_factory=list)  # tag of each bucket reduced, in order
    stats: HookStats = field(default_factory=HookStats)
    ring: RingAllReduce | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _pool: ThreadPoolExecutor | None = None
    _previous: dict[tuple[int, int], np.ndarray] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.collective not in COLLECTIVES:
            raise ExperimentError(f"unknown collective {self.collective!r}; choose from {', '.join(COLLECTIVES)}")
        if self.collective == "ring":
            self.ring = RingAllReduce(self.endpoint, self.rank, self.peers)
        self._pool = ThreadPoolExecutor(max(1, self.in_flight), thread_name_prefix=f"dlcp-hook-{self.rank}")

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        self.endpoint.drain(quiet=0.3, limit=3.0)
        self.endpoint.close()

    def take_stats(self) -> HookStats:
        with self._lock:
            stats, self.stats = self.stats, HookStats()
        return stats

    def bucket_tag(self, parameters: list[Any]) -> int:
        ids = [self.parameter_index[id(p)] for p in parameters if id(p) in self.parameter_index]
        if not ids:
            raise ExperimentError("a DDP bucket holds none of the model's parameters (was connect() "
                                  "given the model DDP wraps?)")
        return min(ids)

    def _account(self, sends: list[SendReport], lost: int, reduced: int) -> None:
        with self._lock:
            self.stats.packets += sum(s.packets for s in sends)
            self.stats.retransmitted += sum(s.retransmitted for s in sends)
            self.stats.lost_elements += lost
            self.stats.reduced_elements += reduced
            self.stats.buckets += 1
            for s in sends:
                self.stats.marked_elements += s.eligible_elements
                self.stats.sent_elements += s.payload_bytes // 4
                for c, n in s.lost_by_class.items():
                    self.stats.lost_by_class[c] = self.stats.lost_by_class.get(c, 0) + n

    def allreduce(self, values: np.ndarray, *, iteration: int, tensor_id: int, part: int) -> np.ndarray:
        """The mean of `values` over all ranks (blocking; runs on a sender thread)."""
        options: dict[str, Any] = {"prio_hint": layer_priority(tensor_id, self.num_layers),
                                   "drop_eligible": self.grad_bound > 0, "num_layers": self.num_layers}
        if self.grad_bound > 0:
            options["eligible_share"] = self.grad_bound
        if self.ring is not None:
            reduced, report = self.ring.allreduce(values, iteration=iteration, tensor_id=tensor_id, part=part,
                                                  average=True, timeout=self.timeout_s, inplace=True, **options)
            self._account(report.sends, report.lost_elements, report.received_elements)
            return reduced
        return self._star(values, iteration=iteration, tensor_id=tensor_id, part=part, options=options)

    def _star(self, values: np.ndarray, *, iteration: int, tensor_id: int, part: int,
              options: dict[str, Any]) -> np.ndarray:
        """Rank 0 sums the buckets of all ranks and sends the mean back (gradient messages
        in, parameter messages out; message ``iteration`` = iteration * MAX_PARTS + part)."""
        wire_it = iteration * MAX_PARTS + part
        job = self.endpoint.job_id
        reassembler = self.endpoint.reassembler
        sends: list[SendReport] = []
        lost = reduced = 0
        if self.rank == 0:  # sums into the bucket itself (as the values arrive), sends the mean to every rank
            total = values
            keys = [MessageKey(job, r, wire_it, tensor_id, MsgType.GRADIENT) for r in range(1, self.world)]
            for key in keys:
                reassembler.expect(key, total, add=True)
            try:
                for key in keys:
                    got = self.endpoint.take(key, self.timeout_s)
                    if not np.shares_memory(got.values, total):  # its first packet came before expect()
                        total += got.values
                    lost += got.values.size - got.received
                    reduced += got.values.size
            finally:
                reassembler.unexpect(keys)
            total /= self.world
            pending = [self.endpoint.send_async(self.peers[r], total, copy=False, kind=MsgType.PARAMETER,
                                                tensor_id=tensor_id, iteration=wire_it, **options)
                       for r in range(1, self.world)]
            sends += [f.result() for f in pending]
            result = total
        else:
            sends.append(self.endpoint.send(self.peers[0], values, kind=MsgType.GRADIENT, tensor_id=tensor_id,
                                            iteration=wire_it, **options))
            key = MessageKey(job, 0, wire_it, tensor_id, MsgType.PARAMETER)
            # The mean is placed in the bucket itself: rank 0 sends it only once it holds this rank's bucket.
            reassembler.expect(key, values)
            try:
                result = self.endpoint.take(key, self.timeout_s).values
            finally:
                reassembler.unexpect([key])
        self._account(sends, lost, reduced)
        return result

    def submit(self, bucket: dist.GradBucket) -> torch.futures.Future:
        buffer = bucket.buffer()
        tensor_id = self.bucket_tag(list(bucket.parameters()))
        if bucket.index() >= MAX_PARTS:
            raise ExperimentError(f"DDP bucket {bucket.index()} exceeds the {MAX_PARTS} parts per iteration")
        iteration, part = self.step, bucket.index()
        with self._lock:
            self.tensor_ids.append(tensor_id)
        if bucket.is_last():
            self.step += 1
        shared = buffer.device.type == "cpu" and buffer.dtype == torch.float32 and buffer.is_contiguous()
        # The bucket's own memory when it can be (no copy, as gloo reduces in place); else a CPU copy.
        values = (buffer.detach().numpy() if shared else
                  buffer.detach().to("cpu", torch.float32).contiguous().numpy()).reshape(-1)
        future: torch.futures.Future = torch.futures.Future()

        def run() -> None:
            try:
                reduced = self.allreduce(values, iteration=iteration, tensor_id=tensor_id, part=part)
                if not (shared and np.shares_memory(reduced, values)):
                    buffer.copy_(torch.from_numpy(reduced).view_as(buffer))
                future.set_result(buffer)
            except BaseException as exc:  # handed to DDP, which raises it in backward()
                future.set_exception(exc)

        assert self._pool is not None
        self._pool.submit(run)
        return future


#: Environment variable naming the address a rank's DLCP endpoint binds and advertises.
HOST_ENV = "GRADFABRIC_DLCP_HOST"


def _interface_address(name: str) -> str:
    """The IPv4 address of network interface `name` (ExperimentError when it has none)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            raw = fcntl.ioctl(sock.fileno(), 0x8915, struct.pack("256s", name[:15].encode()))  # SIOCGIFADDR
        except OSError as exc:
            raise ExperimentError(f"interface {name!r} (GLOO_SOCKET_IFNAME) has no IPv4 address: {exc}") from None
    return socket.inet_ntoa(raw[20:24])


def _route_source(peer: str) -> str | None:
    """The local address that routes to `peer` (no packet is sent), or None."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            sock.connect((socket.gethostbyname(peer), 9))
        except OSError:
            return None
        return str(sock.getsockname()[0])


def _store_host() -> str | None:
    """Where the default process group's TCP store listens (the rendezvous host), if known."""
    try:
        store = dist.distributed_c10d._get_default_store()
        while isinstance(store, dist.PrefixStore):
            store = store.underlying_store
        return str(store.host) if isinstance(store, dist.TCPStore) else None
    except (AttributeError, RuntimeError, ValueError):
        return None


def advertised_host(host: str | None = None) -> str:
    """The address this rank's endpoint binds and tells the other ranks, the first of:
    `host`; ``$GRADFABRIC_DLCP_HOST``; the address of gloo's interface
    (``$GLOO_SOCKET_IFNAME``); the local address that routes to the rendezvous host
    (``$MASTER_ADDR``, as torchrun sets it, or the process group's TCP store) - so on a real
    cluster it is the interface the process group talks over, and 127.0.0.1 only when the
    rendezvous itself is on this host."""
    if host:
        return host
    if os.environ.get(HOST_ENV):
        return os.environ[HOST_ENV]
    if os.environ.get("GLOO_SOCKET_IFNAME"):
        return _interface_address(os.environ["GLOO_SOCKET_IFNAME"].split(",")[0])
    for peer in (os.environ.get("MASTER_ADDR"), _store_host()):
        if peer:
            found = _route_source(peer)
            if found:
                return found
    raise ExperimentError(f"cannot tell which address this rank's DLCP endpoint should use: give connect(host=...) "
                          f"or set {HOST_ENV} (or MASTER_ADDR / GLOO_SOCKET_IFNAME)")


def connect(model: torch.nn.Module, *, host: str | None = None, port: int = 0, job_id: int = 1,
            grad_bound: float = 0.0, param_bound: float = 0.0, aimd: Aimd | None = None, timeout_s: float = 30.0,
            collective: str = "ring", in_flight: int = 4, process_group: Any = None,
            port_rate: float | None = None, count: int | None = None) -> DlcpHookState:
    """Open this rank's DLCP endpoint and learn every rank's (collective over the process group).

    The endpoint binds the address :func:`advertised_host` picks (`host`, else
    ``$GRADFABRIC_DLCP_HOST``, else the process group's interface); a loopback address
    advertised by ranks on different hosts is refused. `port`: the UDP port it binds; switches
    running ``p4src/dlcp.p4`` parse DLCP only on ``hosts.wire.DLCP_PORT`` (19600), so on such a
    fabric give ``port=DLCP_PORT`` (one rank per host); 0 picks a free port, whose packets the
    switches forward as plain UDP (no layer priority, spraying, ECN or dropping). `grad_bound` is the share of a
    bucket's values the reduce stage may lose (zero-filled); 0 makes the transport reliable.
    `param_bound` does the same for the gather stage. `port_rate`: the packets/s of the slowest
    port on the ranks' paths, when known (``hosts.endpoint.Endpoint``'s port-rate mode: the
    sender keeps to it and answers delayed by a busy rank do not throttle it). `count`: values
    per packet; None: from the path's MTU (:func:`hosts.netdev.mtu_count`: 16,369 when the ranks
    talk over loopback, as TCP's segments grow to loopback's 64 kB MTU, else 361 for a
    1500-byte MTU)."""
    if not dist.is_initialized():
        raise ExperimentError("connect() needs torch.distributed.init_process_group() first")
    rank, world = dist.get_rank(process_group), dist.get_world_size(process_group)
    endpoint = Endpoint(worker_id=rank, job_id=job_id, host=advertised_host(host), port=port, aimd=aimd or Aimd(),
                        bounds={MsgType.GRADIENT: grad_bound, MsgType.PARAMETER: param_bound}, port_rate=port_rate,
                        count=count)
    try:
        addresses: list[Any] = [None] * world
        dist.all_gather_object(addresses, (socket.gethostname(), endpoint.address), group=process_group)
        _check_reachable(addresses)
        addresses = [a for _, a in addresses]
        index = {id(p): i for i, p in enumerate(model.parameters())}
        return DlcpHookState(endpoint=endpoint, rank=rank, world=world, peers=[tuple(a) for a in addresses],
                             parameter_index=index, num_layers=len(index), collective=collective,
                             grad_bound=grad_bound, timeout_s=timeout_s, in_flight=in_flight)
    except BaseException:
        endpoint.close()
        raise


def _check_reachable(advertised: list[Any]) -> None:
    """Refuse loopback addresses when the ranks are not all on one host."""
    hosts = {name for name, _ in advertised}
    if len(hosts) > 1:
        for r, (name, (ip, port)) in enumerate(advertised):
            if ip.startswith("127.") or ip == "0.0.0.0":
                raise ExperimentError(f"rank {r} on {name} advertised {ip}:{port}, which ranks on other hosts "
                                      f"({', '.join(sorted(hosts - {name}))}) cannot reach: give connect(host=...) "
                                      f"or set {HOST_ENV}")


def dlcp_allreduce_hook(state: DlcpHookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP communication hook: the bucket's mean over all ranks, through DLCP (module doc)."""
    return state.submit(bucket)
