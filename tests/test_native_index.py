"""The hashed index of the native datapath's exact and exact+LPM tables (gf_runtime.h), at C
level: a harness (tests/native_index_harness.c) built by the same rule as a program, driven
by seeded random inserts and deletes against a dict, checking every look-up and the index's
structure (one slot per live entry, no dead entry reachable, deleted slots reclaimed)."""

from __future__ import annotations

import ctypes
import random
from pathlib import Path
from typing import Any

import pytest

from p4switch.native.build import build, find_compiler

pytestmark = pytest.mark.skipif(find_compiler() is None, reason="no C compiler on this machine")

HARNESS = Path(__file__).with_name("native_index_harness.c")
EXACT, LPM = 0, 1
U64 = ctypes.c_uint64
CHECKS = {1: "a slot names a dead entry", 2: "a live entry is indexed other than once",
          3: "a live entry is unreachable from its home", 4: "the count disagrees", 5: "over half full"}


@pytest.fixture(scope="module")
def lib() -> Any:
    lib = ctypes.CDLL(str(build(HARNESS.read_text())))
    vp, u64p = ctypes.c_void_p, ctypes.POINTER(U64)
    lib.gfx_new.restype, lib.gfx_new.argtypes = vp, [ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p]
    lib.gfx_lookup.restype, lib.gfx_lookup.argtypes = ctypes.c_int64, [vp, u64p]
    lib.gfx_stats.restype, lib.gfx_stats.argtypes = None, [vp, ctypes.POINTER(ctypes.c_uint32)]
    lib.gfx_check.restype, lib.gfx_check.argtypes = ctypes.c_int, [vp]
    lib.gf_table_insert.restype = ctypes.c_int64
    lib.gf_table_insert.argtypes = [vp, ctypes.c_int, u64p, u64p, u64p, ctypes.c_int64, ctypes.c_uint32,
                                    ctypes.c_int32, u64p, ctypes.c_int]
    lib.gf_table_delete.restype, lib.gf_table_delete.argtypes = ctypes.c_int, [vp, ctypes.c_int, ctypes.c_int64]
    lib.gf_prog_free.restype, lib.gf_prog_free.argtypes = None, [vp]
    return lib


class Index:
    """One table of the harness: insert, delete and look up like NativeTable does."""

    def __init__(self, lib: Any, kinds: list[int], widths: list[int]) -> None:
        self.lib, self.n, self.widths = lib, len(kinds), widths
        self.prog = ctypes.c_void_p(lib.gfx_new(self.n, bytes(kinds), bytes(widths)))

    def _words(self, values: list[int]) -> Any:
        return (U64 * self.n)(*values)

    def insert(self, key: list[int], plen: int = 0, lpm: int | None = None) -> int:
        masks = [(1 << w) - 1 for w in self.widths]
        if lpm is not None:
            w = self.widths[lpm]
            masks[lpm] = ((1 << w) - 1) ^ ((1 << (w - plen)) - 1)
        handle = self.lib.gf_table_insert(self.prog, 0, self._words(key), self._words(masks),
                                          self._words([0] * self.n), plen, plen, 1, (U64 * 1)(0), 0)
        assert handle >= 0
        return int(handle)

    def delete(self, handle: int) -> None:
        assert self.lib.gf_table_delete(self.prog, 0, handle) == 0

    def lookup(self, key: list[int]) -> int:
        return int(self.lib.gfx_lookup(self.prog, self._words(key)))

    def stats(self) -> tuple[int, int, int]:
        out = (ctypes.c_uint32 * 3)()
        self.lib.gfx_stats(self.prog, out)
        return out[0], out[1], out[2]

    def check(self) -> None:
        code = self.lib.gfx_check(self.prog)
        assert code == 0, CHECKS.get(code, code)

    def close(self) -> None:
        self.lib.gf_prog_free(self.prog)


