"""The control-plane differential end to end: p4switch and BMv2, each a running switch.

The same seeded P4Runtime updates (:class:`tests.p4runtime_differential.WriteMaker`) go over
gRPC to a ``p4switch run`` process (native datapath) and to ``simple_switch_grpc`` with p4c's
build of the same program; every few updates the same frames enter both switches through veth
pairs, and what leaves each port is compared (as multisets per port, so the order between
ports does not matter). A batch's frames all enter through one port (its first frame's), so
both switches take them in the order sent, and BMv2 gets them one at a time
(:func:`send_in_turn`), so that queue depths are 0 on both switches and thresholds on them
compare alike. Compared: each update's status code, every batch's frames out, and at
the end every table's entries read back. Register writes (not in P4Runtime) and meters (their
colours depend on each switch's clock) are left out.

    python -m tests.p4runtime_differential_bmv2 [--program P] [--writes N] [--seed S]

needs root, p4c and BMv2 (``$GRADFABRIC_P4REF``); used by tests/test_native_bmv2_differential.py.
"""

from __future__ import annotations

import argparse
import select
import socket
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import grpc
from google.rpc import status_pb2
from p4.v1 import p4runtime_pb2

from tests import netns
from tests.p4runtime_differential import OK, PORTS, RANDOM_ACTIONS, Report, Update, WriteMaker

ROUTER = Path(__file__).parent / "p4programs" / "ipv4_router.p4"
ETH_P_ALL = 3
PACKET_OUTGOING = 4


class Wires:
    """One veth pair per port: the switch takes one end, a raw socket here the other."""

    def __init__(self, lab: netns.Lab, side: str) -> None:
        self.switch_ends: list[str] = []
        self.socks: dict[int, socket.socket] = {}
        self.outer: dict[int, str] = {}
        for port in PORTS:
            inner, outer = lab.name(f"{side}a", port), lab.name(f"{side}b", port)
            netns.sh("ip", "link", "add", inner, "type", "veth", "peer", "name", outer)
            lab.links.append(inner)
            for end in (inner, outer):
                netns.sh("sysctl", "-qw", f"net.ipv6.conf.{end}.disable_ipv6=1", check=False)
                netns.sh("ethtool", "-K", end, "tx", "off", check=False)
                netns.sh("ip", "link", "set", end, "up")
            sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
            sock.bind((outer, 0))
            sock.setblocking(False)
            self.socks[port] = sock
            self.outer[port] = outer
            self.switch_ends.append(inner)

    def send(self, port: int, frame: bytes) -> None:
        self.socks[port].send(frame)

    def drain(self) -> list[tuple[int, bytes]]:
        """The frames the switch sent since the last call (not the ones sent here, nor what a
        socket took from other interfaces before it was bound to its own)."""
        got = []
        for port, sock in self.socks.items():
            while True:
                try:
                    data, addr = sock.recvfrom(65536)
                except BlockingIOError:
                    break
                if addr[2] != PACKET_OUTGOING and addr[0] == self.outer[port]:
                    got.append((port, data))
        return got

    def close(self) -> None:
        for sock in self.socks.values():
            sock.close()


class GrpcSide:
    """A running switch: its P4Runtime client and its wires."""

    def __init__(self, name: str, client: Any, wires: Wires) -> None:
        self.name, self.client, self.wires = name, client, wires

    def write(self, update: Update) -> tuple[int, str]:
        """The canonical status code (and message) of `update` written alone: a failed Write
        is gRPC UNKNOWN with a p4.v1.Error per update in its details (P4Runtime 1.3, 12.3)."""
        request = p4runtime_pb2.WriteRequest(device_id=self.client.device_id, updates=[update])
        request.election_id.low = 1
        try:
            self.client.stub.Write(request, timeout=30)
        except grpc.RpcError as exc:
            for key, value in exc.trailing_metadata() or ():  # type: ignore[attr-defined]
                if key == "grpc-status-details-bin":
                    status = status_pb2.Status.FromString(value)
                    for detail in status.details:
                        error = p4runtime_pb2.Error()
                        if detail.Unpack(error) and error.canonical_code != OK:
                            return error.canonical_code, error.message
            return int(exc.code().value[0]), exc.details() or ""  # type: ignore[attr-defined]
        return OK, ""

    def entries(self) -> list[tuple[Any, ...]]:
        """Every table entry read back, in a form both switches give alike (values without
        leading zero bytes, sorted)."""
        request = p4runtime_pb2.ReadRequest(device_id=self.client.device_id)
        request.entities.add().table_entry.SetInParent()
        out = []
        for response in self.client.stub.Read(request, timeout=60):
            for entity in response.entities:
                e = entity.table_entry
                matches = tuple(sorted((m.field_id, m.WhichOneof("field_match_type"),
                                        tuple(v.lstrip(b"\0") for v in _values(m))) for m in e.match))
                action = (e.action.action.action_id,
                          tuple((p.param_id, p.value.lstrip(b"\0")) for p in e.action.action.params))
                out.append((e.table_id, matches, e.priority, action))
        return sorted(out)


