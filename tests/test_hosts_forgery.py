"""Forged datagrams and probe reflection: data only from the job's peers, bounded answers."""

from __future__ import annotations

import socket
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from hosts.endpoint import Endpoint
from hosts.packetize import packetize
from hosts.ps import PS_WORKER_ID, ParameterServer, PsClient
from hosts.receiver import Reassembler
from hosts.wire import AMPLIFICATION, HEADER_LEN, Header, MsgType, pack_header, pack_packet, unpack_header
from tests.hosts_paths import datapath  # noqa: F401  (every test runs on both data paths)

LEGIT = ("127.0.0.1", 40001)
FORGER = ("127.0.0.1", 40666)


def _batch(n: int = 3600, worker: int = 1) -> tuple[np.ndarray, list[bytes]]:
    values = np.random.default_rng(0).normal(size=n).astype(np.float32) + 2.0
    batch = packetize(values, kind=MsgType.GRADIENT, job_id=1, worker_id=worker, tensor_id=0, iteration=0, count=360)
    return values, [bytes(batch.packet(i)) for i in range(len(batch))]


def _forged(tensor_len: int, offset: int = 0, count: int = 360, worker: int = 1, seq: int = 0) -> bytes:
    header = Header(msg_type=MsgType.GRADIENT, flags=0, job_id=1, worker_id=worker, tensor_id=0, iteration=0,
                    offset=offset, tensor_len=tensor_len, count=count, mag_class=128, prio_hint=0, seq=seq)
    return pack_packet(header, np.full(count, 666.0, np.float32))


def test_data_from_another_address_cannot_write_into_a_workers_message() -> None:
    values, packets = _batch()
    r = Reassembler(job_id=1)
    r.handle(packets[1], LEGIT)  # the worker is heard first
    r.handle(_forged(3600), FORGER)  # same worker id, another address, packet 0 first
    delivered = [m for p in packets for m in r.handle(p, LEGIT)[1]]
    assert len(delivered) == 1
    np.testing.assert_array_equal(delivered[0].values, values)
    assert r.stats.drops["unknown_peer"] == 1


def test_with_a_membership_a_forged_first_packet_does_not_fix_the_shape() -> None:
    values, packets = _batch()
    r = Reassembler(job_id=1, peers={1: LEGIT})
    r.handle(_forged(tensor_len=5, count=5), FORGER)  # would make the message 5 elements long
    r.handle(_forged(tensor_len=3600, worker=2), FORGER)  # a worker id the job does not have
    delivered = [m for p in packets for m in r.handle(p, LEGIT)[1]]
    assert len(delivered) == 1 and r.stats.drops.get("inconsistent", 0) == 0
    np.testing.assert_array_equal(delivered[0].values, values)
    assert r.stats.drops["unknown_peer"] == 2 and r.open_messages == 0


def test_a_push_from_an_unknown_worker_is_ignored_not_fatal() -> None:
    server, worker = Endpoint(worker_id=PS_WORKER_ID), Endpoint(worker_id=0)
    forger = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        ps = ParameterServer(server, 1, update="sum")
        client = PsClient(worker, server.address)
        forger.sendto(_forged(tensor_len=1, count=1, worker=7), server.address)  # 32 bytes
        time.sleep(0.1)
        g = np.arange(5_000, dtype=np.float32)
        with ThreadPoolExecutor(1) as pool:
            served = pool.submit(ps.serve_iteration, 0, [0], timeout=10)
            client.push(0, 0, g)
            pulled = client.pull(0, 0, timeout=10)
            served.result(timeout=10)
        np.testing.assert_array_equal(pulled.values, g)
        assert ps.ignored["unknown_worker"] == 1
    finally:
        forger.close()
        server.close()
        worker.close()


def _probe(tensor_len: int, packets: int, worker: int = 1, pad: int = 0) -> bytes:
    return pack_header(Header(msg_type=MsgType.PROBE, flags=0, job_id=1, worker_id=worker, tensor_id=3,
                              iteration=9, offset=0, tensor_len=tensor_len, count=0, mag_class=0, prio_hint=7,
                              seq=packets)) + bytes(pad)


