"""A program compiled to C: the native counterpart of :class:`p4switch.pipeline.Pipeline`.

`NativePipeline(program)` compiles the program as the Python pipeline does (same checks,
same P4Info view), generates C from that compilation, builds it (cached by hash) and loads
it. `tables`, `counters`, `registers`, `meters`, `pre` and `info` behave as the Python
pipeline's and store into the C state; `process()` runs one packet through ingress and
egress with empty queues. `try_native()` returns None with the reason when the program or
machine cannot run natively.
"""

from __future__ import annotations

import ctypes

from p4switch.errors import P4SwitchError
from p4switch.frontend.program import Program
from p4switch.native.build import NativeBuildError, build, find_compiler, load
from p4switch.native.cgen import generate_c
from p4switch.native.cgen_expr import NativeUnsupported
from p4switch.native.recorder import compile_recorded
from p4switch.native.state import (NativeActionProfile, NativeCounter, NativeMeters, NativeRegister,
                                   NativeReplication, NativeTable, NativeValueSet)
from p4switch.pipeline import LOG as PIPELINE_LOG

_MAX_OUT = 64
MAX_FRAME = 65535 + 64  # GF_MAXFRAME of gf_runtime.h: the largest frame in or out
_OUT_BYTES = MAX_FRAME * 16
DIGEST_WORDS = 128  # GF_DIGEST_WORDS of gf_runtime.h: the digest words one packet may send
LOG_ID = 0x40000000  # GF_LOG_ID of gf_runtime.h: digest words of log_msg k have id LOG_ID + k


class NativePipeline:
    """One program loaded as native code, with its state in C."""

    def __init__(self, program: Program, seed: int = 0) -> None:
        compiled, recorded = compile_recorded(program, seed)
        generated = generate_c(compiled, recorded)
        self.source, self.faults, self.log_formats = generated.source, generated.faults, generated.log_formats
        #: Why the switch loops (gf_switch.h) cannot run the program, "" when they can: resubmit
        #: and recirculate run in `process()` only.
        self.switch_reason = generated.switch_reason
        self.path = build(self.source)
        self.lib = load(self.path)
        self.prog = ctypes.c_void_p(self.lib.gf_prog_create())
        self.program = program
        self.info = compiled.info
        self.seed = seed or 0x5EED
        lib, prog = self.lib, self.prog
        self.action_profiles: dict[str, NativeActionProfile] = {}
        for pid, (name, profile) in enumerate(compiled.action_profiles.items()):
            users = [t for t in compiled.tables.values() if t.profile is profile]
            action_ids = {a: i for i, a in enumerate(users[0].actions)} if users else {}
            self.action_profiles[name] = NativeActionProfile.adopt(profile, lib, prog, pid, action_ids)
        self.tables = {name: NativeTable.adopt(t, lib, prog, i, self.action_profiles.get(t.profile.name)
                                               if t.profile is not None else None)
                       for i, (name, t) in enumerate(compiled.tables.items())}
        self.counters = {name: NativeCounter(c.name, c.size, c.unit).bind(lib, prog, i)
                         for i, (name, c) in enumerate(compiled.counters.items())}
        self.registers = {name: NativeRegister(r.name, r.size, r.width).bind(lib, prog, i)
                          for i, (name, r) in enumerate(compiled.registers.items())}
        self.meters = {name: NativeMeters(m.name, m.size, m.unit).bind(lib, prog, i)
                       for i, (name, m) in enumerate(compiled.meters.items())}
        self.value_sets = {name: NativeValueSet.adopt(v, lib, prog, i)
                           for i, (name, v) in enumerate(compiled.value_sets.items())}
        self.pre = NativeReplication().bind(lib, prog)
        self.digest_sink = lambda name, values: None
        self.digest_names = list(compiled.digests)
        self._digests = (ctypes.c_uint64 * DIGEST_WORDS)()
        self._ndigest = ctypes.c_uint32()
        self.log = PIPELINE_LOG.info  # log_msg lines go where the Python pipeline's go
        self._out = ctypes.create_string_buffer(_OUT_BYTES)
        self._ports = (ctypes.c_uint32 * _MAX_OUT)()
        self._lens = (ctypes.c_uint32 * _MAX_OUT)()

    def process(self, packet: bytes, port: int, now_us: int = 0) -> list[tuple[int, bytes]]:
        """Ingress then egress with empty queues: the (port, frame) pairs that leave."""
        self.seed = (self.seed * 6364136223846793005 + 1442695040888963407) & ((1 << 64) - 1)
        n = self.lib.gf_process(self.prog, packet, len(packet), port, now_us, self.seed, self._out,
                                _OUT_BYTES, self._ports, self._lens, _MAX_OUT, self._digests, self._ndigest)
        if self._ndigest.value:
            self.deliver_digests(list(self._digests[:self._ndigest.value]))
        if n == -1:
            raise P4SwitchError(f"frame of {len(packet)} bytes is too long for the native datapath")
        if n < -1:  # the packet failed: an extern function without a body, a failed assert
            fault = self.faults[-n - 2]
            raise type(fault)(str(fault))
        out, at, raw = [], 0, self._out.raw
        for i in range(n):
            length = self._lens[i]
            out.append((int(self._ports[i]), raw[at:at + length]))
            at += length
        return out

    def deliver_digests(self, words: list[int]) -> None:
        """Hand a packet's digest words ([id, n, values...] each) to `digest_sink`, and its
        log_msg words (id LOG_ID + k) to `log` as format k's text, in order."""
        at = 0
        while at + 2 <= len(words):
            did, n = words[at], words[at + 1]
            values = words[at + 2:at + 2 + n]
            if did >= LOG_ID:
                message = self.log_formats[did - LOG_ID]
                for value in values:
                    message = message.replace("{}", str(value), 1)
                self.log(message)
            else:
                self.digest_sink(self.digest_names[did], tuple(values))
            at += 2 + n

    def reset_state(self) -> None:
        """Forget counters and registers (tables are kept)."""
        for counter in self.counters.values():
            counter.reset()
        for reg in self.registers.values():
            reg.reset()

    def close(self) -> None:
        if self.prog:
            self.lib.gf_prog_free(self.prog)
            self.prog = ctypes.c_void_p(None)


def try_native(program: Program, seed: int = 0, for_switch: bool = False) -> tuple[NativePipeline | None, str]:
    """The native pipeline, or None and one line saying why the Python pipeline is used
    (`for_switch`: also when the native switch loops cannot run the program)."""
    if find_compiler() is None:
        return None, "no C compiler found (install gcc or set CC)"
    try:
        pipe = NativePipeline(program, seed)
        if for_switch and pipe.switch_reason:
            pipe.close()
            return None, f"the native switch does not cover {pipe.switch_reason}"
        return pipe, "native"
    except NativeUnsupported as exc:
        return None, f"the native backend does not cover {exc}"
    except NativeBuildError as exc:
        return None, f"native build failed: {exc}"
    except Exception as exc:  # noqa: BLE001 - any fault of the generator leaves the program on Python
        # a fault of the generator itself: the program still runs, on the Python pipeline
        return None, f"the native backend failed on the program: {type(exc).__name__}: {exc}"