def _values(m: p4runtime_pb2.FieldMatch) -> list[bytes]:
    kind = m.WhichOneof("field_match_type")
    if kind == "exact":
        return [m.exact.value]
    if kind == "lpm":
        return [m.lpm.value, m.lpm.prefix_len.to_bytes(2, "big")]
    if kind == "ternary":
        return [m.ternary.value, m.ternary.mask]
    if kind == "range":
        return [m.range.low, m.range.high]
    return [m.optional.value]


class Maker(WriteMaker):
    """WriteMaker's updates, by default without the ones p4switch and BMv2 are known to treat
    differently: the deliberately invalid ones (both refuse most, with other codes: an unknown
    id is NOT_FOUND on p4switch, INVALID_ARGUMENT on BMv2; a value too wide OUT_OF_RANGE
    against INVALID_ARGUMENT; a counter index past the end OUT_OF_RANGE against UNKNOWN; `is_const` set in a write is refused by p4switch, ignored by
    BMv2), a MODIFY without an action (p4switch keeps the entry's action, BMv2 refuses
    it), a wildcard write of an indirect counter (index unset: P4Runtime's "every cell",
    which p4switch does and BMv2 1.15 answers UNIMPLEMENTED). `invalid=True` keeps them all.
    Actions that draw random numbers (`RANDOM_ACTIONS`: spraying, the lossy link) are never
    written: each switch draws its own."""

    def __init__(self, p4info: Any, seed: int, invalid: bool) -> None:
        super().__init__(p4info, seed, RANDOM_ACTIONS)
        self.invalid = invalid

    def left_out(self, update: Update) -> str | None:
        """Why `update` is not written, or None. An INSERT that some packet could match along
        with an installed entry of the same priority (another match) is not: which of the two
        such a packet meets is each target's own choice (p4switch: the entry inserted first;
        BMv2 1.15: the lowest entry handle, and handles of deleted entries are reused)."""
        entity = update.entity
        if self.invalid or update.type != Update.INSERT or entity.WhichOneof("entity") != "table_entry":
            return None
        entry = entity.table_entry
        if entry.is_default_action or not entry.priority:
            return None
        table = next(t for t in self.tables if t.preamble.id == entry.table_id)
        ident = self._ident(entry.table_id, entry.match, entry.priority)
        for key, other in self.installed.items():
            if other.table_id == entry.table_id and other.priority == entry.priority and key != ident \
                    and _overlap(table, list(entry.match), other.matches):
                return "INSERT overlapping an entry of the same priority"
        return None

    def _invalid(self, update: Update) -> Update:
        return super()._invalid(update) if self.invalid else update

    def _indexed_update(self) -> Update:
        update = super()._indexed_update()
        counter = update.entity.counter_entry
        if not self.invalid and update.entity.HasField("counter_entry"):
            size = next(c.size for c in self.p4info.counters if c.preamble.id == counter.counter_id)
            if not counter.HasField("index") or counter.index.index >= size:
                counter.index.index = self.rng.randrange(min(size, 64))
        return update

    def _table_update(self) -> Update:
        update = super()._table_update()
        entry = update.entity.table_entry
        if not self.invalid and update.type == Update.MODIFY and not entry.is_default_action \
                and not entry.HasField("action"):
            table = next(t for t in self.keyed if t.preamble.id == entry.table_id)
            entry.action.action.CopyFrom(self._action(table))
        return update


