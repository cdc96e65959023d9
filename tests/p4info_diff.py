"""Field-by-field comparison of two P4Info messages, as a readable diff."""

from __future__ import annotations

import difflib
from pathlib import Path

from google.protobuf import text_format
from p4.config.v1 import p4info_pb2

#: Repeated top-level entities with a preamble, compared by name.
ENTITIES = ("tables", "actions", "action_profiles", "counters", "direct_counters", "meters",
            "direct_meters", "controller_packet_metadata", "value_sets", "registers", "digests",
            "externs")


def load(path: Path) -> p4info_pb2.P4Info:
    info = p4info_pb2.P4Info()
    text_format.Parse(path.read_text(), info)
    return info


def _by_name(info: p4info_pb2.P4Info, kind: str) -> dict[str, str]:
    return {entity.preamble.name: text_format.MessageToString(entity)
            for entity in getattr(info, kind)}


def p4info_diff(expected: p4info_pb2.P4Info, actual: p4info_pb2.P4Info,
                labels: tuple[str, str] = ("p4c", "p4switch")) -> list[str]:
    """Differences, one readable block per entity (empty when equal); pkg_info is not compared."""
    found: list[str] = []
    for kind in ENTITIES:
        want, got = _by_name(expected, kind), _by_name(actual, kind)
        for name in sorted(set(want) | set(got)):
            if name not in got:
                found.append(f"{kind} {name}: only in {labels[0]}")
            elif name not in want:
                found.append(f"{kind} {name}: only in {labels[1]}")
            elif want[name] != got[name]:
                lines = difflib.unified_diff(want[name].splitlines(), got[name].splitlines(),
                                             labels[0], labels[1], lineterm="", n=1)
                found.append(f"{kind} {name}:\n  " + "\n  ".join(lines))
    tw, ta = text_format.MessageToString(expected.type_info), text_format.MessageToString(actual.type_info)
    if tw != ta:
        found.append("type_info:\n  " + "\n  ".join(difflib.unified_diff(
            tw.splitlines(), ta.splitlines(), labels[0], labels[1], lineterm="", n=1)))
    return found
