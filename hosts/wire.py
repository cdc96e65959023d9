"""The DLCP wire format: the Scapy layer and the fast codec of the data path.

The Scapy layer :class:`DLCP` is the one declarative description of the header on the host
side (crafting, sniffing, decoding pcaps, tests). The data path does not build Scapy
objects per packet (far too slow for gradient traffic); it packs and unpacks the same 28
bytes with :mod:`struct` and a numpy structured dtype. Tests prove both agree byte for byte.

Header (28 bytes after UDP, destination port 19600, multi-byte fields big-endian)::

    version:4 msg_type:4 | flags:8 | job_id:16 | worker_id:16 | tensor_id:16
    iteration:32 | offset:32 | tensor_len:32 | count:16 | mag_class:8 | prio_hint:8 | seq:32

Flags: bit 0 drop-eligible, bit 1 last packet, bit 2 retransmission, bit 3 ECN echo (in a
bitmap: data packets of the message arrived with IP ECN = CE since the previous answer);
bits 4-7 reserved 0.

Payload: ``count`` float32 values, little-endian, for gradient and parameter messages;
nothing for a probe; for a bitmap, bit i (LSB-first in each byte) tells whether data packet
``offset + i`` arrived, ``count`` bits in all.

Control messages (probe, bitmap) refer to a data message: they carry its job, worker,
iteration and tensor ids, its kind (gradient or parameter) in ``mag_class`` and the tensor's
element count in ``tensor_len``. A probe asks about the data packets ``offset`` ..
``offset + seq - 1`` (a chunk of the message just sent); the one bitmap packet answering it
starts at the same sequence number. In a probe, the *last* flag says the sender has sent
everything of its message (or part): only such a probe may complete a message that misses
elements within its bound. In a bitmap, the *last* flag says the receiver holds the message
(complete); a bitmap with ``count`` 0 says it holds nothing of it. A probe's ``count`` is a
nonce the sender picks; the bitmap answering it carries it back in ``seq``, so the sender
knows which of several probes for the same chunk was answered (round-trip samples stay
exact when a probe was re-sent).

Size class (against reflection): a probe of ``L`` bytes (header plus zero padding) may ask
about at most :func:`probe_capacity` ``(L)`` packets, so a bitmap answer is never more than
``AMPLIFICATION`` (3) times the probe's bytes; senders pad wide probes (:func:`probe_length`).

Keep-alive: a probe with ``tensor_len`` 0 asks about nothing; the answer is a bitmap with
``tensor_len`` and ``count`` 0. Either tells its receiver that the peer is alive.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum, IntFlag

import numpy as np
from scapy.fields import BitEnumField, BitField, ByteField, FlagsField, IntField, ShortField
from scapy.layers.inet import UDP
from scapy.packet import Packet, bind_bottom_up, bind_layers

DLCP_PORT = 19600
VERSION = 1
HEADER_LEN = 28
#: Largest float32 count that keeps an IPv4 packet within a 1500-byte MTU (20 + 8 + 28 + 4n).
MAX_COUNT_MTU_1500 = (1500 - 20 - 8 - HEADER_LEN) // 4


class MsgType(IntEnum):
    GRADIENT = 0
    PARAMETER = 1
    PROBE = 2
    BITMAP = 3


class Flags(IntFlag):
    DROP_ELIGIBLE = 0x01
    LAST = 0x02
    RETRANSMIT = 0x04
    ECN_ECHO = 0x08  # bitmap only: data of the message arrived CE-marked since the last answer


RESERVED_FLAGS = 0xF0

#: Largest bitmap bits one answer packet carries (1024 payload bytes).
BITMAP_BITS_PER_PACKET = 8192
#: A bitmap answer is at most this many times the bytes of the probe it answers.
AMPLIFICATION = 3


def probe_capacity(length: int) -> int:
    """How many packets a probe datagram of `length` bytes may ask about."""
    return max(0, min(BITMAP_BITS_PER_PACKET, 8 * (AMPLIFICATION * length - HEADER_LEN)))


def probe_length(packets: int) -> int:
    """The smallest probe datagram (header plus padding) that may ask about `packets` packets."""
    return max(HEADER_LEN, -(-(HEADER_LEN + -(-packets // 8)) // AMPLIFICATION))


class DLCP(Packet):
    """Scapy layer of the DLCP header (payload follows as Raw)."""

    name = "DLCP"
    fields_desc = [
        BitField("version", VERSION, 4),
        BitEnumField("msg_type", 0, 4, {t.value: t.name.lower() for t in MsgType}),
        FlagsField("flags", 0, 8, ["drop_eligible", "last", "retx", "ecn_echo", "r4", "r5", "r6", "r7"]),
        ShortField("job_id", 0),
        ShortField("worker_id", 0),
        ShortField("tensor_id", 0),
        IntField("iteration", 0),
        IntField("offset", 0),
        IntField("tensor_len", 0),
        ShortField("count", 0),
        ByteField("mag_class", 0),
        ByteField("prio_hint", 0),
        IntField("seq", 0),
    ]

    def values(self) -> np.ndarray:
        """The float32 payload of a gradient or parameter packet."""
        return np.frombuffer(bytes(self.payload), dtype="<f4")


bind_layers(UDP, DLCP, dport=DLCP_PORT)
# Replies (bitmaps) come from the receiver's port: decode them too, without changing how
# UDP()/DLCP() is built (destination port 19600).
bind_bottom_up(UDP, DLCP, sport=DLCP_PORT)


@dataclass(frozen=True, slots=True)
class Header:
    """A decoded DLCP header."""

    msg_type: int
    flags: int
    job_id: int
    worker_id: int
    tensor_id: int
    iteration: int
    offset: int
    tensor_len: int
    count: int
    mag_class: int
    prio_hint: int
    seq: int
    version: int = VERSION


HEADER_STRUCT = struct.Struct("!BBHHHIIIHBBI")
assert HEADER_STRUCT.size == HEADER_LEN

#: The header as a numpy structured dtype, for packing many packets at once.
HEADER_DTYPE = np.dtype(
    [
        ("ver_type", "u1"),
        ("flags", "u1"),
        ("job_id", ">u2"),
        ("worker_id", ">u2"),
        ("tensor_id", ">u2"),
        ("iteration", ">u4"),
        ("offset", ">u4"),
        ("tensor_len", ">u4"),
        ("count", ">u2"),
        ("mag_class", "u1"),
        ("prio_hint", "u1"),
        ("seq", ">u4"),
    ]
)
assert HEADER_DTYPE.itemsize == HEADER_LEN


def pack_header(h: Header) -> bytes:
    """The 28 header bytes of `h`."""
    return HEADER_STRUCT.pack(
        (h.version << 4) | (h.msg_type & 0x0F),
        h.flags,
        h.job_id,
        h.worker_id,
        h.tensor_id,
        h.iteration,
        h.offset,
        h.tensor_len,
        h.count,
        h.mag_class,
        h.prio_hint,
        h.seq,
    )


def unpack_header(data: bytes | memoryview) -> Header:
    """Decode the first 28 bytes of `data` (raises struct.error when shorter)."""
    vt, flags, job, worker, tensor, it, off, tlen, count, mag, prio, seq = HEADER_STRUCT.unpack_from(data)
    return Header(
        msg_type=vt & 0x0F,
        flags=flags,
        job_id=job,
        worker_id=worker,
        tensor_id=tensor,
        iteration=it,
        offset=off,
        tensor_len=tlen,
        count=count,
        mag_class=mag,
        prio_hint=prio,
        seq=seq,
        version=vt >> 4,
    )


def pack_packet(h: Header, payload: bytes | np.ndarray = b"") -> bytes:
    """Header plus payload (float32 values are written little-endian)."""
    if isinstance(payload, np.ndarray):
        payload = np.ascontiguousarray(payload, dtype="<f4").tobytes()
    return pack_header(h) + payload


def pack_bitmap(received: np.ndarray) -> bytes:
    """Bitmap payload: bit i set when ``received[i]`` is true (LSB-first)."""
    return np.packbits(np.asarray(received, dtype=bool), bitorder="little").tobytes()


def unpack_bitmap(payload: bytes | memoryview, nbits: int) -> np.ndarray:
    """Boolean array of `nbits` from a bitmap payload (raises ValueError when too short)."""
    raw = np.frombuffer(payload, dtype=np.uint8)
    if raw.size * 8 < nbits:
        raise ValueError(f"bitmap of {raw.size} bytes cannot hold {nbits} bits")
    return np.unpackbits(raw, count=nbits, bitorder="little").astype(bool)
