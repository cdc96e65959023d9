"""Building the generated C into a shared object, cached by what went into it.

The object lands in ``$P4SWITCH_NATIVE_CACHE`` (default ``~/.cache/p4switch/native``) as
``<sha256>.so``, the hash of the generated C, the runtime headers, the compiler (its resolved
path and ``--version`` line) and every flag; a second load of the same program built the
same way is a file lookup. The system C compiler (``$CC``, else ``cc``/``gcc``) does the
build; ``$P4SWITCH_NATIVE_CFLAGS`` adds flags, and ``P4SWITCH_NATIVE_SANITIZE=1`` adds
AddressSanitizer and UBSan (:data:`SANITIZE_FLAGS`; the process must then preload
libasan, as ``make soak SANITIZE=1`` does).
"""

from __future__ import annotations

import ctypes
import hashlib
import functools
import os
import shlex
import shutil
import subprocess
import tempfile
from importlib import resources
from pathlib import Path

from p4switch.errors import P4SwitchError

RUNTIME_HEADERS = ("gf_runtime.h", "gf_state.h", "gf_process.h", "gf_switch.h")
CFLAGS = ("-O2", "-shared", "-fPIC", "-pthread", "-fvisibility=hidden", "-Wall",
          "-Wno-unused-label", "-Wno-unused-function", "-Wno-unused-variable")
SANITIZE_FLAGS = ("-fsanitize=address,undefined", "-fno-sanitize-recover=undefined", "-fno-omit-frame-pointer",
                  "-g")


class NativeBuildError(P4SwitchError):
    """The C compiler is missing or failed (the message has its output's tail)."""


def cache_dir() -> Path:
    env = os.environ.get("P4SWITCH_NATIVE_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "p4switch" / "native"


def find_compiler() -> str | None:
    """The C compiler to use, or None when there is none."""
    for name in (os.environ.get("CC"), "cc", "gcc"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def build_flags() -> tuple[str, ...]:
    """The compiler flags of a build: CFLAGS, the sanitizers when asked, then the caller's."""
    flags = list(CFLAGS)
    if os.environ.get("P4SWITCH_NATIVE_SANITIZE", "") not in ("", "0"):
        flags += SANITIZE_FLAGS
    flags += shlex.split(os.environ.get("P4SWITCH_NATIVE_CFLAGS", ""))
    return tuple(flags)


@functools.lru_cache(maxsize=8)
def compiler_identity(cc: str) -> str:
    """The compiler's resolved path and first ``--version`` line (a wrapper script changes
    the path, another version the line), so builds by different compilers never share a cache
    entry."""
    real = os.path.realpath(cc)
    try:
        proc = subprocess.run([cc, "--version"], capture_output=True, text=True, check=False, timeout=30)
        version = (proc.stdout or proc.stderr).strip().splitlines()[:1]
    except (OSError, subprocess.SubprocessError) as exc:
        version = [f"unknown ({exc})"]
    return f"{real} {version[0] if version else ''}"


def _runtime_text() -> dict[str, str]:
    pkg = resources.files("p4switch.native")
    return {name: (pkg / name).read_text() for name in RUNTIME_HEADERS}


def source_hash(source: str, cc: str = "", flags: tuple[str, ...] = CFLAGS) -> str:
    """The cache key of a build: source, runtime headers, compiler identity and flags."""
    digest = hashlib.sha256(source.encode())
    for name, text in sorted(_runtime_text().items()):
        digest.update(name.encode() + b"\0" + text.encode())
    digest.update(b"\0cflags\0" + "\0".join(flags).encode())
    digest.update(b"\0cc\0" + (compiler_identity(cc) if cc else "").encode())
    return digest.hexdigest()[:32]


def build(source: str) -> Path:
    """The shared object for `source`, compiled unless already cached."""
    cc = find_compiler()
    if cc is None:
        raise NativeBuildError("no C compiler found (set CC, or install gcc)")
    flags = build_flags()
    target = cache_dir() / f"{source_hash(source, cc, flags)}.so"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="p4switch-native-") as tmp:
        work = Path(tmp)
        for name, text in _runtime_text().items():
            (work / name).write_text(text)
        (work / "program.c").write_text(source)
        out = work / "program.so"
        proc = subprocess.run([cc, *flags, "-I", str(work), "-o", str(out), str(work / "program.c")],
                              capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-15:])
            raise NativeBuildError(f"{cc} failed on the generated C (exit {proc.returncode}):\n{tail}")
        partial = target.with_suffix(f".{os.getpid()}.tmp")
        shutil.copyfile(out, partial)
        os.replace(partial, target)  # atomic: concurrent builders of one program agree
    return target


def load(path: Path) -> ctypes.CDLL:
    """Load a built object and declare the C API's signatures."""
    lib = ctypes.CDLL(str(path))
    u64p = ctypes.POINTER(ctypes.c_uint64)
    u32p = ctypes.POINTER(ctypes.c_uint32)
    vp = ctypes.c_void_p
    sig = {
        "gf_prog_create": (vp, []),
        "gf_prog_free": (None, [vp]),
        "gf_table_insert": (ctypes.c_int64, [vp, ctypes.c_int, u64p, u64p, u64p, ctypes.c_int64,
                                             ctypes.c_uint32, ctypes.c_int32, u64p, ctypes.c_int]),
        "gf_table_modify": (ctypes.c_int, [vp, ctypes.c_int, ctypes.c_int64, ctypes.c_int32, u64p, ctypes.c_int]),
        "gf_table_delete": (ctypes.c_int, [vp, ctypes.c_int, ctypes.c_int64]),
        "gf_table_set_default": (ctypes.c_int, [vp, ctypes.c_int, ctypes.c_int32, u64p, ctypes.c_int]),
        "gf_table_counter": (ctypes.c_int, [vp, ctypes.c_int, ctypes.c_int64, u64p, u64p]),
        "gf_counter_access": (ctypes.c_int, [vp, ctypes.c_int, ctypes.c_uint32, u64p, u64p]),
        "gf_register_access": (ctypes.c_int, [vp, ctypes.c_int, ctypes.c_uint32, u64p, u64p]),
        "gf_meter_config": (ctypes.c_int, [vp, ctypes.c_int, ctypes.c_uint32, ctypes.POINTER(ctypes.c_double)]),
        "gf_mcast_set": (ctypes.c_int, [vp, ctypes.c_uint32, u32p, u32p, ctypes.c_uint32]),
        "gf_clone_set": (ctypes.c_int, [vp, ctypes.c_uint32, u32p, u32p, ctypes.c_uint32, ctypes.c_uint32]),
        "gf_profile_member": (ctypes.c_int, [vp, ctypes.c_int, ctypes.c_uint32, ctypes.c_int32, u64p, ctypes.c_int,
                                             ctypes.c_int]),
        "gf_vset_set": (ctypes.c_int, [vp, ctypes.c_int, u64p, ctypes.c_uint32, ctypes.c_uint32]),
        "gf_profile_group": (ctypes.c_int, [vp, ctypes.c_int, ctypes.c_uint32, u32p, ctypes.c_uint32, ctypes.c_int]),
        "gf_process": (ctypes.c_int, [vp, ctypes.c_char_p, ctypes.c_uint32, ctypes.c_uint32, ctypes.c_uint64,
                                      ctypes.c_uint64, ctypes.c_char_p, ctypes.c_uint32, u32p, u32p,
                                      ctypes.c_int, u64p, u32p]),
    }
    for name, (res, args) in sig.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args
    return lib
