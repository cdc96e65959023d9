"""Canonical value encoding and p4runtime-shell match syntax."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controller.errors import EncodingError
from controller.values import (
    Exact,
    Lpm,
    Range,
    Ternary,
    decode_int,
    decode_match,
    encode_int,
    encode_match,
    is_wildcard,
    parse_int,
    parse_match,
)


@given(st.integers(min_value=1, max_value=128).flatmap(lambda w: st.tuples(st.just(w), st.integers(0, (1 << w) - 1))))
def test_encoding_is_minimum_width_and_round_trips(width_value: tuple[int, int]) -> None:
    width, value = width_value
    data = encode_int(value, width)
    assert decode_int(data, width) == value
    assert len(data) == max(1, (value.bit_length() + 7) // 8)
    assert len(data) == 1 or data[0] != 0


def test_zero_is_one_zero_byte_and_padded_input_decodes() -> None:
    assert encode_int(0, 32) == b"\x00"
    assert decode_int(b"\x00\x00\x0a\x01", 32) == 0x0A01


def test_literals() -> None:
    assert parse_int("10.0.1.1", 32) == 0x0A000101
    assert parse_int("00:00:0a:00:01:01", 48) == 0x0A000101
    assert parse_int("0x1ff", 9) == 511
    assert parse_int("511", 9) == 511


@pytest.mark.parametrize(
    ("text", "width", "message"),
    [("512", 9, "does not fit in 9 bits"), ("hello", 16, "not a number"), (-1, 8, "does not fit")],
)
def test_bad_values_name_the_problem(text: str | int, width: int, message: str) -> None:
    with pytest.raises(EncodingError, match=message):
        parse_int(text, width, "port")


def test_match_syntax_is_canonicalised() -> None:
    assert parse_match("10.0.1.7/24", "lpm", 32, "dst") == Lpm(0x0A000100, 24)
    assert parse_match("10.0.1.7", "lpm", 32, "dst") == Lpm(0x0A000107, 32)
    assert parse_match("0x1f&&&0x0f", "ternary", 8, "f") == Ternary(0x0F, 0x0F)
    assert parse_match("3..9", "range", 16, "t") == Range(3, 9)
    assert parse_match("5", "range", 16, "t") == Range(5, 5)
    assert parse_match(7, "exact", 16, "j") == Exact(7)


def test_wildcards_are_recognised() -> None:
    assert is_wildcard(Lpm(0, 0), 32)
    assert is_wildcard(Ternary(0, 0), 3)
    assert is_wildcard(Range(0, 255), 8)
    assert not is_wildcard(Range(0, 254), 8)


@pytest.mark.parametrize(
    ("text", "kind", "message"),
    [("9..3", "range", "is empty"), ("10.0.0.0/33", "lpm", "prefix length 33"), ("1/x", "lpm", "not a number")],
)
def test_bad_matches(text: str, kind: str, message: str) -> None:
    with pytest.raises(EncodingError, match=message):
        parse_match(text, kind, 32, "field")


@given(st.integers(0, 32), st.integers(0, (1 << 32) - 1), st.integers(0, (1 << 32) - 1))
def test_field_matches_round_trip_through_protobuf(prefix: int, a: int, b: int) -> None:
    for m, kind in (
        (parse_match(Lpm(a, prefix), "lpm", 32, "f"), "lpm"),
        (parse_match(Ternary(a, b), "ternary", 32, "f"), "ternary"),
        (Range(min(a, b), max(a, b)), "range"),
        (Exact(a), "exact"),
    ):
        assert decode_match(encode_match(1, m, 32, "f"), 32, "f") == m