def _answers(sock: socket.socket, quiet: float = 0.3) -> list[bytes]:
    sock.settimeout(quiet)
    got = []
    try:
        while True:
            got.append(sock.recv(65536))
    except TimeoutError:
        return got


def test_a_probe_for_a_message_nobody_sent_gets_a_bounded_answer_and_allocates_nothing() -> None:
    attacker = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with Endpoint(worker_id=2) as victim:
        try:
            probe = _probe(tensor_len=1 << 26, packets=(1 << 26) - 1)
            attacker.sendto(probe, victim.address)  # asks about 2^26 packets in 28 bytes: refused
            wide = _answers(attacker)
            attacker.sendto(_probe(tensor_len=1 << 26, packets=400), victim.address)  # within its size class
            fitting = _answers(attacker)
        finally:
            attacker.close()
        assert wide == [] and victim.reassembler.stats.drops["probe_too_wide"] == 1
        assert sum(map(len, fitting)) <= AMPLIFICATION * len(probe)
        assert victim.reassembler.open_messages == 0  # nothing allocated for it


def test_with_a_membership_only_peers_get_answers() -> None:
    attacker = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    attacker.bind(("127.0.0.1", 0))
    with Endpoint(worker_id=2, peers={1: ("127.0.0.1", 9)}) as victim:
        try:
            for worker in (1, 5):
                attacker.sendto(_probe(tensor_len=100, packets=1, worker=worker), victim.address)
                attacker.sendto(_probe(tensor_len=0, packets=0, worker=worker), victim.address)  # keep-alive
            answers = _answers(attacker)
        finally:
            attacker.close()
    assert answers == [] and victim.reassembler.stats.drops["unknown_peer"] == 4


def test_a_member_gets_answers_for_what_it_sent() -> None:
    values, packets = _batch()
    with Endpoint(worker_id=2) as receiver:
        peer = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            for p in packets[:-1]:
                peer.sendto(p, receiver.address)
            time.sleep(0.1)
            peer.sendto(pack_header(Header(msg_type=MsgType.PROBE, flags=0, job_id=1, worker_id=1, tensor_id=0,
                                           iteration=0, offset=0, tensor_len=3600, count=77, mag_class=0,
                                           prio_hint=0, seq=len(packets))), receiver.address)
            answers = _answers(peer)
        finally:
            peer.close()
    assert len(answers) == 1 and len(answers[0]) == HEADER_LEN + 2
    bits = np.unpackbits(np.frombuffer(answers[0][HEADER_LEN:], np.uint8), count=len(packets), bitorder="little")
    assert bits.tolist() == [1] * (len(packets) - 1) + [0]
    assert unpack_header(answers[0]).seq == 77  # the probe's nonce comes back


def test_with_a_job_key_only_signed_datagrams_count() -> None:
    key = b"0123456789abcdef-job-1"
    values = np.random.default_rng(1).normal(size=20_000).astype(np.float32)
    forger = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with Endpoint(worker_id=1, key=key) as sender, Endpoint(worker_id=2, key=key) as receiver, \
            Endpoint(worker_id=1, key=b"another key of 16+ bytes") as outsider:
        try:
            forger.sendto(_forged(tensor_len=20_000), receiver.address)  # unsigned, right shape
            outsider.keepalive(receiver.address)  # signed with the wrong key
            outsider_address = outsider.address
            time.sleep(0.1)
            report = sender.send(receiver.address, values, iteration=0)
            got = receiver.receive(timeout=5)
        finally:
            forger.close()
    np.testing.assert_array_equal(got.values, values)
    assert report.retransmitted == 0 and sender.count == 361 - 4  # the tag takes 4 values' room
    assert receiver.reassembler.stats.drops["bad_tag"] == 2
    assert receiver.liveness.last(outsider_address) is None  # not even heard
