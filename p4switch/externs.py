"""Stateful v1model externs as the control plane and the data plane see them."""

from __future__ import annotations

from dataclasses import dataclass, field

from p4switch.errors import P4SwitchError

#: v1model meter colours.
GREEN, YELLOW, RED = 0, 1, 2


class ExternIndexError(P4SwitchError):
    """A control-plane access used an index outside the array."""


def _check(name: str, size: int, index: int) -> None:
    if not 0 <= index < size:
        raise ExternIndexError(f"{name}: index {index} out of range 0..{size - 1}")


@dataclass
class CounterArray:
    """An indexed counter (``counter``); `unit` is packets, bytes or packets_and_bytes."""

    name: str
    size: int
    unit: str = "packets_and_bytes"
    packets: list[int] = field(default_factory=list)
    bytes: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.packets = [0] * self.size
        self.bytes = [0] * self.size

    def count(self, index: int, length: int) -> None:
        """Data-plane count; an index out of range is ignored (as BMv2 does)."""
        if 0 <= index < self.size:
            self.packets[index] += 1
            self.bytes[index] += length

    def read(self, index: int) -> tuple[int, int]:
        _check(self.name, self.size, index)
        return self.packets[index], self.bytes[index]

    def write(self, index: int, packets: int, bytes_: int) -> None:
        _check(self.name, self.size, index)
        self.packets[index], self.bytes[index] = packets, bytes_

    def reset(self) -> None:
        self.packets = [0] * self.size
        self.bytes = [0] * self.size


@dataclass
class RegisterArray:
    """A ``register<T>(size)``: values are ints of `width` bits."""

    name: str
    size: int
    width: int
    values: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.values = [0] * self.size

    def read(self, index: int) -> int:
        _check(self.name, self.size, index)
        return self.values[index]

    def write(self, index: int, value: int) -> None:
        _check(self.name, self.size, index)
        self.values[index] = value & ((1 << self.width) - 1)

    def reset(self) -> None:
        self.values = [0] * self.size


@dataclass
class Meter:
    """A two-rate three-colour meter (RFC 2698); unconfigured meters colour green."""

    cir: float = 0.0
    cburst: int = 0
    pir: float = 0.0
    pburst: int = 0
    configured: bool = False
    _tc: float = 0.0
    _tp: float = 0.0
    _last_us: int = -1

    def set_config(self, cir: float, cburst: int, pir: float, pburst: int) -> None:
        self.cir, self.cburst, self.pir, self.pburst = cir, cburst, pir, pburst
        self.configured = True
        self._tc, self._tp, self._last_us = float(cburst), float(pburst), -1

    def execute(self, amount: int, now_us: int) -> int:
        if not self.configured:
            return GREEN
        if self._last_us >= 0:
            dt = max(0, now_us - self._last_us) / 1e6
            self._tc = min(float(self.cburst), self._tc + self.cir * dt)
            self._tp = min(float(self.pburst), self._tp + self.pir * dt)
        self._last_us = now_us
        if self._tp < amount:
            return RED
        if self._tc < amount:
            self._tp -= amount
            return YELLOW
        self._tp -= amount
        self._tc -= amount
        return GREEN


@dataclass
class MeterArray:
    """An indexed ``meter``; `unit` is packets or bytes (rates per second in that unit)."""

    name: str
    size: int
    unit: str = "packets"
    meters: list[Meter] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.meters = [Meter() for _ in range(self.size)]

    def set_config(self, index: int, cir: float, cburst: int, pir: float, pburst: int) -> None:
        _check(self.name, self.size, index)
        self.meters[index].set_config(cir, cburst, pir, pburst)

    def get_config(self, index: int) -> tuple[float, int, float, int] | None:
        _check(self.name, self.size, index)
        m = self.meters[index]
        return (m.cir, m.cburst, m.pir, m.pburst) if m.configured else None

    def reset_config(self, index: int) -> None:
        _check(self.name, self.size, index)
        self.meters[index] = Meter()

    def execute(self, index: int, length: int, now_us: int) -> int:
        if not 0 <= index < self.size:
            return GREEN
        return self.meters[index].execute(1 if self.unit == "packets" else length, now_us)


@dataclass
class ReplicationEngine:
    """Multicast groups and clone sessions (the packet replication engine)."""

    groups: dict[int, list[tuple[int, int]]] = field(default_factory=dict)
    clone_sessions: dict[int, tuple[list[tuple[int, int]], int]] = field(default_factory=dict)

    def set_multicast_group(self, gid: int, replicas: list[tuple[int, int]]) -> None:
        self.groups[gid] = list(replicas)

    def delete_multicast_group(self, gid: int) -> None:
        self.groups.pop(gid, None)

    def set_clone_session(self, sid: int, replicas: list[tuple[int, int]], truncate_len: int = 0) -> None:
        self.clone_sessions[sid] = (list(replicas), truncate_len)

    def delete_clone_session(self, sid: int) -> None:
        self.clone_sessions.pop(sid, None)


class ValueSetError(P4SwitchError):
    """A value set member does not fit the set (wrong shape, or the set is full)."""


@dataclass
class ValueSet:
    """A parser value set (``value_set<T>(size)``): members the control plane adds, matched by
    ``select``. `fields` are (name, bitwidth, match kind); a member gives one item per field:
    a value (exact), ``(value, mask)`` (ternary and lpm) or ``(low, high)`` (range)."""

    name: str
    fields: list[tuple[str, int, str]]
    size: int
    members: list[tuple[tuple[int, int], ...]] = field(default_factory=list)

    def add(self, member: tuple) -> None:
        if len(member) != len(self.fields):
            raise ValueSetError(f"{self.name}: a member needs {len(self.fields)} item(s), "
                                f"got {len(member)}")
        if len(self.members) >= self.size:
            raise ValueSetError(f"{self.name}: the value set is full ({self.size} members)")
        items = []
        for item, (fname, width, kind) in zip(member, self.fields):
            top = (1 << width) - 1
            if kind == "exact":
                if isinstance(item, tuple):
                    raise ValueSetError(f"{self.name}.{fname}: exact fields take a single value")
                a, b = item, top
            elif not isinstance(item, tuple) or len(item) != 2:
                raise ValueSetError(f"{self.name}.{fname}: {kind} fields take a pair")
            else:
                a, b = item
            if not (0 <= a <= top and 0 <= b <= top):
                raise ValueSetError(f"{self.name}.{fname}: {item} does not fit in {width} bits")
            items.append((a & b, b) if kind != "range" else (a, b))
        self.members.append(tuple(items))

    def clear(self) -> None:
        self.members.clear()

    def replace(self, members: list[tuple[tuple[int, int], ...]]) -> None:
        """All members at once (members already checked by `add` on another set)."""
        self.members[:] = list(members)

    def matches(self, values: list[int]) -> bool:
        kinds = [kind for _, _, kind in self.fields]
        for member in self.members:
            for (a, b), v, kind in zip(member, values, kinds):
                if kind == "range":
                    if not a <= v <= b:
                        break
                elif v & b != a:
                    break
            else:
                return True
        return False
