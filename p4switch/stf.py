"""Runner for p4c's STF test format against the embedded pipeline.

Commands: ``add TABLE [PRIORITY] KEY:VALUE... ACTION(ARG:VALUE, ...) [= ID]``,
``setdefault TABLE ACTION(...)``, ``packet PORT HEX``, ``expect PORT [HEX [$]]``,
``no_packet``, ``wait``, ``check_counter NAME(INDEX|$ID) [packets|bytes] OP VALUE``,
``remove all``, ``mirroring_add SESSION PORT``, ``mc_mgrp_create GROUP``,
``mc_node_create RID PORT...``, ``mc_node_associate GROUP HANDLE``.

As p4c's BMv2 runner does, outputs are compared per port at the end, in order: every port
named in a ``packet`` or ``expect`` line must emit exactly the expected packets (a packet may
be longer than its expectation unless it ends with ``$``; ``*`` matches any nibble); ``expect
PORT`` without data accepts anything on that port. Priorities follow p4c: the higher the
number, the higher the priority; entries without one rank by insertion order.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from p4switch.errors import P4SwitchError
from p4switch.pipeline import Pipeline
from p4switch.tables import (
    Exact, Lpm, Optional, Range, Table, TableEntry, TableError, Ternary,
)


class StfError(P4SwitchError):
    """The STF file is malformed or uses something this runner does not support."""


@dataclass
class StfResult:
    failures: list[str] = field(default_factory=list)
    packets_sent: int = 0
    packets_received: int = 0
    #: p4switch extensions the script used (forms p4c's STF grammar or its BMv2 driver lacks)
    extensions: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures


@dataclass
class _Expect:
    data: str | None  # None: any packet(s)
    exact: bool
    line: int


_NUMBER = re.compile(r"^(0[xX][0-9a-fA-F*_]+|0[bB][01*_]+|[0-9]+)$")


def _parse_number(text: str, line: int) -> tuple[int, int | None]:
    """(value, mask or None) of an STF number; ``*`` digits make a ternary mask."""
    t = text.replace("_", "")
    if not _NUMBER.match(t):
        raise StfError(f"line {line}: bad number {text!r}")
    if t[:2].lower() in ("0x", "0b"):
        base_bits = 4 if t[1] in "xX" else 1
        digits = t[2:]
        if "*" in digits:
            full = (1 << base_bits) - 1
            value = mask = 0
            for d in digits:
                value <<= base_bits
                mask <<= base_bits
                if d != "*":
                    value |= int(d, 16 if base_bits == 4 else 2)
                    mask |= full
            return value, mask
        return int(digits, 16 if base_bits == 4 else 2), None
    return int(t), None


def _split_action(text: str, line: int) -> tuple[str, list[tuple[str, str]]]:
    m = re.match(r"^\s*([\w.$\[\]]+)\s*\((.*)\)\s*$", text)
    if not m:
        raise StfError(f"line {line}: expected ACTION(ARG:VALUE, ...), got {text!r}")
    args = []
    for part in filter(None, (p.strip() for p in m.group(2).split(","))):
        if ":" not in part:
            raise StfError(f"line {line}: action argument {part!r} is not NAME:VALUE")
        k, v = part.split(":", 1)
        args.append((k.strip(), v.strip()))
    return m.group(1), args


def _by_suffix(names: list[str], wanted: str, what: str, line: int) -> str:
    if wanted in names:
        return wanted
    found = [n for n in names if n.endswith("." + wanted) or n.endswith(wanted)]
    if len(found) == 1:
        return found[0]
    if not found:
        raise StfError(f"line {line}: no {what} named {wanted!r}")
    raise StfError(f"line {line}: {what} name {wanted!r} is ambiguous: {', '.join(found)}")


def _key_name(table: Table, wanted: str, line: int) -> int:
    names = [k.name for k in table.keys]
    w = re.sub(r"\$([0-9]+)", r"[\1]", wanted)
    candidates = [w, w + ".$valid$"]
    if w.endswith(".valid"):
        candidates.append(w[:-5] + "$valid$")
    for c in candidates:
        if c in names:
            return names.index(c)
    found = [i for i, n in enumerate(names) if n.endswith("." + w) or n.endswith("." + w + ".$valid$")]
    if len(found) == 1:
        return found[0]
    raise StfError(f"line {line}: table {table.name} has no key field {wanted!r} "
                   f"(fields: {', '.join(names)})")


def _hex(data: bytes) -> str:
    return data.hex().upper()


def _compare(expected: str, received: bytes, exact: bool) -> str | None:
    """None if `received` matches, else a readable explanation."""
    got = _hex(received)
    if len(got) < len(expected):
        return (f"received packet too short: {len(got) // 2} bytes, expected at least "
                f"{len(expected) // 2}\n  expected {expected}\n  received {got}")
    for i, ch in enumerate(expected):
        if ch != "*" and ch != got[i]:
            marker = " " * i + "^"
            return (f"packets differ at byte {i // 2} (nibble {i})\n  expected {expected}\n"
                    f"  received {got}\n           {marker}")
    if exact and len(got) != len(expected):
        return (f"received packet longer than expected ({len(got) // 2} vs "
                f"{len(expected) // 2} bytes) and `$` asks for an exact length\n"
                f"  expected {expected}\n  received {got}")
    return None


class StfRunner:
    """Runs one STF script against one pipeline.

    p4c's format is accepted as is. Forms beyond it are p4switch extensions, reported in
    ``StfResult.extensions`` (and by ``p4switch stf``): ``VALUE&&&MASK`` and ``LO..HI`` keys,
    dotted counter names in ``check_counter``; and, where p4c's grammar has the form but its
    BMv2 driver cannot run it, ``VALUE/LEN`` LPM keys, range or optional key fields and
    ``no_packet``. p4c's BMv2 driver parses ``check_counter`` but does not evaluate it; this
    runner does.
    """

    def __init__(self, pipeline: Pipeline) -> None:
        self.pipeline = pipeline
        self.result = StfResult()
        self.ports: set[int] = set()
        self.expected: dict[int, list[_Expect]] = {}
        self.received: dict[int, list[bytes]] = {}
        self.entries: dict[str, tuple[Table, TableEntry]] = {}
        self.strict_all = False
        self.order: dict[str, int] = {}
        self.mc_nodes: list[tuple[int, list[int]]] = []
        self.now_us = 0

    def run(self, text: str) -> StfResult:
        for number, raw in enumerate(text.splitlines(), start=1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            word, _, rest = line.partition(" ")
            handler = getattr(self, f"_cmd_{word.lower()}", None)
            if handler is None:
                raise StfError(f"line {number}: unsupported STF command {word!r}")
            handler(rest.strip(), number)
        self._check_outputs()
        return self.result

    # -- table commands ------------------------------------------------------------------------

    def _table(self, name: str, line: int) -> Table:
        return self.pipeline.tables[_by_suffix(list(self.pipeline.tables), name, "table", line)]

    def _action_args(self, table: Table, text: str, line: int) -> tuple[str, tuple[int, ...]]:
        aname, args = _split_action(text, line)
        action = _by_suffix(list(table.actions), aname, f"action of table {table.name}", line)
        params = [p.name for p in self.pipeline.info.actions[action].params]
        given = dict(args)
        unknown = set(given) - set(params)
        if unknown:
            raise StfError(f"line {line}: action {action} has no parameter(s) {', '.join(sorted(unknown))}")
        missing = [p for p in params if p not in given]
        if missing:
            raise StfError(f"line {line}: action {action} needs {', '.join(missing)}")
        values = tuple(_parse_number(given[p], line)[0] for p in params)
        return action, values

    def _cmd_add(self, rest: str, line: int) -> None:
        entry_id = None
        if "=" in rest:
            rest, entry_id = rest.rsplit("=", 1)
            entry_id = entry_id.strip()
        m = re.match(r"^(\S+)\s+(.*)$", rest.strip())
        if not m:
            raise StfError(f"line {line}: add needs a table, keys and an action")
        table = self._table(m.group(1), line)
        body = m.group(2)
        paren = body.find("(")
        if paren < 0:
            raise StfError(f"line {line}: add needs ACTION(...)")
        words = body[:paren].split()
        action_text = words.pop() + body[paren:]
        priority: int | None = None
        if words and re.fullmatch(r"[0-9]+", words[0]):
            priority = int(words.pop(0))
        match: list = [None] * len(table.keys)
        for word in words:
            if ":" not in word:
                raise StfError(f"line {line}: key {word!r} is not FIELD:VALUE")
            fname, value = word.rsplit(":", 1)
            i = _key_name(table, fname, line)
            match[i] = self._field_match(table, i, value, line)
        for i, key in enumerate(table.keys):
            if match[i] is None and key.match_kind == "lpm":
                match[i] = Lpm(0, 0)
            elif match[i] is None and key.match_kind == "exact":
                raise StfError(f"line {line}: exact key field {key.name} is missing")
        action, args = self._action_args(table, action_text, line)
        if table.needs_priority:
            if priority is None:
                count = self.order.get(table.name, 0) + 1
                self.order[table.name] = count
                priority = 1_000_000 - count
            else:
                priority += 1
        else:
            priority = 0
        entry = TableEntry(tuple(match), priority, action, args)
        try:
            table.insert(entry)
        except TableError as exc:
            raise StfError(f"line {line}: {exc}") from None
        if entry_id:
            self.entries[entry_id] = (table, entry)

    def _extension(self, line: int, what: str) -> None:
        self.result.extensions.append(f"line {line}: {what}")

    def _field_match(self, table: Table, i: int, text: str, line: int):
        key = table.keys[i]
        if "&&&" in text:
            self._extension(line, f"VALUE&&&MASK key {text!r} (p4c's STF writes ternaries with *)")
        elif ".." in text:
            self._extension(line, f"LO..HI range key {text!r} (not in p4c's STF grammar)")
        elif "/" in text:
            self._extension(line, f"VALUE/LEN key {text!r} (p4c's BMv2 driver fails on it; write 0x0A0002**)")
        if key.match_kind in ("range", "optional"):
            self._extension(line, f"{key.match_kind} key {key.name} (p4c's BMv2 driver has none)")
        top = (1 << key.bitwidth) - 1
        kind = key.match_kind
        if "&&&" in text:
            v, m = text.split("&&&", 1)
            value, mask = _parse_number(v, line)[0], _parse_number(m, line)[0]
        elif ".." in text:
            lo, hi = text.split("..", 1)
            return Range(_parse_number(lo, line)[0], _parse_number(hi, line)[0])
        elif "/" in text:
            v, plen = text.split("/", 1)
            prefix = int(plen)
            value = _parse_number(v, line)[0]
            if kind == "lpm":
                return Lpm(value & (top ^ ((1 << (key.bitwidth - prefix)) - 1)), prefix)
            mask = top ^ ((1 << (key.bitwidth - prefix)) - 1)
        else:
            value, mask = _parse_number(text, line)
            if mask is None:
                mask = top
            elif kind == "lpm":
                digits = text[2:].replace("_", "")
                bits = 4 if text[1] in "xX" else 1
                prefix = (len(digits) - digits.count("*")) * bits
                return Lpm(value & mask & top, min(prefix, key.bitwidth))
        value &= top
        mask &= top
        if kind == "exact":
            if mask != top:
                raise StfError(f"line {line}: exact field {key.name} cannot have wildcards")
            return Exact(value)
        if kind == "optional":
            return Optional(value) if mask == top else None
        if kind == "range":
            return Range(value, value) if mask == top else None
        if kind == "lpm":
            return Lpm(value & mask, bin(mask).count("1"))
        return Ternary(value & mask, mask)

    def _cmd_setdefault(self, rest: str, line: int) -> None:
        name, _, action_text = rest.partition(" ")
        table = self._table(name, line)
        action, args = self._action_args(table, action_text, line)
        try:
            table.set_default(action, args)
        except TableError as exc:
            raise StfError(f"line {line}: {exc}") from None

    def _cmd_remove(self, rest: str, line: int) -> None:
        if rest.strip().lower() != "all":
            raise StfError(f"line {line}: only `remove all` is supported")
        for table in self.pipeline.tables.values():
            if not table.is_const:
                table.clear()

    # -- packets -------------------------------------------------------------------------------

    def _cmd_packet(self, rest: str, line: int) -> None:
        port_text, _, data = rest.partition(" ")
        try:
            port = int(port_text)
            payload = bytes.fromhex("".join(data.split()))
        except ValueError:
            raise StfError(f"line {line}: packet needs PORT HEXDATA") from None
        self.ports.add(port)
        self.result.packets_sent += 1
        self.now_us += 1
        for out_port, frame in self.pipeline.process(payload, port, self.now_us):
            self.received.setdefault(out_port, []).append(frame)
            self.result.packets_received += 1

    def _cmd_expect(self, rest: str, line: int) -> None:
        port_text, _, data = rest.partition(" ")
        try:
            port = int(port_text)
        except ValueError:
            raise StfError(f"line {line}: expect needs a port number") from None
        self.ports.add(port)
        data = "".join(data.split()).upper()
        exact = data.endswith("$")
        data = data.rstrip("$")
        if data and not re.fullmatch(r"[0-9A-F*]+", data):
            raise StfError(f"line {line}: bad expected data")
        self.expected.setdefault(port, []).append(_Expect(data or None, exact, line))

    def _cmd_no_packet(self, rest: str, line: int) -> None:
        self._extension(line, "no_packet (p4c's BMv2 driver fails on it)")
        self.strict_all = True

    def _cmd_wait(self, rest: str, line: int) -> None:
        pass

    def _check_outputs(self) -> None:
        ports = set(self.ports)
        if self.strict_all:
            ports |= set(self.received)
        for port in sorted(ports):
            expects = self.expected.get(port, [])
            got = self.received.get(port, [])
            if any(e.data is None for e in expects):
                continue
            for i, (e, frame) in enumerate(zip(expects, got)):
                problem = _compare(e.data or "", frame, e.exact)
                if problem:
                    self.result.failures.append(
                        f"port {port}, packet {i} (expect on line {e.line}): {problem}")
            if len(got) != len(expects):
                extra = "".join(f"\n  unexpected {_hex(f)}" for f in got[len(expects):])
                self.result.failures.append(
                    f"port {port}: expected {len(expects)} packet(s), got {len(got)}{extra}")

    # -- counters and replication --------------------------------------------------------------

    def _cmd_check_counter(self, rest: str, line: int) -> None:
        m = re.match(r"^([\w.]+)\(\s*(\$?\w+)\s*\)\s*(?:(packets|bytes)\s*(==|!=|<=|<|>=|>)\s*(\S+))?\s*$", rest)
        if not m:
            raise StfError(f"line {line}: check_counter NAME(INDEX) [packets|bytes] OP VALUE expected")
        name, index_text, kind, op, value_text = m.groups()
        if "." in name:
            self._extension(line, f"dotted counter name {name!r} (p4c's grammar takes a plain name)")
        if index_text.startswith("$"):
            ref = self.entries.get(index_text[1:])
            if ref is None:
                raise StfError(f"line {line}: no entry was added with id {index_text[1:]}")
            table, entry = ref
            packets, nbytes = table.direct_counter(entry)
        else:
            counter = self.pipeline.counters[_by_suffix(list(self.pipeline.counters), name, "counter", line)]
            packets, nbytes = counter.read(_parse_number(index_text, line)[0])
        if kind is None:
            return
        actual = packets if kind == "packets" else nbytes
        want = _parse_number(value_text, line)[0]
        ok = {"==": actual == want, "!=": actual != want, "<": actual < want, "<=": actual <= want,
              ">": actual > want, ">=": actual >= want}[op]
        if not ok:
            self.result.failures.append(
                f"line {line}: counter {name}({index_text}) {kind} is {actual}, expected {op} {want}")

    def _cmd_mirroring_add(self, rest: str, line: int) -> None:
        parts = rest.split()
        if len(parts) != 2:
            raise StfError(f"line {line}: mirroring_add SESSION PORT expected")
        self.pipeline.pre.set_clone_session(int(parts[0]), [(int(parts[1]), 0)])
        self.ports.add(int(parts[1]))

    def _cmd_mc_mgrp_create(self, rest: str, line: int) -> None:
        self.pipeline.pre.set_multicast_group(int(rest.split()[0]), [])

    def _cmd_mc_node_create(self, rest: str, line: int) -> None:
        parts = [int(p) for p in rest.split()]
        if len(parts) < 2:
            raise StfError(f"line {line}: mc_node_create RID PORT... expected")
        self.mc_nodes.append((parts[0], parts[1:]))

    def _cmd_mc_node_associate(self, rest: str, line: int) -> None:
        group, handle = (int(p) for p in rest.split())
        if not 0 <= handle < len(self.mc_nodes):
            raise StfError(f"line {line}: no multicast node with handle {handle}")
        rid, ports = self.mc_nodes[handle]
        replicas = list(self.pipeline.pre.groups.get(group, []))
        replicas += [(p, rid) for p in ports]
        self.pipeline.pre.set_multicast_group(group, replicas)


def run_stf(pipeline: Pipeline, text: str) -> StfResult:
    """Run an STF script; StfError for bad or unsupported input."""
    return StfRunner(pipeline).run(text)
