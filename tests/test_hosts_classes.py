"""Magnitude classes in C (the compiled copy this CPU runs: AVX2 or plain x86-64) against numpy's."""

from __future__ import annotations

import numpy as np
import pytest

from hosts import fastpath
from hosts.packetize import magnitude_classes

NAT = fastpath.native()
pytestmark = pytest.mark.skipif(NAT is None, reason="the C data path cannot be built here (hosts.fastpath log)")


@pytest.mark.parametrize("count", [1, 2, 7, 361, 16_369])
def test_classes_of_any_bit_pattern_match_numpy(count: int) -> None:
    """Every exponent, both signs, NaNs with any payload, infinities, subnormals and zeros."""
    rng = np.random.default_rng(count)
    bits = rng.integers(0, 2**32, size=60_000, dtype=np.uint64).astype(np.uint32)
    values = bits.view(np.float32).copy()
    values[:count * 3] = 0.0  # rows of zeros, of -0.0 and of subnormals
    values[count:2 * count] = -0.0
    values[2 * count:3 * count] = np.float32(1e-45)
    got = fastpath.classes(values, count, NAT)
    assert got is not None
    np.testing.assert_array_equal(got, magnitude_classes(values, count))


def test_the_largest_magnitude_decides_wherever_it_is() -> None:
    for at in (0, 5, 31, 32, 33, 360):  # inside and at the edges of a vector's lanes
        for peak, want in ((np.float32(2.0**100), 228), (np.float32(-3.0e38), 255), (np.inf, 255),
                           (np.nan, 255), (np.float32(1.5), 128)):
            values = np.full(361, np.float32(0.75), dtype=np.float32)  # class 127
            values[at] = peak
            got = fastpath.classes(values, 361, NAT)
            assert got is not None and int(got[0]) == want, (at, peak)
