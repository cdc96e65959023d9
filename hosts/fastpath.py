"""The host data path's per-packet work in C (``hosts/fastpath.c``), loaded through cffi.

Built once per source, compiler and flags into ``$GRADFABRIC_HOSTPATH_CACHE`` (default
``~/.cache/gradfabric/hostpath``) as ``<sha256>.so``, like the switch's native datapath
(:mod:`p4switch.native.build`); later loads are a file lookup. ``GRADFABRIC_FASTPATH_SANITIZE=1``
adds AddressSanitizer and UBSan (:data:`SANITIZE_FLAGS`, its own cache entry; the process must
then preload libasan: ``LD_PRELOAD=$(gcc -print-file-name=libasan.so)``). When it cannot be built or
loaded (no compiler, no cffi, ``GRADFABRIC_FASTPATH=0``) :func:`native` returns None, one
log line says why, and the endpoints use the Python data path, which does the same work
packet by packet.

* :class:`BatchSender` sends a message's packets with ``sendmmsg``: each packet is its
  28-byte header row plus its values read in place from the tensor (two iovecs, no copy in
  user space). Towards a local address (the route's device is loopback) it uses UDP GSO,
  one datagram of up to 44 packets, which a receiver with UDP GRO takes whole; also towards
  a route whose device does not offer UDP segmentation, as the kernel then splits the
  datagram into MTU-sized frames before the device (:func:`hosts.netdev.splits_gso`). Any
  other route gets one datagram per packet, so frames that reach a switch stay within the MTU.
* :class:`BatchReceiver` reads up to 64 datagrams per ``recvmmsg`` with their IP TOS bytes
  and GRO segment sizes, lists their packets, finds runs of one message's data and places a
  run's values into the message's arrays, or adds them to what the array holds (:meth:`Reassembler.handle_run
  <hosts.receiver.Reassembler.handle_run>` decides everything else). Packets larger than half
  a slot (64 kB datagrams on loopback) of the message the last run placed in mode
  ``PLACE_AHEAD`` are read straight into where they belong, when that place holds nothing
  yet: a packet that turns out to be another is copied back into its slot, so the values of
  the expected ones are copied once, by the kernel. Before a batch of large packets, ``gfh_recv``
  peeks at the next datagram's header (``hosts/ahead.c``): the hint is pointed at its message
  when that is another registered one, and the batch is short when it is a new one.
"""

from __future__ import annotations

import ctypes.util
import hashlib
import logging
import os
import shutil
import socket
import subprocess
import tempfile
import threading
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from hosts import netdev
from hosts.answers import CAnswers

log = logging.getLogger("hosts.fastpath")

CFLAGS = ("-O3", "-shared", "-fPIC", "-Wall", "-fvisibility=default")
SANITIZE_FLAGS = ("-fsanitize=address,undefined", "-fno-sanitize-recover=undefined", "-fno-omit-frame-pointer",
                  "-g")