def _overlap(table: Any, a: list[p4runtime_pb2.FieldMatch], b: list[p4runtime_pb2.FieldMatch]) -> bool:
    """Whether some key matches both entries' matches (a field left out matches anything)."""
    def num(value: bytes) -> int:
        return int.from_bytes(value, "big")
    ma, mb = {m.field_id: m for m in a}, {m.field_id: m for m in b}
    for mf in table.match_fields:
        x, y = ma.get(mf.id), mb.get(mf.id)
        if x is None or y is None:
            continue
        kind = x.WhichOneof("field_match_type")
        if kind == "exact" and num(x.exact.value) != num(y.exact.value):
            return False
        if kind == "optional" and num(x.optional.value) != num(y.optional.value):
            return False
        if kind == "ternary" and (num(x.ternary.value) ^ num(y.ternary.value)) \
                & num(x.ternary.mask) & num(y.ternary.mask):
            return False
        if kind == "range" and max(num(x.range.low), num(y.range.low)) > min(num(x.range.high), num(y.range.high)):
            return False
        if kind == "lpm":
            shift = mf.bitwidth - min(x.lpm.prefix_len, y.lpm.prefix_len)
            if num(x.lpm.value) >> shift != num(y.lpm.value) >> shift:
                return False
    return True


@contextmanager
def switches(program: Path, workdir: Path) -> Iterator[tuple[GrpcSide, GrpcSide]]:
    """A p4switch (native datapath) and BMv2 running `program`, each on its own wires."""
    from tests.benchmarks.bench_switch import TARGETS

    with ExitStack() as stack:
        lab = stack.enter_context(netns.lab())
        sides = []
        for name, target in (("p4switch", "native"), ("bmv2", "bmv2")):
            wires = Wires(lab, name[0])
            stack.callback(wires.close)
            client = stack.enter_context(TARGETS[target][1](program, wires.switch_ends, workdir))
            sides.append(GrpcSide(name, client, wires))
        yield sides[0], sides[1]


def _collect(sides: tuple[GrpcSide, ...], quiet: float, limit: float) -> list[list[tuple[int, bytes]]]:
    """Each side's frames out until every side has been quiet for `quiet` s (at most `limit` s)."""
    got: list[list[tuple[int, bytes]]] = [[] for _ in sides]
    socks = [s for side in sides for s in side.wires.socks.values()]
    start = last = time.monotonic()
    while time.monotonic() - last < quiet and time.monotonic() - start < limit:
        select.select(socks, [], [], quiet / 4)
        for i, side in enumerate(sides):
            new = side.wires.drain()
            if new:
                got[i] += new
                last = time.monotonic()
    return got


def _key(frame: bytes) -> bytes:
    """What a switch leaves alone of an IPv4 frame it forwards: total length, identification,
    protocol and addresses (so an output is told to which input of a batch it belongs)."""
    return frame[16:20] + frame[23:24] + frame[26:34]


def send_in_turn(ref: GrpcSide, other: GrpcSide, frames: list[tuple[bytes, int]], quiet: float,
                  wait: float = 10.0) -> list[list[tuple[int, bytes]]]:
    """The batch into `ref` at once, then into `other` one frame at a time: a frame `ref`
    forwarded is awaited on `other` (at most `wait` s) before the next goes in.

    Why: in dlcp.p4 the early-drop and ECN thresholds compare against queue depths (the
    `queue_depth` register, which ingress raises by one and egress sets to deq_qdepth, and
    enq_qdepth). p4switch runs a frame to completion before the next when its ports have no rate
    (depths are always 0 there); BMv2 runs ingress and egress in separate threads, so a burst
    finds a frame not yet through egress, and depth 1, 2, ... depending on its scheduling. In
    turn, every forwarded frame has left BMv2 (egress done) before the next enters, so depths
    are 0 there too; frames dropped in ingress change no depth and are not awaited.

    The frames must all enter through one port: a switch polling several ports takes frames
    that wait on them in its own port order, not in the order sent, and in dlcp.p4 the order
    decides which member a round-robin ECMP group gives each frame (the `rr_position`
    register; its draw happens before a missing member drops the frame)."""
    if len({port for _, port in frames}) > 1:
        raise ValueError(f"frames of one batch enter through one port, not {sorted({p for _, p in frames})}")
    for frame, port in frames:
        ref.wires.send(port, frame)
    got = _collect((ref,), quiet, 30.0)[0]
    forwarded = Counter(_key(frame) for _, frame in got)
    out: list[tuple[int, bytes]] = []
    for frame, port in frames:
        key = _key(frame)
        other.wires.send(port, frame)
        want = forwarded.pop(key, 0)
        deadline = time.monotonic() + wait
        while sum(_key(f) == key for _, f in out) < want and time.monotonic() < deadline:
            select.select(list(other.wires.socks.values()), [], [], 0.05)
            out += other.wires.drain()
    rest = _collect((ref, other), quiet / 3, 30.0)
    return [got + rest[0], out + rest[1]]