def test_the_first_entry_deleted_stops_matching(lib: Any) -> None:
    """The first insert grows the index: the entry must be placed once, so its delete removes it."""
    table = Index(lib, [EXACT], [32])
    handle = table.insert([7])
    assert table.lookup([7]) == handle
    table.check()
    table.delete(handle)
    assert table.lookup([7]) == -1
    assert table.stats()[1:] == (0, 0)
    table.check()
    table.close()


def test_an_entry_whose_insert_grew_the_index_is_deleted_whole(lib: Any) -> None:
    table = Index(lib, [EXACT], [32])
    handles = {k: table.insert([k]) for k in range(32)}  # the 33rd needs a larger index
    assert table.stats()[0] == 64
    handles[32] = table.insert([32])
    assert table.stats()[0] > 64
    table.check()
    table.delete(handles.pop(32))
    assert table.lookup([32]) == -1
    assert all(table.lookup([k]) == h for k, h in handles.items())
    table.check()
    table.close()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_inserts_and_deletes_agree_with_a_dict(lib: Any, seed: int) -> None:
    """Two exact keys from a small space (so probe runs collide and wrap), thousands of
    operations, every key looked up after each batch and the structure checked."""
    rng = random.Random(seed)
    table = Index(lib, [EXACT, EXACT], [8, 3])
    space = [[a, b] for a in range(64) for b in range(8)]
    model: dict[tuple[int, int], int] = {}
    for step in range(4000):
        key = rng.choice(space)
        ident = (key[0], key[1])
        # phases that fill the table towards its space, then drain it, so it grows and shrinks
        want_insert = rng.random() < (0.7 if (step // 500) % 2 == 0 else 0.3)
        if ident in model and not want_insert:
            table.delete(model.pop(ident))
        elif ident not in model and want_insert:
            model[ident] = table.insert(key)
        if step % 250 == 249:
            table.check()
            for k in space:
                assert table.lookup(k) == model.get((k[0], k[1]), -1), (step, k)
            assert table.stats()[1:] == (len(model), len(model))
    table.close()


def _address(rng: random.Random) -> int:
    """An address from a small space, so that routes of different lengths overlap."""
    return rng.randrange(4) << 30 | rng.randrange(4) << 20 | rng.randrange(4) << 12 | rng.randrange(4)


def test_lpm_routes_deleted_stop_matching_and_shorter_ones_take_over(lib: Any) -> None:
    rng = random.Random(5)
    table = Index(lib, [LPM], [32])
    routes: dict[tuple[int, int], int] = {}
    for step in range(3000):
        plen = rng.choice([0, 8, 16, 24, 32])
        prefix = _address(rng) & (0xFFFF_FFFF ^ ((1 << (32 - plen)) - 1))
        if (prefix, plen) in routes and rng.random() < 0.5:
            table.delete(routes.pop((prefix, plen)))
        elif (prefix, plen) not in routes:
            routes[(prefix, plen)] = table.insert([prefix], plen, lpm=0)
        if step % 500 == 499:
            table.check()
            for addr in [_address(rng) for _ in range(200)]:
                matching = [(plen, h) for (p, plen), h in routes.items()
                            if plen == 0 or addr >> (32 - plen) == p >> (32 - plen)]
                assert table.lookup([addr]) == max(matching, default=(-1, -1))[1], hex(addr)
    table.close()


def test_a_million_insert_delete_cycles_leave_a_small_index(lib: Any) -> None:
    """Deleted slots are reclaimed: cycles with no entry left keep the index at its minimum,
    and a table that held many entries shrinks back once they are gone."""
    table = Index(lib, [EXACT], [32])
    for k in range(20000):
        table.delete(table.insert([k]))
    assert table.stats() == (64, 0, 0)
    handles = [table.insert([k]) for k in range(5000)]
    assert table.stats()[0] >= 10000
    table.check()
    for h in handles:
        table.delete(h)
    assert table.stats() == (64, 0, 0)
    assert all(table.lookup([k]) == -1 for k in range(0, 5000, 97))
    table.close()
