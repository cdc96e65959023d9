"""ArrayPool: an array is handed out again only once nothing else refers to it."""

from __future__ import annotations

import numpy as np

from hosts.arrays import ArrayPool


def test_an_array_dropped_by_its_user_is_handed_out_again() -> None:
    pool = ArrayPool()
    a = pool.take(1000)
    address = a.ctypes.data
    del a
    b = pool.take(1000)
    assert b.ctypes.data == address and pool.reused == 1
    assert b.dtype == np.float32 and b.size == 1000


def test_an_array_or_a_view_still_held_is_never_handed_out() -> None:
    pool = ArrayPool()
    held = pool.take(1000)
    view = pool.take(500)[100:]  # only a view of this one is kept
    mv = memoryview(pool.take(300))  # and of this one a memoryview
    held[:] = 7.0
    view[:] = 8.0
    for n in (1000, 500, 300):
        other = pool.take(n)
        other[:] = -1.0
        del other
    assert (held == 7.0).all() and (view == 8.0).all() and mv.nbytes == 1200
    assert pool.reused == 0
    del view
    again = pool.take(500)  # now nothing refers to it
    assert pool.reused == 1 and again.size == 500


def test_other_sizes_make_new_arrays_and_the_pool_stays_bounded() -> None:
    pool = ArrayPool(keep=3, keep_bytes=10_000)
    for n in range(100, 110):
        a = pool.take(n)
        assert a.size == n
        del a
    assert pool.reused == 0
    assert len(pool._arrays) == 3  # noqa: SLF001 - the bound is about internal state
    big = pool.take(5_000)  # 20 kB: more than the pool may keep, so it is not remembered
    del big
    assert all(x.size < 5_000 for x in pool._arrays)  # noqa: SLF001