SOURCE = "fastpath.c"
#: Compiled as one unit, in this order (answers.c and ahead.c use the definitions before them).
SOURCES = (SOURCE, "answers.c", "ahead.c")
CDEF = """
struct gfh_entry {
    uint8_t *values, *have;
    uint8_t *seqs;
    uint32_t src_ip, tensor_len;
    uint32_t received, allowed;
    uint16_t src_port;
    uint8_t key[10];
    uint8_t kind, echo, used, left;
    int mark;
    int mode;
};
struct gfh_answers {
    int top;
    int marked;
    int answered, left, failed;
    int echoed;
    int ndone;
    int done[256];
    struct gfh_entry e[256];
    int dnext;
    struct gfh_entry d[128];
    int nplaced, ntouched, nfull, hinted;
    int touched[256], full[256];
    int64_t data, dup, oob, payload, late, ce;
};
int gfh_done(struct gfh_answers *a, const uint8_t *buf, const uint32_t *off, const uint32_t *src_ip,
             const uint16_t *src_port, int i, uint32_t tensor_len);
int gfh_done_entry(struct gfh_answers *a, int k);
int gfh_mark(struct gfh_answers *a, const uint8_t *buf, const uint32_t *off, const uint32_t *len,
             const uint32_t *src_ip, const uint16_t *src_port, const uint8_t *tos, uint8_t *bad, int n);
int gfh_answer(int fd, const uint8_t *buf, const uint32_t *off, const uint32_t *len, const uint32_t *src_ip,
               const uint16_t *src_port, uint8_t *bad, int n, struct gfh_answers *a);
int gfh_send(int fd, uint32_t ip_be, uint16_t port_be, uint8_t *hdrs, const uint8_t *values,
             uint32_t count, const uint16_t *nvals, const int64_t *starts, const uint8_t *tos, const int64_t *idx,
             int n, int gso, const uint8_t *key, int keylen, int classes);
struct gfh_hint {
    uint8_t *values;
    const uint8_t *have;
    uint8_t hdr[28];
    uint32_t src_ip;
    uint16_t src_port;
    uint32_t tensor_len, next, count;
    int mark;
    int peek, entry;
    uint32_t maxlen;
    int inplace;
};
int gfh_recv(int fd, uint8_t *buf, int slots, uint32_t slot_size, uint32_t *off, uint32_t *len,
             uint32_t *src_ip, uint16_t *src_port, uint8_t *tos, int max_pkts, const uint8_t *key, int keylen,
             uint8_t *bad, struct gfh_hint *hint, uint64_t *pay, struct gfh_answers *answers);
int gfh_auth_init(const char *library);
int gfh_runs(const uint8_t *buf, const uint32_t *off, const uint32_t *len, const uint32_t *src_ip,
             const uint16_t *src_port, int i, int n);
void gfh_place(const uint8_t *buf, const uint32_t *off, const uint32_t *len, int i, int n, uint32_t tensor_len,
               uint8_t *values, uint8_t *have, uint8_t *seqs, int64_t received, int mode, int64_t *res,
               int mark, const uint64_t *pay, const uint32_t *src_ip, const uint16_t *src_port,
               struct gfh_hint *hint);
void gfh_classes(const float *values, int64_t n, uint32_t count, uint8_t *out);
int gfh_absorb(struct gfh_answers *a, const uint8_t *buf, const uint32_t *off, const uint32_t *len,
               const uint32_t *src_ip, const uint16_t *src_port, const uint8_t *tos, uint8_t *bad,
               const uint64_t *pay, int n, struct gfh_hint *hint);
"""
SOL_UDP = 17
UDP_SEGMENT = 103
UDP_GRO = 104
#: Packets per GSO datagram (44 x 1472 bytes stays under the 64 kB datagram limit).
GSO_PACKETS = 44
#: Result slots of gfh_place.
R_USED, R_DATA, R_DUP, R_OOB, R_PAYLOAD, R_RECEIVED, R_OTHER = range(7)
#: Modes of gfh_place: place the values, count the packets as unusable, add the values, place
#: them and let the next packets of the message be read straight into it (its elements that
#: never arrive must be set at completion: they may be written with other bytes before).
PLACE, COUNT_OTHER, ADD, PLACE_AHEAD = 0, 1, 2, 3


class FastPathError(RuntimeError):
    """The C data path could not be built or loaded (the message says why)."""


class Native:
    """The loaded library and its cffi handle."""

    def __init__(self, ffi: Any, lib: Any, path: Path) -> None:
        self.ffi = ffi
        self.lib = lib
        self.path = path
        self._auth: bool | None = None

    def auth(self) -> bool:
        """Whether job-key tags can be made in C (the system's libcrypto has HMAC); logged once."""
        with _auth_lock:  # endpoints made at once in several threads: one library, set up once
            if self._auth is None:
                self._auth = self._auth_init()
        return self._auth

    def _auth_init(self) -> bool:
        names = [n for n in (ctypes.util.find_library("crypto"), "libcrypto.so.3", "libcrypto.so") if n]
        found = any(self.lib.gfh_auth_init(n.encode()) == 0 for n in names)
        if not found:
            log.warning("hosts data path: Python for endpoints with a job key, because no libcrypto with "
                        "HMAC was found (%s)", ", ".join(names))
        return found

    def ptr(self, array: Any, ctype: str = "uint8_t[]") -> Any:
        """A C pointer to a writable buffer (numpy array, bytearray)."""
        return self.ffi.from_buffer(ctype, array, require_writable=False)


