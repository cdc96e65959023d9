"""The BMv2 differential leaves out INSERTs overlapping an entry of the same priority
(tests/p4runtime_differential_bmv2.py): the overlap test, field kind by field kind, on values
worked out by hand."""

from __future__ import annotations

from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2

from tests.p4runtime_differential_bmv2 import _overlap

FM = p4runtime_pb2.FieldMatch
KIND = p4info_pb2.MatchField


def _table(*kinds: int) -> p4info_pb2.Table:
    table = p4info_pb2.Table()
    for i, kind in enumerate(kinds, start=1):
        table.match_fields.add(id=i, bitwidth=16, match_type=kind)
    return table


def _range(field: int, low: int, high: int) -> FM:
    return FM(field_id=field, range=FM.Range(low=low.to_bytes(2, "big"), high=high.to_bytes(2, "big")))


def _ternary(field: int, value: int, mask: int) -> FM:
    return FM(field_id=field, ternary=FM.Ternary(value=value.to_bytes(2, "big"), mask=mask.to_bytes(2, "big")))


def test_ranges_overlap_when_they_share_a_value() -> None:
    table = _table(KIND.EXACT, KIND.RANGE, KIND.RANGE)
    job = FM(field_id=1, exact=FM.Exact(value=b"\xdd\x6b"))
    # the two layer_priority entries of the traced mismatch: tensor 0..2 / 1..0x4178, class 1..2 / 2..2
    assert _overlap(table, [job, _range(2, 0, 2), _range(3, 1, 2)], [job, _range(2, 1, 0x4178), _range(3, 2, 2)])
    assert not _overlap(table, [job, _range(2, 0, 2), _range(3, 1, 1)], [job, _range(2, 1, 0x4178), _range(3, 2, 2)])
    other_job = FM(field_id=1, exact=FM.Exact(value=b"\x01"))
    assert not _overlap(table, [job, _range(2, 0, 2)], [other_job, _range(2, 0, 2)])
    assert _overlap(table, [job], [job, _range(2, 5, 9)]), "a field left out matches anything"


def test_ternary_values_overlap_where_both_masks_agree() -> None:
    table = _table(KIND.TERNARY)
    # 0x0A01 & 0xFF00 and 0x0A02 & 0x00FF: 0x0A?? and 0x??02 share 0x0A02
    assert _overlap(table, [_ternary(1, 0x0A00, 0xFF00)], [_ternary(1, 0x0002, 0x00FF)])
    # 0x0A?? and 0x0B??: the high bytes differ under both masks
    assert not _overlap(table, [_ternary(1, 0x0A00, 0xFF00)], [_ternary(1, 0x0B00, 0xFF00)])
    # bit 0 set against bit 0 clear
    assert not _overlap(table, [_ternary(1, 1, 1)], [_ternary(1, 0, 0xFFFF)])


def test_prefixes_overlap_when_the_shorter_contains_the_longer() -> None:
    table = _table(KIND.LPM)
    def lpm(value: int, plen: int) -> FM:
        return FM(field_id=1, lpm=FM.LPM(value=value.to_bytes(2, "big"), prefix_len=plen))
    assert _overlap(table, [lpm(0x0A00, 8)], [lpm(0x0A40, 12)])      # 0x0A/8 holds 0x0A4/12
    assert not _overlap(table, [lpm(0x0A00, 8)], [lpm(0x0B40, 12)])  # 0x0B4/12 is outside 0x0A/8
