"""The match engine: exact, lpm, ternary, range and optional keys; entries and errors."""

from __future__ import annotations

import pytest

from p4switch.tables import (
    ActionSpec, ConstTable, EntryExists, EntryNotFound, Exact, InvalidEntry, KeyField, Lpm,
    Optional, Range, Table, TableEntry, TableFull, Ternary,
)

FWD = ActionSpec("c.fwd", (9,))
DROP = ActionSpec("c.drop", ())
NOACTION = ActionSpec("NoAction", (), default_only=True)


def table(keys, size=16, **kw) -> Table:
    return Table("c.t", tuple(keys), {a.name: a for a in (FWD, DROP, NOACTION)}, size, **kw)


def winner(t: Table, key: tuple[int, ...]) -> str | None:
    installed = t.lookup(key)
    return None if installed is None else f"{installed.entry.action}{installed.entry.args}"


def test_exact_lookup_insert_modify_delete():
    t = table([KeyField("hdr.a", "exact", 16), KeyField("hdr.b", "exact", 8)])
    e = TableEntry((Exact(1), Exact(2)), 0, "c.fwd", (3,))
    t.insert(e)
    assert winner(t, (1, 2)) == "c.fwd(3,)"
    assert winner(t, (1, 3)) is None
    with pytest.raises(EntryExists):
        t.insert(e)
    t.modify(TableEntry((Exact(1), Exact(2)), 0, "c.drop", ()))
    assert winner(t, (1, 2)) == "c.drop()"
    assert t.get((Exact(1), Exact(2))).action == "c.drop"
    t.delete(e)
    assert t.entries() == [] and winner(t, (1, 2)) is None
    with pytest.raises(EntryNotFound):
        t.delete(e)


def test_longest_prefix_wins_regardless_of_insertion_order():
    t = table([KeyField("hdr.ipv4.dstAddr", "lpm", 32)])
    t.insert(TableEntry((Lpm(0x0A000000, 8),), 0, "c.fwd", (1,)))
    t.insert(TableEntry((Lpm(0x0A010200, 24),), 0, "c.fwd", (3,)))
    t.insert(TableEntry((Lpm(0x0A010000, 16),), 0, "c.fwd", (2,)))
    t.insert(TableEntry((Lpm(0, 0),), 0, "c.fwd", (9,)))
    assert winner(t, (0x0A010203,)) == "c.fwd(3,)"
    assert winner(t, (0x0A01FF01,)) == "c.fwd(2,)"
    assert winner(t, (0x0AFF0000,)) == "c.fwd(1,)"
    assert winner(t, (0x0B000000,)) == "c.fwd(9,)"


def test_ternary_range_optional_priorities_highest_wins():
    t = table([KeyField("a", "ternary", 8), KeyField("b", "range", 16), KeyField("c", "optional", 1)])
    t.insert(TableEntry((Ternary(0x10, 0xF0), None, None), 10, "c.fwd", (1,)))
    t.insert(TableEntry((None, Range(100, 200), None), 20, "c.fwd", (2,)))
    t.insert(TableEntry((None, None, Optional(1)), 30, "c.fwd", (3,)))
    assert winner(t, (0x1F, 5, 0)) == "c.fwd(1,)"
    assert winner(t, (0x1F, 150, 0)) == "c.fwd(2,)"
    assert winner(t, (0x1F, 150, 1)) == "c.fwd(3,)"
    assert winner(t, (0x2F, 201, 0)) is None
    t.delete(TableEntry((None, None, Optional(1)), 30, "c.fwd", (3,)))
    assert winner(t, (0x1F, 150, 1)) == "c.fwd(2,)"


def test_same_match_different_priority_are_distinct_entries():
    t = table([KeyField("a", "ternary", 8)])
    t.insert(TableEntry((Ternary(1, 0xFF),), 1, "c.fwd", (1,)))
    t.insert(TableEntry((Ternary(1, 0xFF),), 2, "c.fwd", (2,)))
    assert winner(t, (1,)) == "c.fwd(2,)"
    assert t.get((Ternary(1, 0xFF),), 1).args == (1,)


