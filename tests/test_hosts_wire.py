"""The Scapy layer and the fast codec agree byte for byte; packetisation and magnitude classes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scapy.layers.inet import IP, UDP
from scapy.packet import Raw

from hosts.packetize import DropRule, magnitude_class, magnitude_classes, packetize, priority_hint
from hosts.wire import (
    DLCP,
    DLCP_PORT,
    HEADER_LEN,
    RESERVED_FLAGS,
    Flags,
    Header,
    MsgType,
    pack_bitmap,
    pack_header,
    pack_packet,
    unpack_bitmap,
    unpack_header,
)

headers = st.builds(
    Header,
    msg_type=st.integers(0, 3),
    flags=st.integers(0, 15),
    job_id=st.integers(0, 0xFFFF),
    worker_id=st.integers(0, 0xFFFF),
    tensor_id=st.integers(0, 0xFFFF),
    iteration=st.integers(0, 0xFFFFFFFF),
    offset=st.integers(0, 0xFFFFFFFF),
    tensor_len=st.integers(0, 0xFFFFFFFF),
    count=st.integers(0, 0xFFFF),
    mag_class=st.integers(0, 255),
    prio_hint=st.integers(0, 7),
    seq=st.integers(0, 0xFFFFFFFF),
)


def scapy_of(h: Header) -> DLCP:
    return DLCP(
        version=h.version, msg_type=h.msg_type, flags=h.flags, job_id=h.job_id,
        worker_id=h.worker_id, tensor_id=h.tensor_id, iteration=h.iteration, offset=h.offset,
        tensor_len=h.tensor_len, count=h.count, mag_class=h.mag_class, prio_hint=h.prio_hint,
        seq=h.seq,
    )


@settings(max_examples=200, deadline=None)
@given(headers)
def test_codec_and_scapy_agree_both_ways(h: Header) -> None:
    raw = pack_header(h)
    assert len(raw) == HEADER_LEN
    assert bytes(scapy_of(h)) == raw
    parsed = DLCP(raw)
    assert unpack_header(bytes(parsed)) == h
    assert (parsed.msg_type, int(parsed.flags), parsed.seq, parsed.tensor_len) == (
        h.msg_type, h.flags, h.seq, h.tensor_len)


def test_field_positions_follow_the_contract() -> None:
    raw = pack_header(Header(msg_type=3, flags=0x05, job_id=0x0102, worker_id=0x0304,
                             tensor_id=0x0506, iteration=0x0708090A, offset=0x0B0C0D0E,
                             tensor_len=0x0F101112, count=0x1314, mag_class=0x15,
                             prio_hint=0x06, seq=0x1718191A))
    assert raw == bytes([0x13, 0x05, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14,
                         15, 16, 17, 18, 0x13, 0x14, 0x15, 0x06, 0x17, 0x18, 0x19, 0x1A])
    flags = DLCP(raw).flags
    assert flags.drop_eligible and flags.retx and not flags.last


def test_udp_binding_builds_and_dissects() -> None:
    pkt = IP(dst="10.0.0.2") / UDP(sport=4000) / DLCP(job_id=3, count=2) / Raw(np.array([1.5, -2], "<f4").tobytes())
    assert pkt[UDP].dport == DLCP_PORT
    again = IP(bytes(pkt))
    assert again.haslayer(DLCP) and again[DLCP].job_id == 3
    assert list(again[DLCP].values()) == [1.5, -2.0]
    reply = IP(bytes(IP(dst="10.0.0.1") / UDP(sport=DLCP_PORT, dport=5555) / DLCP(msg_type=3)))
    assert reply[DLCP].msg_type == MsgType.BITMAP


def test_packetize_matches_scapy_decoding_and_rebuilds_tensor() -> None:
    rng = np.random.default_rng(1)
    tensor = rng.normal(size=1000).astype(np.float32)
    batch = packetize(tensor, kind=MsgType.GRADIENT, job_id=7, worker_id=2, tensor_id=4,
                      iteration=9, count=300, prio_hint=5)
    assert len(batch) == 4
    rebuilt = np.full(1000, np.nan, np.float32)
    for i in range(len(batch)):
        raw = bytes(batch.packet(i))
        d = DLCP(raw)
        assert (d.job_id, d.worker_id, d.tensor_id, d.iteration, d.seq) == (7, 2, 4, 9, i)
        assert d.tensor_len == 1000 and d.prio_hint == 5 and d.count == min(300, 1000 - 300 * i)
        assert bool(d.flags.last) == (i == 3)
        assert d.mag_class == magnitude_class(tensor[d.offset:d.offset + d.count])
        rebuilt[d.offset:d.offset + d.count] = d.values()
        # the codec reads what Scapy reads, and packs the same bytes
        h = unpack_header(raw)
        assert pack_packet(h, d.values()) == raw
    np.testing.assert_array_equal(rebuilt, tensor)


def test_magnitude_class_definition() -> None:
    assert magnitude_class(np.zeros(5)) == 0
    assert magnitude_class(np.array([0.0, -1.0])) == 128
    assert magnitude_class(np.array([0.75])) == 127
    assert magnitude_class(np.array([2.0**-140])) == 1
    assert magnitude_class(np.array([3.0e38])) == 255
    assert magnitude_class(np.array([np.inf])) == 255
    classes = magnitude_classes(np.array([4.0, 0, 0, 0, 0.001], np.float32), 2)
    assert list(classes) == [130, 0, 118]


def test_drop_rule_respects_budget_and_prefers_small_magnitudes() -> None:
    rng = np.random.default_rng(2)
    tensor = (rng.normal(size=10_000) * np.repeat(10.0 ** rng.integers(-6, 2, 100), 100)).astype(np.float32)
    rule = DropRule(bound=0.05)
    for position in (0.0, 1.0):
        batch = packetize(tensor, kind=MsgType.GRADIENT, job_id=1, worker_id=1, tensor_id=0,
                          iteration=0, count=100, drop_rule=rule, position=position)
        marked = batch.counts[batch.eligible].sum()
        assert 0 < marked <= rule.budget(tensor.size, position)
        classes = batch.headers["mag_class"]
        assert classes[batch.eligible].max() <= classes[~batch.eligible].min()
    front = rule.budget(10_000, 0.0)
    back = rule.budget(10_000, 1.0)
    assert front == 500 and back == 200


def test_priority_hint_front_layers_most_urgent() -> None:
    assert priority_hint(0.0) == 7 and priority_hint(1.0) == 0
    assert priority_hint(0.5) < priority_hint(0.1)


def test_bitmap_roundtrip_lsb_first() -> None:
    bits = np.array([1, 0, 0, 0, 0, 0, 0, 0, 0, 1], dtype=bool)
    payload = pack_bitmap(bits)
    assert payload == bytes([0x01, 0x02])
    np.testing.assert_array_equal(unpack_bitmap(payload, 10), bits)
    with pytest.raises(ValueError):
        unpack_bitmap(payload, 17)


def test_flags_values_match_contract() -> None:
    assert (Flags.DROP_ELIGIBLE, Flags.LAST, Flags.RETRANSMIT, Flags.ECN_ECHO) == (1, 2, 4, 8)
    assert RESERVED_FLAGS & 0xFF == 0xF0
    echo = DLCP(bytes(DLCP(msg_type=MsgType.BITMAP, flags="ecn_echo")))
    assert int(echo.flags) == Flags.ECN_ECHO
    assert unpack_header(bytes(echo)).flags == Flags.ECN_ECHO


def test_scapy_layer_matches_the_p4_header_field_for_field() -> None:
    import re
    from pathlib import Path

    source = (Path(__file__).resolve().parents[1] / "p4src" / "dlcp.p4").read_text()
    body = re.search(r"header\s+dlcp_t\s*\{(.*?)\}", source, re.S)
    assert body, "p4src/dlcp.p4 has no dlcp_t header"
    p4 = [(name, int(width)) for width, name in re.findall(r"bit<(\d+)>\s+(\w+)\s*;", body.group(1))]
    scapy = []
    for f in DLCP.fields_desc:
        if f.name == "flags":  # one 8-bit field on the host, bit by bit in P4 (bit 0 = LSB)
            scapy += [("flags_rsvd", 4), ("ecn_echo", 1), ("retx", 1), ("last", 1), ("drop_eligible", 1)]
        else:
            scapy.append((f.name, f.size if hasattr(f, "size") and f.size else 8 * f.sz))
    assert scapy == p4
    assert sum(w for _, w in p4) == 8 * HEADER_LEN


def test_decode_command_reads_dlcp_packets_from_a_pcap(tmp_path, capsys) -> None:
    import json

    from scapy.layers.l2 import Ether
    from scapy.utils import wrpcap

    from gradfabric.command import cli as gradfabric_cli

    batch = packetize(np.arange(700, dtype=np.float32), kind=MsgType.PARAMETER, job_id=4, worker_id=1,
                      tensor_id=2, iteration=3, count=300)
    frames = [Ether() / IP(src="10.0.1.1", dst="10.0.2.1") / UDP(sport=5000, dport=DLCP_PORT) / Raw(bytes(batch.packet(i)))
              for i in range(len(batch))]
    frames.insert(1, Ether() / IP() / UDP(sport=1, dport=53) / Raw(b"not dlcp"))
    path = tmp_path / "s1-eth1.pcap"
    wrpcap(str(path), frames)
    assert gradfabric_cli.main(["agent", "decode", str(path)]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["seq"], r["offset"], r["count"], r["payload_bytes"]) for r in rows] == [
        (0, 0, 300, 1200), (1, 300, 300, 1200), (2, 600, 100, 400)]
    assert rows[-1]["flags"] == Flags.LAST and rows[0]["msg_type"] == MsgType.PARAMETER
    assert gradfabric_cli.main(["agent", "decode", str(tmp_path / "missing.pcap")]) == 1


def test_torch_like_tensors_are_accepted_without_torch() -> None:
    from hosts.packetize import as_float32

    class FakeTensor:  # the duck-typed surface of a torch tensor on any device
        def __init__(self, data: np.ndarray) -> None:
            self.data = data
            self.calls: list[str] = []

        def detach(self) -> "FakeTensor":
            self.calls.append("detach")
            return self

        def cpu(self) -> "FakeTensor":
            self.calls.append("cpu")
            return self

        def numpy(self) -> np.ndarray:
            self.calls.append("numpy")
            return self.data

    t = FakeTensor(np.arange(6, dtype=np.float64).reshape(2, 3))
    flat = as_float32(t)
    assert flat.dtype == np.float32 and list(flat) == [0, 1, 2, 3, 4, 5]
    assert t.calls == ["detach", "cpu", "numpy"]


def test_cut_packet_lets_the_marked_values_fill_the_bound_also_in_small_tensors() -> None:
    # Whole packets of 361 could mark nothing of a 1,000-value tensor at a 10 % bound (a
    # packet is 36 % of it); cutting one packet marks exactly the budget, smallest first.
    rng = np.random.default_rng(5)
    rule = DropRule(bound=0.10, back_share=1.0, split=True)
    for size in (1_000, 10_000, 123_457):
        tensor = (rng.normal(size=size) * np.repeat(10.0 ** rng.integers(-6, 2, -(-size // 361)), 361)[:size])
        tensor = tensor.astype(np.float32)
        whole = packetize(tensor, kind=MsgType.GRADIENT, job_id=1, worker_id=1, tensor_id=0, iteration=0,
                          drop_rule=DropRule(bound=0.10, back_share=1.0))
        cut = packetize(tensor, kind=MsgType.GRADIENT, job_id=1, worker_id=1, tensor_id=0, iteration=0,
                        drop_rule=rule)
        budget = size // 10
        assert cut.counts[cut.eligible].sum() == budget >= whole.counts[whole.eligible].sum()
        assert len(cut) == len(whole) + 1
        # every value is in exactly one packet, in order, and decodes to the tensor
        starts = cut.headers["offset"].astype(np.int64)
        assert list(starts) == list(np.concatenate([[0], np.cumsum(cut.counts)[:-1]]))
        rebuilt = np.concatenate([np.frombuffer(cut.packet(i)[28:], "<f4") for i in range(len(cut))])
        np.testing.assert_array_equal(rebuilt, tensor)
        # marked packets hold the smallest magnitudes: none above a whole unmarked packet's class
        classes = cut.headers["mag_class"]
        assert classes[cut.eligible].max() <= classes[~cut.eligible & (cut.counts == 361)].min()
        # both pieces of the cut packet carry their own values' class
        assert [int(c) for c in classes] == [magnitude_class(tensor[s:s + c]) for s, c in zip(starts, cut.counts)]
        assert np.array_equal(cut.eligible, (cut.headers["flags"] & Flags.DROP_ELIGIBLE) != 0)
    assert whole.counts[whole.eligible].sum() < budget  # whole packets alone fall short


def test_drop_rule_plan_marks_the_smallest_classes_within_the_budget_and_skips_high_classes() -> None:
    # Classes 5, 1, 9, 1, 200 with 10 values each, budget 25 (bound 0.5 of 50): packets 1 and 3
    # (class 1) fit (20), packet 0 (class 5) is cut at 5; with max_mag_class 4 only class 1 counts.
    classes = np.array([5, 1, 9, 1, 200], dtype=np.uint8)
    counts = np.full(5, 10, dtype=np.int64)
    marks, cut = DropRule(bound=0.5, back_share=1.0, split=True).plan(classes, counts, 50, 0.0)
    assert marks.tolist() == [False, True, False, True, False] and cut == (0, 5)
    marks, cut = DropRule(bound=0.5, back_share=1.0, max_mag_class=4, split=True).plan(classes, counts, 50, 0.0)
    assert marks.tolist() == [False, True, False, True, False] and cut is None
    marks, cut = DropRule(bound=0.5, back_share=1.0).plan(classes, counts, 50, 0.0)
    assert marks.tolist() == [False, True, False, True, False] and cut is None
    marks, cut = DropRule(bound=0.2, back_share=1.0, split=True).plan(classes, counts, 50, 0.0)
    assert marks.tolist() == [False, True, False, False, False] and cut is None  # 10 fits exactly
