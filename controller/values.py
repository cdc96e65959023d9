"""Canonical P4Runtime values and the match syntax users know from p4runtime-shell.

Values travel as the shortest big-endian byte string that holds them (P4Runtime spec,
"Bytestrings"): zero is ``b"\\x00"``. Text forms accepted everywhere a value is: decimal,
``0x`` hex, IPv4 (``10.0.0.1``) and MAC (``00:00:0a:00:01:01``) literals. Match forms:
``10.0.0.0/8`` (lpm), ``value&&&mask`` (ternary), ``lo..hi`` (range), or a plain value.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from p4.v1 import p4runtime_pb2

from controller.errors import EncodingError

_MAC = re.compile(r"^[0-9a-fA-F]{1,2}(:[0-9a-fA-F]{1,2}){5}$")


def parse_int(text: str | int, bitwidth: int, what: str = "value") -> int:
    """An integer from a number, decimal/hex text, IPv4 or MAC literal, checked against the width."""
    if isinstance(text, bool):
        raise EncodingError(f"{what}: expected a number, got {text!r}")
    if isinstance(text, int):
        value = text
    else:
        s = str(text).strip()
        try:
            if _MAC.match(s):
                value = int("".join(f"{int(b, 16):02x}" for b in s.split(":")), 16)
            elif s.count(".") == 3:
                value = int(ipaddress.IPv4Address(s))
            elif ":" in s:
                value = int(ipaddress.IPv6Address(s))
            else:
                value = int(s, 0)
        except ValueError:
            raise EncodingError(f"{what}: {s!r} is not a number, IPv4 or MAC literal") from None
    if value < 0 or value >= 1 << bitwidth:
        raise EncodingError(f"{what}: {text!r} does not fit in {bitwidth} bits")
    return value


def encode_int(value: int, bitwidth: int, what: str = "value") -> bytes:
    """The canonical bytestring: minimum-width big-endian, at least one byte."""
    if value < 0 or value >= 1 << bitwidth:
        raise EncodingError(f"{what}: {value} does not fit in {bitwidth} bits")
    return value.to_bytes(max(1, (value.bit_length() + 7) // 8), "big")


def decode_int(data: bytes, bitwidth: int, what: str = "value") -> int:
    """Accepts canonical or padded bytestrings (switches may send either)."""
    value = int.from_bytes(data, "big")
    if value >= 1 << bitwidth:
        raise EncodingError(f"{what}: {data.hex()} does not fit in {bitwidth} bits")
    return value


def format_int(value: int, bitwidth: int, field_name: str = "") -> str:
    """Text for a value: MAC for 48 bits, IPv4 for 32-bit address fields, decimal otherwise."""
    if bitwidth == 48:
        return ":".join(f"{b:02x}" for b in value.to_bytes(6, "big"))
    if bitwidth == 32 and "addr" in field_name.lower():
        return str(ipaddress.IPv4Address(value))
    return str(value)


@dataclass(frozen=True)
class Exact:
    value: int

    def text(self, bitwidth: int, name: str = "") -> str:
        return format_int(self.value, bitwidth, name)


@dataclass(frozen=True)
class Lpm:
    value: int
    prefix_len: int

    def text(self, bitwidth: int, name: str = "") -> str:
        return f"{format_int(self.value, bitwidth, name)}/{self.prefix_len}"


@dataclass(frozen=True)
class Ternary:
    value: int
    mask: int

    def text(self, bitwidth: int, name: str = "") -> str:
        return f"{format_int(self.value, bitwidth, name)}&&&{self.mask:#x}"


@dataclass(frozen=True)
class Range:
    low: int
    high: int

    def text(self, bitwidth: int, name: str = "") -> str:
        return f"{self.low}..{self.high}"


@dataclass(frozen=True)
class Optional:
    value: int

    def text(self, bitwidth: int, name: str = "") -> str:
        return format_int(self.value, bitwidth, name)


Match = Exact | Lpm | Ternary | Range | Optional


def parse_match(spec: str | int | Match, match_type: str, bitwidth: int, what: str) -> Match:
    """A match in canonical form (masked value bits cleared) from text, a number or a Match."""
    if isinstance(spec, (Exact, Lpm, Ternary, Range, Optional)):
        return canonical_match(spec, match_type, bitwidth, what)
    text = spec if isinstance(spec, int) else str(spec).strip()
    full = (1 << bitwidth) - 1
    if match_type == "exact":
        return Exact(parse_int(text, bitwidth, what))
    if match_type == "optional":
        return Optional(parse_int(text, bitwidth, what))
    if match_type == "lpm":
        if isinstance(text, str) and "/" in text:
            value, _, length = text.rpartition("/")
            try:
                plen = int(length)
            except ValueError:
                raise EncodingError(f"{what}: prefix length {length!r} is not a number") from None
            return canonical_match(Lpm(parse_int(value, bitwidth, what), plen), match_type, bitwidth, what)
        return Lpm(parse_int(text, bitwidth, what), bitwidth)
    if match_type == "ternary":
        if isinstance(text, str) and "&&&" in text:
            value, _, mask = text.partition("&&&")
            return canonical_match(
                Ternary(parse_int(value, bitwidth, what), parse_int(mask, bitwidth, f"{what} mask")),
                match_type,
                bitwidth,
                what,
            )
        return Ternary(parse_int(text, bitwidth, what), full)
    if match_type == "range":
        if isinstance(text, str) and ".." in text:
            low, _, high = text.partition("..")
            return canonical_match(
                Range(parse_int(low, bitwidth, what), parse_int(high, bitwidth, what)), match_type, bitwidth, what
            )
        value = parse_int(text, bitwidth, what)
        return Range(value, value)
    raise EncodingError(f"{what}: unsupported match type {match_type}")


def canonical_match(m: Match, match_type: str, bitwidth: int, what: str) -> Match:
    """Check a Match against its field and clear the bits its mask or prefix ignores."""
    expected = {"exact": Exact, "lpm": Lpm, "ternary": Ternary, "range": Range, "optional": Optional}[match_type]
    if not isinstance(m, expected):
        raise EncodingError(f"{what}: a {match_type} field cannot take {type(m).__name__.lower()} match {m}")
    full = (1 << bitwidth) - 1
    if isinstance(m, Lpm):
        if not 0 <= m.prefix_len <= bitwidth:
            raise EncodingError(f"{what}: prefix length {m.prefix_len} is not in 0..{bitwidth}")
        parse_int(m.value, bitwidth, what)
        mask = full ^ ((1 << (bitwidth - m.prefix_len)) - 1)
        return Lpm(m.value & mask, m.prefix_len)
    if isinstance(m, Ternary):
        parse_int(m.value, bitwidth, what)
        parse_int(m.mask, bitwidth, f"{what} mask")
        return Ternary(m.value & m.mask, m.mask)
    if isinstance(m, Range):
        parse_int(m.low, bitwidth, what)
        parse_int(m.high, bitwidth, what)
        if m.low > m.high:
            raise EncodingError(f"{what}: range {m.low}..{m.high} is empty (low > high)")
        return m
    parse_int(m.value, bitwidth, what)
    return m


def is_wildcard(m: Match, bitwidth: int) -> bool:
    """Matches everything: P4Runtime requires such fields to be left out of the entry."""
    if isinstance(m, Lpm):
        return m.prefix_len == 0
    if isinstance(m, Ternary):
        return m.mask == 0
    if isinstance(m, Range):
        return m.low == 0 and m.high == (1 << bitwidth) - 1
    return False


def encode_match_into(fm: p4runtime_pb2.FieldMatch, field_id: int, m: Match, bitwidth: int, what: str) -> None:
    """Fill a FieldMatch in place (building sub-messages in place is what keeps big batches fast)."""
    fm.field_id = field_id
    if isinstance(m, Exact):
        fm.exact.value = encode_int(m.value, bitwidth, what)
    elif isinstance(m, Lpm):
        fm.lpm.value = encode_int(m.value, bitwidth, what)
        fm.lpm.prefix_len = m.prefix_len
    elif isinstance(m, Ternary):
        fm.ternary.value = encode_int(m.value, bitwidth, what)
        fm.ternary.mask = encode_int(m.mask, bitwidth, what)
    elif isinstance(m, Range):
        fm.range.low = encode_int(m.low, bitwidth, what)
        fm.range.high = encode_int(m.high, bitwidth, what)
    else:
        fm.optional.value = encode_int(m.value, bitwidth, what)


def encode_match(field_id: int, m: Match, bitwidth: int, what: str) -> p4runtime_pb2.FieldMatch:
    fm = p4runtime_pb2.FieldMatch()
    encode_match_into(fm, field_id, m, bitwidth, what)
    return fm


def decode_match(fm: p4runtime_pb2.FieldMatch, bitwidth: int, what: str) -> Match:
    kind = fm.WhichOneof("field_match_type")
    if kind == "exact":
        return Exact(decode_int(fm.exact.value, bitwidth, what))
    if kind == "lpm":
        return Lpm(decode_int(fm.lpm.value, bitwidth, what), fm.lpm.prefix_len)
    if kind == "ternary":
        return Ternary(decode_int(fm.ternary.value, bitwidth, what), decode_int(fm.ternary.mask, bitwidth, what))
    if kind == "range":
        return Range(decode_int(fm.range.low, bitwidth, what), decode_int(fm.range.high, bitwidth, what))
    if kind == "optional":
        return Optional(decode_int(fm.optional.value, bitwidth, what))
    raise EncodingError(f"{what}: field match without a value")
