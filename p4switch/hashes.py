"""v1model hash and checksum algorithms over byte strings (BMv2's definitions)."""

from __future__ import annotations

import zlib


def _crc16_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0xA001 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_CRC16 = _crc16_table()


def crc16(data: bytes) -> int:
    """CRC-16 with polynomial 0x8005, reflected, init 0, no final xor (BMv2 ``crc16``)."""
    crc = 0
    for b in data:
        crc = (crc >> 8) ^ _CRC16[(crc ^ b) & 0xFF]
    return crc


def crc32(data: bytes) -> int:
    """The IEEE 802.3 CRC-32 (BMv2 ``crc32``)."""
    return zlib.crc32(data) & 0xFFFFFFFF


def csum16(data: bytes) -> int:
    """The Internet checksum (RFC 1071): one's complement of the one's-complement sum."""
    if len(data) % 2:
        data += b"\x00"
    # The one's-complement sum of 16-bit words is the number modulo 0xFFFF (2**16 = 1 mod
    # 0xFFFF), except that a non-zero multiple of 0xFFFF sums to 0xFFFF, not 0.
    number = int.from_bytes(data, "big")
    total = number % 0xFFFF
    if total == 0 and number:
        total = 0xFFFF
    return ~total & 0xFFFF


def csum16_value(number: int, nbytes: int) -> int:
    """csum16 of `nbytes` bytes given as one big-endian number (no bytes object needed)."""
    if nbytes % 2:
        number <<= 8
    total = number % 0xFFFF
    if total == 0 and number:
        total = 0xFFFF
    return ~total & 0xFFFF


def xor16(data: bytes) -> int:
    if len(data) % 2:
        data += b"\x00"
    value = 0
    for i in range(0, len(data), 2):
        value ^= int.from_bytes(data[i:i + 2], "big")
    return value


def identity(data: bytes) -> int:
    """The first (at most) 8 bytes as a big-endian number (BMv2 ``identity``)."""
    return int.from_bytes(data[:8], "big")


ALGORITHMS = {
    "crc16": crc16,
    "crc32": crc32,
    "csum16": csum16,
    "xor16": xor16,
    "identity": identity,
}


def pack_bits(values: list[int], widths: list[int]) -> bytes:
    """Concatenate values of the given bit widths, MSB first, zero-padded at the end."""
    total, acc = 0, 0
    for value, width in zip(values, widths):
        acc = (acc << width) | (int(value) & ((1 << width) - 1))
        total += width
    pad = (-total) % 8
    return (acc << pad).to_bytes((total + pad) // 8, "big")
