"""The updates that turn what a switch has into what is wanted, touching only what changed."""

from __future__ import annotations

from collections.abc import Iterable

from controller.entities import Entity, TableEntry, Update


def entity_key(entity: Entity) -> tuple:
    return entity.key


def managed(entity: Entity, tables: frozenset[str] | None) -> bool:
    if tables is None:
        return True
    return isinstance(entity, TableEntry) and entity.table in tables


def compute_diff(
    desired: Iterable[Entity], actual: Iterable[Entity], tables: frozenset[str] | None = None
) -> list[Update]:
    """Deletes first, then modifies, then inserts; entries outside ``tables`` are left alone.

    Default entries are only ever modified (a table always has one).
    """
    want = {entity_key(e): e for e in desired}
    have = {entity_key(e): e for e in actual if managed(e, tables)}
    deletes = [
        Update("DELETE", e)
        for k, e in have.items()
        if k not in want and not (isinstance(e, TableEntry) and e.is_default)
    ]
    modifies, inserts = [], []
    for k, e in want.items():
        if k not in have:
            if isinstance(e, TableEntry) and e.is_default:
                modifies.append(Update("MODIFY", e))
            else:
                inserts.append(Update("INSERT", e))
        elif have[k] != e:
            modifies.append(Update("MODIFY", e))
    return deletes + modifies + inserts
