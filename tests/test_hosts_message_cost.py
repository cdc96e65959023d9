"""What the per-message shortcuts of the host transport must keep: a completed message's
answers (built from a cached all-ones bitmap when it completed whole), and the sender's
report when nothing or something was lost."""

from __future__ import annotations

import numpy as np
import pytest

from hosts.messages import MessageKey
from hosts.packetize import packetize
from hosts.receiver import Reassembler
from hosts.wire import HEADER_LEN, HEADER_STRUCT, VERSION, Flags, MsgType, probe_length

SOURCE = ("10.0.0.1", 5000)


def _probe(first: int, nbits: int, tensor_len: int, nonce: int = 9) -> bytes:
    head = HEADER_STRUCT.pack((VERSION << 4) | MsgType.PROBE, Flags.LAST, 1, 1, 4, 2, first, tensor_len, nonce,
                              int(MsgType.GRADIENT), 7, nbits)
    return head + bytes(probe_length(nbits) - len(head))


def _answers(replies: list[bytes]) -> list[tuple[int, int, int, bytes]]:
    """(first packet, bits, flags, payload) of each bitmap answer."""
    out = []
    for reply in replies:
        fields = HEADER_STRUCT.unpack_from(reply)
        out.append((fields[6], fields[8], fields[1], bytes(reply[HEADER_LEN:])))
    return out


@pytest.mark.parametrize("packets", [1, 7, 8, 9, 43, 8192 + 5])
def test_a_message_completed_whole_answers_every_packet_and_no_padding_bit(packets: int) -> None:
    values = np.arange(packets * 3, dtype=np.float32) + 1
    batch = packetize(values, kind=MsgType.GRADIENT, job_id=1, worker_id=1, tensor_id=4, iteration=2, count=3)
    rx = Reassembler(job_id=1, bounds={MsgType.GRADIENT: 0.0, MsgType.PARAMETER: 0.0})
    done = []
    for i in range(len(batch)):
        done += rx.handle(batch.packet(i), SOURCE)[1]
    assert [d.key for d in done] == [MessageKey(1, 1, 2, 4, MsgType.GRADIENT)]
    # One probe may ask about 8,192 packets: ask in pieces as a sender does.
    for first in range(0, packets, 8192):
        nbits = min(8192, packets - first)
        answers = _answers(rx.handle(_probe(first, nbits, values.size), SOURCE)[0])
        assert [(a[0], a[1]) for a in answers] == [(first, nbits)]
        flags, payload = answers[0][2], answers[0][3]
        assert flags & Flags.LAST
        # all bits set, LSB first, the last byte's unused bits clear
        expected = bytes([0xFF] * (nbits // 8)) + (bytes([(1 << nbits % 8) - 1]) if nbits % 8 else b"")
        assert payload == expected


def test_a_message_completed_with_loss_answers_which_packets_it_holds() -> None:
    values = np.arange(100 * 3, dtype=np.float32) + 1
    batch = packetize(values, kind=MsgType.GRADIENT, job_id=1, worker_id=1, tensor_id=4, iteration=2, count=3)
    rx = Reassembler(job_id=1, bounds={MsgType.GRADIENT: 0.05, MsgType.PARAMETER: 0.0})
    for i in range(len(batch)):
        if i not in (2, 17):
            rx.handle(batch.packet(i), SOURCE)
    replies, done = rx.handle(_probe(0, 100, values.size), SOURCE)  # completes it within its bound
    assert len(done) == 1 and sorted(done[0].lost.tolist()) == [6, 7, 8, 51, 52, 53]
    again = _answers(rx.handle(_probe(0, 100, values.size, nonce=10), SOURCE)[0])  # asked again after completion
    for payload in (_answers(replies)[0][3], again[0][3]):
        bits = np.unpackbits(np.frombuffer(payload, np.uint8), bitorder="little")[:100]
        assert np.flatnonzero(bits == 0).tolist() == [2, 17]


def test_as_float32_passes_a_flat_float32_array_through_and_converts_anything_else() -> None:
    from hosts.packetize import as_float32

    flat = np.arange(6, dtype=np.float32)
    assert as_float32(flat) is flat  # no copy, no new view: the sender's usual case
    for other in (np.arange(6, dtype=np.float64), flat.reshape(2, 3), np.arange(12, dtype=np.float32)[::2],
                  np.arange(6, dtype=">f4")):
        got = as_float32(other)
        assert got.dtype == np.float32 and got.ndim == 1 and got.flags.c_contiguous
        np.testing.assert_array_equal(got, np.asarray(other, dtype=np.float64).reshape(-1))
