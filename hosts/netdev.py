"""Whether a UDP GSO datagram towards an address is split into MTU-sized frames on this host,
and how many values a data packet carries on a path (:func:`mtu_count`).

A GSO datagram leaves the UDP stack whole. The kernel splits it at the egress device when that
device does not offer UDP segmentation (``tx-udp-segmentation`` off, as on a veth whose checksum
offload is off): every frame that leaves the host then fits the MTU. A veth that offers it passes
the whole datagram to its peer, where a switch reading with AF_PACKET would see one frame of up to
64 kB; so GSO is used off loopback only when the egress device is known not to offer it.

The egress device is the longest-prefix match in ``/proc/net/route`` (the main table; no policy
routing); its features are read with the ``SIOCETHTOOL`` ioctl. Anything unknown answers False.
"""

from __future__ import annotations

import ctypes
import fcntl
import logging
import socket
import struct
import threading

from hosts.auth import TAG_LEN
from hosts.wire import HEADER_LEN

log = logging.getLogger("hosts.netdev")

SIOCETHTOOL = 0x8946
ETHTOOL_GSTRINGS = 0x1B
ETHTOOL_GSSET_INFO = 0x37
ETHTOOL_GFEATURES = 0x3A
ETH_SS_FEATURES = 4
ETH_GSTRING_LEN = 32
FEATURE = "tx-udp-segmentation"

_lock = threading.Lock()
_devices: dict[str, bool | None] = {}


def route_device(ip: str, table: str = "/proc/net/route") -> str | None:
    """The device of the longest-prefix route to IPv4 `ip` in `table` (None: no route, unreadable)."""
    try:
        dest = struct.unpack("<I", socket.inet_aton(ip))[0]  # the table's byte order
        with open(table, encoding="ascii") as f:
            rows = f.read().splitlines()[1:]
    except OSError:
        return None
    best: tuple[int, int, str] | None = None  # (prefix length, -metric, device)
    for row in rows:
        cols = row.split()
        if len(cols) < 8:
            continue
        dev, net, flags, metric, mask = cols[0], int(cols[1], 16), int(cols[3], 16), int(cols[6]), int(cols[7], 16)
        if not flags & 1 or dest & mask != net:  # RTF_UP
            continue
        key = (bin(mask).count("1"), -metric, dev)
        if best is None or key[:2] > best[:2]:
            best = key
    return best[2] if best else None


def _ethtool(sock: socket.socket, dev: str, buf: ctypes.Array) -> None:
    ifreq = struct.pack("16sP16x", dev.encode()[:15], ctypes.addressof(buf))
    fcntl.ioctl(sock.fileno(), SIOCETHTOOL, ifreq)


def device_feature(dev: str, name: str = FEATURE) -> bool | None:
    """Whether feature `name` (as ``ethtool -k`` names it) is active on `dev`; None when unknown."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            info = ctypes.create_string_buffer(struct.pack("IIQI", ETHTOOL_GSSET_INFO, 0, 1 << ETH_SS_FEATURES, 0))
            _ethtool(sock, dev, info)
            count = struct.unpack_from("I", info, 16)[0]
            if not count:
                return None
            strings = ctypes.create_string_buffer(12 + count * ETH_GSTRING_LEN)
            struct.pack_into("III", strings, 0, ETHTOOL_GSTRINGS, ETH_SS_FEATURES, count)
            _ethtool(sock, dev, strings)
            names = [strings.raw[12 + i * ETH_GSTRING_LEN:12 + (i + 1) * ETH_GSTRING_LEN].split(b"\0")[0].decode()
                     for i in range(count)]
            if name not in names:
                return None
            blocks = -(-count // 32)
            feats = ctypes.create_string_buffer(8 + blocks * 16)
            struct.pack_into("II", feats, 0, ETHTOOL_GFEATURES, blocks)
            _ethtool(sock, dev, feats)
        except OSError:
            return None
    bit = names.index(name)
    active = struct.unpack_from("I", feats, 8 + (bit // 32) * 16 + 8)[0]
    return bool(active >> (bit % 32) & 1)


def splits_gso(ip: str) -> bool:
    """True when UDP GSO datagrams to `ip` leave this host as frames within the MTU: the egress
    device does not offer UDP segmentation, so the kernel segments before it. Cached per device;
    the first answer per device is logged."""
    dev = route_device(ip)
    if dev is None or dev == "lo":
        return False  # loopback is decided by the caller; no route: unknown
    with _lock:
        if dev not in _devices:
            _devices[dev] = device_feature(dev)
            state = {None: "unknown", True: "on", False: "off"}[_devices[dev]]
            log.info("hosts data path: %s on %s is %s: UDP GSO towards it %s", FEATURE, dev, state,
                     "used (the kernel segments)" if _devices[dev] is False else "not used")
        return _devices[dev] is False


def forget() -> None:
    """Drop cached device answers (after a device's offloads changed)."""
    with _lock:
        _devices.clear()


#: Largest UDP payload of an IPv4 datagram (65,535 - 20 - 8 bytes).
MAX_UDP_PAYLOAD = 65_507


def mtu_count(host: str, tagged: bool = False) -> int:
    """Values per data packet that fill the MTU of the path an endpoint bound to `host` sends on,
    as TCP sizes its segments: a loopback address reaches only loopback, whose MTU (64 kB on
    Linux) allows a datagram of up to 16,369 values (the count field is 16 bits wide; one
    datagram, no segmentation); any other address gets the 1500-byte MTU's 361 (the fabric's
    veths and Ethernet; a larger interface MTU says nothing of the switches beyond it).
    `tagged`: room for a job-key tag."""
    tag = TAG_LEN if tagged else 0
    if not host.startswith("127."):
        return (1500 - 20 - 8 - HEADER_LEN - tag) // 4
    try:
        with open("/sys/class/net/lo/mtu", encoding="ascii") as f:
            mtu = int(f.read().strip())
    except (OSError, ValueError):
        mtu = 1500
    return (min(mtu - 20 - 8, MAX_UDP_PAYLOAD) - HEADER_LEN - tag) // 4
