"""Random and mutated DLCP packets against the receiver: no crash, no stray write, all counted."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hosts.packetize import packetize
from hosts.receiver import Reassembler
from hosts.messages import MessageKey
from hosts.wire import HEADER_LEN, Header, MsgType, pack_header

SOURCE = ("127.0.0.1", 9)
TENSOR = np.arange(1, 2001, dtype=np.float32)
BATCH = packetize(TENSOR, kind=MsgType.GRADIENT, job_id=1, worker_id=3, tensor_id=2, iteration=5, count=100)
VALID = [bytes(BATCH.packet(i)) for i in range(len(BATCH))]
PROBE = pack_header(Header(msg_type=MsgType.PROBE, flags=0, job_id=1, worker_id=3, tensor_id=2, iteration=5,
                           offset=0, tensor_len=2000, count=0, mag_class=0, prio_hint=7, seq=len(VALID)))


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    base = bytearray(draw(st.sampled_from(VALID + [PROBE])))
    kind = draw(st.sampled_from(["flip", "truncate", "extend", "field"]))
    if kind == "flip":
        for _ in range(draw(st.integers(1, 4))):
            i = draw(st.integers(0, len(base) - 1))
            base[i] ^= draw(st.integers(1, 255))
    elif kind == "truncate":
        base = base[: draw(st.integers(0, len(base) - 1))]
    elif kind == "extend":
        base += draw(st.binary(min_size=1, max_size=64))
    else:  # overwrite one header field with an arbitrary value
        at = draw(st.sampled_from([0, 1, 2, 4, 6, 8, 12, 16, 20, 22, 24]))
        width = {0: 1, 1: 1, 2: 2, 4: 2, 6: 2, 8: 4, 12: 4, 16: 4, 20: 2, 22: 1, 24: 4}[at]
        base[at:at + width] = draw(st.binary(min_size=width, max_size=width))
    return bytes(base)


packets = st.lists(st.one_of(st.binary(max_size=120), mutated()), min_size=1, max_size=40)


def check_invariants(r: Reassembler, handled: int) -> None:
    s = r.stats
    assert s.data_packets + s.probes + s.dropped == handled
    for asm in r._open.values():  # noqa: SLF001 - the invariant is about internal state
        assert asm.values.size <= r.max_tensor_len
        have = np.frombuffer(asm.have, dtype=np.uint8) == asm.mark
        assert int(have.sum()) == asm.received
        if asm.fill is None:  # an array not set at completion: it must read 0 where nothing arrived
            assert np.all(asm.values[~have] == 0)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(packets)
def test_random_and_mutated_packets_never_crash(batch: list[bytes]) -> None:
    r = Reassembler(job_id=None, max_tensor_len=1 << 16, max_open=64)
    for i, data in enumerate(batch, 1):
        replies, delivered = r.handle(data, SOURCE)
        for reply in replies:
            assert len(reply) >= HEADER_LEN and reply[0] & 0x0F == MsgType.BITMAP
        for d in delivered:
            assert d.values.dtype == np.float32 and 0 <= d.received <= d.values.size
            if d.lost is not None:  # a fresh array is not zeroed: what never arrived is set to 0 at completion
                assert np.all(d.values[d.lost] == 0)
        check_invariants(r, i)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(mutated(), min_size=1, max_size=30), st.randoms(use_true_random=False))
def test_valid_message_survives_interleaved_garbage(garbage: list[bytes], rnd) -> None:
    """Mutants that still look like this message could carry wrong values; every other one
    must be dropped and the message must still be rebuilt exactly."""
    r = Reassembler(job_id=1, max_tensor_len=1 << 16)
    harmless = [g for g in garbage if not _same_message(g)]
    stream = VALID + harmless
    rnd.shuffle(stream)
    delivered = []
    for data in stream:
        delivered += r.handle(data, SOURCE)[1]
    delivered += r.handle(PROBE, SOURCE)[1]
    ours = [d for d in delivered if d.key.worker_id == 3 and d.key.iteration == 5 and d.key.tensor_id == 2
            and d.key.kind == MsgType.GRADIENT]
    assert len(ours) == 1
    np.testing.assert_array_equal(ours[0].values, TENSOR)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(mutated(), min_size=1, max_size=30), st.randoms(use_true_random=False))
def test_no_stray_write_outside_what_arrived(garbage: list[bytes], rnd) -> None:
    """Rebuilt in a caller's array poisoned with NaN: mutants of the message and half of its
    packets leave every element that did not arrive untouched until completion, and the
    completed message reads 0 exactly where nothing arrived."""
    r = Reassembler(job_id=1, max_tensor_len=1 << 16)
    key = MessageKey(1, 3, 5, 2, MsgType.GRADIENT)
    out = np.full(TENSOR.size, np.nan, dtype=np.float32)
    r.expect(key, out)
    stream = VALID[::2] + garbage
    rnd.shuffle(stream)
    delivered = []
    for data in stream:
        delivered += r.handle(data, SOURCE)[1]
    asm = r._open.get(key)  # noqa: SLF001 - the invariant is about internal state
    if asm is not None:
        have = np.frombuffer(asm.have, dtype=np.uint8) == asm.mark
        assert np.shares_memory(asm.values, out) and int(have.sum()) == asm.received
        assert np.all(np.isnan(out[~have]))  # nothing written outside what arrived
    delivered += r.handle(PROBE, SOURCE)[1]  # last-flagged: completes within no bound only if whole
    for d in delivered:
        if d.key == key and d.lost is not None:
            assert np.all(d.values[d.lost] == 0)


def _same_message(data: bytes) -> bool:
    """Same job, worker, tensor and iteration: may legitimately touch this message."""
    return len(data) >= HEADER_LEN and data[2:12] == VALID[0][2:12]


def test_each_kind_of_bad_packet_is_counted_by_reason() -> None:
    r = Reassembler(job_id=1, max_tensor_len=10_000)
    good = bytearray(VALID[0])

    def variant(at: int, value: bytes) -> bytes:
        b = bytearray(good)
        b[at:at + len(value)] = value
        return bytes(b)

    cases = {
        "truncated": bytes(good[:20]),
        "bad_version": variant(0, b"\x20"),
        "bad_type": variant(0, b"\x17"),
        "bad_flags": variant(1, b"\x80"),
        "wrong_job": variant(2, b"\x00\x02"),
        "too_large": variant(16, (20_000).to_bytes(4, "big")),
        "out_of_bounds": variant(12, (1950).to_bytes(4, "big")),
        "bad_payload": bytes(good[:-4]),
        "unexpected": variant(0, b"\x13"),
    }
    for reason, data in cases.items():
        before = r.stats.drops[reason]
        assert r.handle(data, SOURCE) == ([], [])
        assert r.stats.drops[reason] == before + 1, reason
    assert r.open_messages == 0
    r.handle(VALID[0], SOURCE)
    inconsistent = variant(16, (3000).to_bytes(4, "big"))
    r.handle(inconsistent, SOURCE)
    assert r.stats.drops["inconsistent"] == 1


def test_stale_incomplete_messages_are_evicted_not_blocking() -> None:
    r = Reassembler(job_id=1, max_open=2, max_open_elements=5_000)
    batches = [packetize(TENSOR, kind=MsgType.GRADIENT, job_id=1, worker_id=w, tensor_id=2, iteration=5, count=100)
               for w in range(4)]
    for b in batches[:3]:  # three senders that vanish after one packet
        r.handle(bytes(b.packet(0)), SOURCE)
    assert r.open_messages == 2 and r.stats.evicted == 1
    delivered = []
    for i in range(len(batches[3])):
        delivered += r.handle(bytes(batches[3].packet(i)), SOURCE)[1]
    assert len(delivered) == 1 and r.stats.evicted == 2  # one more made room: 2 000 + 2 000 <= 5 000
    np.testing.assert_array_equal(delivered[0].values, TENSOR)
    huge = bytearray(VALID[0])
    huge[4:6] = (9).to_bytes(2, "big")  # a new sender
    huge[16:20] = (6_000).to_bytes(4, "big")  # more than all open messages may hold
    r.handle(bytes(huge), SOURCE)
    assert r.stats.drops["too_large"] == 1