@pytest.mark.parametrize("entry,message", [
    (TableEntry((Exact(1 << 16),), 0, "c.fwd", (1,)), "does not fit"),
    (TableEntry((Exact(1),), 0, "c.nope", ()), "unknown action"),
    (TableEntry((Exact(1),), 0, "c.fwd", ()), "takes 1 argument"),
    (TableEntry((Exact(1),), 0, "c.fwd", (512,)), "does not fit in 9 bits"),
    (TableEntry((Exact(1),), 0, "NoAction", ()), "@defaultonly"),
    (TableEntry((Exact(1),), 5, "c.fwd", (1,)), "priority"),
    (TableEntry((Lpm(1, 8),), 0, "c.fwd", (1,)), "got a Lpm match"),
    (TableEntry((None,), 0, "c.fwd", (1,)), "cannot be omitted"),
])
def test_invalid_entries_say_which_field_and_why(entry, message):
    t = table([KeyField("hdr.x", "exact", 16)])
    with pytest.raises(InvalidEntry, match=message):
        t.insert(entry)


def test_lpm_and_ternary_value_checks():
    t = table([KeyField("ip", "lpm", 32)])
    with pytest.raises(InvalidEntry, match="beyond /8"):
        t.insert(TableEntry((Lpm(0x0A000001, 8),), 0, "c.fwd", (1,)))
    with pytest.raises(InvalidEntry, match="prefix length 33"):
        t.insert(TableEntry((Lpm(0, 33),), 0, "c.fwd", (1,)))
    t2 = table([KeyField("a", "ternary", 8)])
    with pytest.raises(InvalidEntry, match="outside mask"):
        t2.insert(TableEntry((Ternary(0x11, 0xF0),), 1, "c.fwd", (1,)))
    with pytest.raises(InvalidEntry, match="need a priority"):
        t2.insert(TableEntry((Ternary(0x10, 0xF0),), 0, "c.fwd", (1,)))
    t3 = table([KeyField("r", "range", 8)])
    with pytest.raises(InvalidEntry, match="empty"):
        t3.insert(TableEntry((Range(5, 4),), 1, "c.fwd", (1,)))


def test_size_defaults_and_const():
    t = table([KeyField("a", "exact", 8)], size=2)
    t.insert(TableEntry((Exact(1),), 0, "c.fwd", (1,)))
    t.insert(TableEntry((Exact(2),), 0, "c.fwd", (1,)))
    with pytest.raises(TableFull):
        t.insert(TableEntry((Exact(3),), 0, "c.fwd", (1,)))
    assert t.default == ("NoAction", ())
    t.set_default("c.fwd", (4,))
    assert t.default == ("c.fwd", (4,))
    t.reset_default()
    assert t.default == ("NoAction", ())
    t.clear()
    assert t.entries() == []
    const = table([KeyField("a", "exact", 8)], is_const=True, const_default=True,
                  initial_default=("c.drop", ()))
    const.insert_const(TableEntry((Exact(1),), 0, "c.fwd", (1,)))
    with pytest.raises(ConstTable):
        const.insert(TableEntry((Exact(2),), 0, "c.fwd", (1,)))
    with pytest.raises(ConstTable):
        const.set_default("c.fwd", (1,))


def test_direct_counters_and_meters_per_entry():
    from p4switch.externs import Meter

    t = table([KeyField("a", "exact", 8)], meter_factory=Meter)
    e = TableEntry((Exact(1),), 0, "c.fwd", (1,))
    t.insert(e)
    installed = t.lookup((1,))
    installed.packets += 2
    installed.bytes += 100
    assert t.direct_counter(e) == (2, 100)
    t.set_direct_counter(e, 0, 0)
    assert t.direct_counter(e) == (0, 0)
    t.set_direct_meter(e, (10.0, 1, 20.0, 1))
    assert t.direct_meter(e).configured
    with pytest.raises(EntryNotFound):
        t.direct_counter(TableEntry((Exact(9),), 0, "c.fwd", (1,)))