def run(ref: GrpcSide, other: GrpcSide, writes: int, seed: int, batch: int = 20, packets: int = 10,
        quiet: float = 0.3, skip_delete: int | None = None, invalid: bool = False, progress: Any = None,
        burst: bool = False) -> Report:
    """`writes` seeded updates to both switches, `packets` frames into both after every `batch`
    updates; with `skip_delete` = k, the k-th accepted DELETE is not sent to `other` (a
    planted difference); `invalid`: also the updates they are known to treat differently
    (:class:`Maker`); `burst`: each frame through its own port, into both switches at once
    (queue depths and the order between ports then depend on each switch's scheduling: see
    :func:`send_in_turn`)."""
    maker = Maker(ref.client.p4info, seed, invalid)
    report = Report()
    deletes = 0
    for side in (ref, other):
        side.wires.drain()
    for n in range(writes):
        update = maker.update()
        if update.entity.WhichOneof("entity") == "meter_entry" or \
                update.entity.WhichOneof("entity") == "direct_meter_entry":
            continue
        left_out = maker.left_out(update)
        if left_out is not None:
            report.left_out[left_out] += 1
            continue
        want, why = ref.write(update)
        planted = want == OK and update.type == Update.DELETE and deletes == skip_delete
        deletes += want == OK and update.type == Update.DELETE
        got, why_other = (want, why) if planted else other.write(update)
        report.writes += 1
        report.statuses[want] += 1
        if want != got:
            report.note(f"write {n} ({Update.Type.Name(update.type)} {update.entity.WhichOneof('entity')}): "
                        f"{ref.name} {want} {why[:120]!r}, {other.name} {got} {why_other[:120]!r}")
        if want == OK:
            maker.accepted(update)
        if n % batch == batch - 1 or n == writes - 1:
            frames = [maker.packet() for _ in range(packets)]
            if burst:
                for side in (ref, other):
                    for frame, port in frames:
                        side.wires.send(port, frame)
                outs = _collect((ref, other), quiet, 30.0)
            else:
                frames = [(frame, frames[0][1]) for frame, _ in frames]
                outs = send_in_turn(ref, other, frames, quiet)
            report.packets += len(frames)
            report.frames_out += len(outs[0])
            if Counter(outs[0]) != Counter(outs[1]):
                only_ref = Counter(outs[0]) - Counter(outs[1])
                only_other = Counter(outs[1]) - Counter(outs[0])
                report.note(f"packets after write {n}: only {ref.name} {sorted(only_ref)[:3]}, "
                            f"only {other.name} {sorted(only_other)[:3]}")
        if progress is not None and n % 1000 == 999:
            progress(n + 1, report)
    if ref.entries() != other.entries():
        report.note("final table entries differ")
    return report


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--program", type=Path, default=ROUTER)
    parser.add_argument("--writes", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=26)
    parser.add_argument("--invalid", action="store_true", help="also the updates known to differ (see Maker)")
    parser.add_argument("--batch", type=int, default=20, help="updates between two batches of frames")
    parser.add_argument("--packets", type=int, default=10, help="frames per batch")
    parser.add_argument("--burst", action="store_true",
                        help="frames through their own ports and into BMv2 at once (depths and order then differ)")
    args = parser.parse_args(argv)
    started = time.monotonic()

    def progress(done: int, report: Report) -> None:
        print(f"{done} writes, {report.packets} packets, {report.frames_out} frames out, "
              f"{len(report.mismatches)} mismatches, {time.monotonic() - started:.0f} s", flush=True)
    with tempfile.TemporaryDirectory(prefix="gf-bmv2-diff-") as tmp, switches(args.program, Path(tmp)) as (ref, other):
        report = run(ref, other, args.writes, args.seed, args.batch, args.packets, invalid=args.invalid,
                     progress=progress, burst=args.burst)
    print(f"{args.program.name}: {report.writes} writes {dict(report.statuses)}, {report.packets} packets, "
          f"{report.frames_out} frames out, {len(report.mismatches)} mismatches")
    for reason, count in sorted(report.left_out.items()):
        print(f"  left out: {count} x {reason}")
    for line in report.mismatches[:20]:
        print("  " + line)
    return 1 if report.mismatches else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