def classes(values: np.ndarray, count: int, nat: Native | None = None) -> np.ndarray | None:
    """Magnitude classes of each run of `count` float32 values in C (`nat`: the loaded
    library, when the caller has it); None without the C path."""
    nat = nat or native()
    if nat is None:
        return None
    out = np.zeros(max(1, -(-values.size // count)), dtype=np.uint8)
    nat.lib.gfh_classes(nat.ptr(values, "float[]"), values.size, count, nat.ptr(out))
    return out


def cache_dir() -> Path:
    env = os.environ.get("GRADFABRIC_HOSTPATH_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "gradfabric" / "hostpath"


def find_compiler() -> str | None:
    for name in (os.environ.get("CC"), "cc", "gcc"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def _compiler_id(cc: str) -> str:
    try:
        out = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        out = ""
    return cc + "\n" + (out.splitlines()[0] if out else "")


def build_flags() -> tuple[str, ...]:
    """The compiler flags of a build: CFLAGS, then the sanitizers when asked."""
    if os.environ.get("GRADFABRIC_FASTPATH_SANITIZE", "") not in ("", "0"):
        return CFLAGS + SANITIZE_FLAGS
    return CFLAGS


def build() -> Path:
    """The shared object of ``fastpath.c``, compiled unless already cached."""
    source = "\n".join((resources.files("hosts") / name).read_text() for name in SOURCES)
    cc = find_compiler()
    if cc is None:
        raise FastPathError("no C compiler found (set CC, or install gcc)")
    flags = build_flags()
    digest = hashlib.sha256(source.encode())
    digest.update(_compiler_id(cc).encode() + b"\0" + " ".join(flags).encode())
    target = cache_dir() / f"{digest.hexdigest()[:32]}.so"
    if target.exists():
        return target
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise FastPathError(f"cannot create the cache folder {target.parent}: {exc}") from exc
    with tempfile.TemporaryDirectory(prefix="gradfabric-hostpath-") as tmp:
        src, out = Path(tmp) / SOURCE, Path(tmp) / "fastpath.so"
        src.write_text(source)
        proc = subprocess.run([cc, *flags, "-o", str(out), str(src), "-ldl"], capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-10:])
            raise FastPathError(f"{cc} failed on hosts/{' + hosts/'.join(SOURCES)} (exit {proc.returncode}):\n{tail}")
        partial = target.with_suffix(f".{os.getpid()}.tmp")
        shutil.copyfile(out, partial)
        os.replace(partial, target)  # atomic: concurrent builders agree
    return target


_lock = threading.Lock()
_auth_lock = threading.Lock()
_loaded: list[Native | None] = []


def native() -> Native | None:
    """The C data path, or None (logged once, with the reason) when it cannot be used or
    ``GRADFABRIC_FASTPATH`` is 0 (read at every call, so tests can turn it off)."""
    if os.environ.get("GRADFABRIC_FASTPATH", "1").strip().lower() in ("0", "no", "off", "false"):
        return None
    with _lock:
        if not _loaded:
            _loaded.append(_load())
        return _loaded[0]


def _load() -> Native | None:
    try:
        import cffi
    except ImportError:
        log.warning("hosts data path: Python, because cffi is not installed (pip install cffi)")
        return None
    try:
        path = build()
        ffi = cffi.FFI()
        ffi.cdef(CDEF)
        lib = ffi.dlopen(str(path))
        for name in ("gfh_send", "gfh_recv", "gfh_runs", "gfh_place", "gfh_classes", "gfh_auth_init", "gfh_mark",
                     "gfh_answer", "gfh_done", "gfh_done_entry", "gfh_absorb"):
            getattr(lib, name)  # cffi parses a declaration on first use: do it now, not mid-transfer
    except (FastPathError, OSError, AttributeError) as exc:
        log.warning("hosts data path: Python, because the C data path is unavailable: %s", exc)
        return None
    return Native(ffi, lib, path)


_local_cache: dict[str, bool] = {}


def is_local(ip: str) -> bool:
    """True when datagrams to `ip` stay on this host (the route's device is loopback)."""
    known = _local_cache.get(ip)
    if known is not None:
        return known
    local = ip.startswith("127.")
    if not local:
        probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            probe.connect((ip, 9))
            local = probe.getsockname()[0] == ip
        except OSError:
            local = False
        finally:
            probe.close()
    if len(_local_cache) > 4096:
        _local_cache.clear()
    _local_cache[ip] = local
    return local


def enable_gro(sock: socket.socket) -> bool:
    """Turn UDP GRO on for `sock` (coalesced datagrams arrive whole); False when refused."""
    try:
        sock.setsockopt(SOL_UDP, UDP_GRO, 1)
    except OSError:
        return False
    return True


_OFF = ("0", "no", "off", "false")
#: The switches already logged as off (each says so once per process).
_said_off: set[str] = set()


def _switch_on(name: str, off_note: str) -> bool:
    """False when environment variable `name` is 0 (no, off, false), logging `off_note` the first time."""
    if os.environ.get(name, "1").strip().lower() not in _OFF:
        return True
    if name not in _said_off:
        _said_off.add(name)
        log.info("hosts data path: %s (%s=0)", off_note, name)
    return False


def gso_wanted() -> bool:
    """False when ``GRADFABRIC_UDP_GSO`` is 0 (one datagram per packet on every route; logged once)."""
    return _switch_on("GRADFABRIC_UDP_GSO", "UDP GSO off")


def c_answers_wanted() -> bool:
    """False when ``GRADFABRIC_C_ANSWERS`` is 0: every probe is answered in Python (read per receiver)."""
    return os.environ.get("GRADFABRIC_C_ANSWERS", "1").strip().lower() not in _OFF


def c_ahead_wanted() -> bool:
    """False when ``GRADFABRIC_C_AHEAD`` is 0: a batch is read into the message the last run
    placed, without asking which message the next datagram is of (hosts/ahead.c; logged once)."""
    return _switch_on("GRADFABRIC_C_AHEAD", "no peek at the next datagram's message")


class BatchSender:
    """Sends packets of a :class:`~hosts.packetize.PacketBatch` with sendmmsg (and GSO)."""

    def __init__(self, nat: Native, sock: socket.socket, key: bytes | None = None) -> None:
        """`key`: the job key; every packet then ends in its tag (:mod:`hosts.auth`)."""
        self.nat = nat
        self.fd = sock.fileno()
        self.gso_ok = gso_wanted()
        self._key = (nat.ffi.from_buffer("uint8_t[]", key), len(key)) if key else (nat.ffi.NULL, 0)
        self._dest: dict[tuple[str, int], tuple[int, int, bool]] = {}

    def _target(self, dest: tuple[str, int]) -> tuple[int, int, bool]:
        hit = self._dest.get(dest)
        if hit is None:
            ip = int.from_bytes(socket.inet_aton(dest[0]), "little")  # network order in memory
            port = int.from_bytes(dest[1].to_bytes(2, "big"), "little")
            hit = self._dest[dest] = (ip, port, is_local(dest[0]) or netdev.splits_gso(dest[0]))
            if len(self._dest) > 4096:
                self._dest.clear()
        return hit

    def send(self, batch: Any, indices: np.ndarray, dest: tuple[str, int]) -> None:
        """Send packets `indices` (int64) of `batch` to `dest`; OSError when the socket refuses.
        A batch packed without its magnitude classes (``classes_pending``) gets each packet's
        written into its header as it goes out."""
        ip, port, batched = self._target(dest)
        idx = np.ascontiguousarray(indices, dtype=np.int64)
        gso = GSO_PACKETS if (batched and self.gso_ok) else 1
        ptrs = batch.native_ptrs(self.nat)
        classes = int(batch.classes_pending)
        r = self.nat.lib.gfh_send(self.fd, ip, port, ptrs[0], ptrs[1], batch.count, ptrs[2], ptrs[3], ptrs[4],
                                  self.nat.ptr(idx, "int64_t[]"), idx.size, gso, *self._key, classes)
        if r < 0 and gso > 1 and -r in (5, 22, 95):  # EIO, EINVAL, EOPNOTSUPP: no GSO here
            log.warning("hosts data path: UDP GSO refused (%s), sending one datagram per packet", os.strerror(-r))
            self.gso_ok = False
            r = self.nat.lib.gfh_send(self.fd, ip, port, ptrs[0], ptrs[1], batch.count, ptrs[2], ptrs[3], ptrs[4],
                                      self.nat.ptr(idx, "int64_t[]"), idx.size, 1, *self._key, classes)
        if r < 0:
            raise OSError(-r, os.strerror(-r))


class BatchReceiver(CAnswers):
    """recvmmsg buffers, the packet list of the last batch, and run placement."""

    SLOTS = 32
    SLOT_SIZE = 65536
    #: Datagrams per recvmmsg while a hint is set: after a packet that is not the one expected,
    #: the rest of the batch is copied back, so a short batch wastes less when messages alternate.
    #: Also with no hint after a batch of large packets: a new message's first run, read into the
    #: slots and copied from there, is then at most this long before its hint is set. A full
    #: batch read wholly in place doubles the next one's datagrams (up to SLOTS: fewer batches,
    #: so less Python per byte); any packet not read in place brings it back to this. A hinted
    #: batch never asks for more datagrams than its message has left from the next expected one
    #: (at least 2), so the next message's first packets come in a batch of their own.
    AHEAD_SLOTS = 8

    def __init__(self, nat: Native, sock: socket.socket | None, key: bytes | None = None,
                 answers: bool | None = None) -> None:
        """`sock` None: no socket; :meth:`load` fills the batch (tests). `key`: the job key;
        a packet without a valid tag is flagged in `bad` (and has length 0). `answers`: let C
        answer the probes of registered messages (:meth:`register`; None: unless
        ``GRADFABRIC_C_ANSWERS`` is 0; never with a job key, as answers are signed in Python)."""
        self.nat = nat
        self._key = (nat.ffi.from_buffer("uint8_t[]", key), len(key)) if key else (nat.ffi.NULL, 0)
        self.fd = sock.fileno() if sock is not None else -1
        self.gro = enable_gro(sock) if sock is not None else False
        self.max_pkts = self.SLOTS * (self.SLOT_SIZE // 28 + 1)
        self.buf = np.zeros(self.SLOTS * self.SLOT_SIZE, dtype=np.uint8)
        self.off = np.zeros(self.max_pkts, dtype=np.uint32)
        self.len = np.zeros(self.max_pkts, dtype=np.uint32)
        self.src_ip = np.zeros(self.max_pkts, dtype=np.uint32)
        self.src_port = np.zeros(self.max_pkts, dtype=np.uint16)
        self.tos = np.zeros(self.max_pkts, dtype=np.uint8)
        self.bad = np.zeros(self.max_pkts, dtype=np.uint8)
        self.pay = np.zeros(self.max_pkts, dtype=np.uint64)  # a packet's values' address when read in place
        self.res = np.zeros(8, dtype=np.int64)
        p = nat.ptr
        self._c = (p(self.buf), p(self.off, "uint32_t[]"), p(self.len, "uint32_t[]"),
                   p(self.src_ip, "uint32_t[]"), p(self.src_port, "uint16_t[]"), p(self.tos), p(self.res, "int64_t[]"),
                   p(self.bad), p(self.pay, "uint64_t[]"))
        self.hint = nat.ffi.new("struct gfh_hint *")
        #: The message the hint points into, and its C pointers (kept alive while it does).
        self._hinted: tuple[Any, Any] | None = None
        #: The last batch held a packet gfh_recv could read in place (larger than half a slot).
        self._large = False
        self._ahead = self.AHEAD_SLOTS  # datagrams per recvmmsg while a hint is set
        self.view = memoryview(self.buf)
        self._sources: dict[tuple[int, int], tuple[str, int]] = {}  # (ip, port) as received -> address
        on = c_answers_wanted() if answers is None else answers
        self.answers = nat.ffi.new("struct gfh_answers *") if on and not key else None
        self._answers_c = self.answers if self.answers is not None else nat.ffi.NULL
        self.hint.peek = int(self.answers is not None and c_ahead_wanted())  # registered messages to point at
        self._free = list(range(self.ANSWER_SLOTS))  # a heap: the lowest free slot first
        self._owners: list[Any] = [None] * self.ANSWER_SLOTS  # the message registered in each slot
        self._done_keys: list[Any] = [None] * self.DONE_SLOTS  # the key of each done entry
        #: The job's membership after it changed (another thread's add_peer), not yet applied.
        self._members: list[dict[int, tuple[str, int]]] = []

    def recv(self) -> int:
        """Packets of the next batch (0: nothing queued); OSError on a socket error."""
        c = self._c
        hint, hinted, slots = self.hint, self._hinted, self.SLOTS
        ahead = False  # read with a hint, large packets: some may land in place
        if hinted is not None:
            if hinted[0].cptrs is None:  # its message completed (Reassembler._complete drops cptrs)
                hint.values = self.nat.ffi.NULL
                self._hinted = None
            elif 2 * (28 + 4 * hint.count) > self.SLOT_SIZE:  # packets that gfh_recv reads in place
                ahead = True
                left = -(-(hint.tensor_len - hint.next) // hint.count)  # its packets from the next expected on
                slots = min(slots, self._ahead, max(2, left))  # not into the next message's first run
        if self._large and self._hinted is None:  # a new message's first run short: its next ones in place
            slots = min(slots, self.AHEAD_SLOTS)
        n = self.nat.lib.gfh_recv(self.fd, c[0], slots, self.SLOT_SIZE, c[1], c[2], c[3], c[4], c[5],
                                  self.max_pkts, *self._key, c[7], hint, c[8], self._answers_c)
        if hint.entry >= 0:  # gfh_ahead pointed the hint into a registered message
            owner = self._owners[hint.entry]
            self._hinted = (owner, owner.cptrs)
        if n < 0:
            raise OSError(-n, os.strerror(-n))
        if n:
            self._large = not self._key[1] and 2 * hint.maxlen > self.SLOT_SIZE
            if ahead or self._ahead > self.AHEAD_SLOTS:
                if hint.inplace < n:
                    self._ahead = self.AHEAD_SLOTS
                elif ahead and n == slots:
                    self._ahead = min(self.SLOTS, 2 * self._ahead)
        if n and self.answers is not None:
            self._absorb(n)
        return int(n)

    def load(self, datagrams: list[bytes], sources: list[tuple[str, int]], tos: list[int], absorb: bool = False) -> int:
        """Fill the batch with `datagrams` as if received (at most SLOTS x SLOT_SIZE bytes), its probes
        marked for C answers as :meth:`recv` marks them; `absorb`: and the runs of registered messages
        placed by the C, as :meth:`recv` places them (for callers that handle the batch with
        :func:`hosts.rxloop.handle_batch`, which skips what the C placed)."""
        at = 0
        for i, (data, (ip, port), t) in enumerate(zip(datagrams, sources, tos)):
            self.buf[at:at + len(data)] = np.frombuffer(data, np.uint8)
            self.off[i], self.len[i], self.tos[i] = at, len(data), t
            self.src_ip[i] = int.from_bytes(socket.inet_aton(ip), "little")
            self.src_port[i] = int.from_bytes(port.to_bytes(2, "big"), "little")
            self.pay[i] = 0
            self.bad[i] = 0
            at += len(data)
        if self.answers is not None:  # as gfh_recv and recv do
            c = self._c
            self.nat.lib.gfh_mark(self.answers, c[0], c[1], c[2], c[3], c[4], c[5], c[7], len(datagrams))
            if absorb:
                self._absorb(len(datagrams))
            else:
                self.answers.nplaced = 0
        return len(datagrams)

    def run_end(self, i: int, n: int) -> int:
        c = self._c
        return int(self.nat.lib.gfh_runs(c[0], c[1], c[2], c[3], c[4], i, n))

    def source(self, i: int) -> tuple[str, int]:
        raw = (int(self.src_ip[i]), int(self.src_port[i]))
        hit = self._sources.get(raw)
        return hit if hit is not None else self.address(*raw)

    def address(self, ip: int, port: int) -> tuple[str, int]:
        """The address of a source as received (network-order IP and port as stored)."""
        raw = (ip, port)
        hit = self._sources.get(raw)
        if hit is None:
            if len(self._sources) > 4096:
                self._sources.clear()
            hit = self._sources[raw] = (socket.inet_ntoa(raw[0].to_bytes(4, "little")),
                                        int.from_bytes(raw[1].to_bytes(2, "little"), "big"))
        return hit

    def packet(self, i: int) -> memoryview:
        o = int(self.off[i])
        return self.view[o:o + int(self.len[i])]

    def place(self, i: int, n: int, tensor_len: int, arrays: tuple[Any, Any, Any] | None, received: int,
              mode: int, mark: int = 1, owner: Any = None) -> np.ndarray:
        """gfh_place over packets i..n in `mode` (PLACE, COUNT_OTHER, ADD or PLACE_AHEAD), the maps
        marking what arrived with `mark` (1..255); the result slots (R_*). PLACE_AHEAD needs
        `owner`, the message whose `arrays` these are: the next batches may read its packets in
        place for as long as its ``cptrs`` is not None (an open message)."""
        c = self._c
        ffi = self.nat.ffi
        values, have, seqs = arrays if arrays is not None else (ffi.NULL, ffi.NULL, ffi.NULL)
        if mode == PLACE_AHEAD and (owner is None or self._key[1]):
            mode = PLACE  # no owner to tell when it completes; keyed datagrams are checked whole
        self.nat.lib.gfh_place(c[0], c[1], c[2], i, n, tensor_len, values, have, seqs, received, mode, c[6], mark,
                               c[8], c[3], c[4], self.hint)
        if mode == PLACE_AHEAD or self._hinted is not None:
            at = self.hint.values  # cdata pointers compare by address (no cast: its type string is
            if at == ffi.NULL:  # parsed on first use, 0.5 ms, and each cast looks it up again)
                self._hinted = None
            elif mode == PLACE_AHEAD and at == values:
                self._hinted = (owner, arrays)
        return self.res
