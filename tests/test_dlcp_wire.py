"""Packets built with the host's Scapy layer (hosts/wire.py) are read right by the program.

Every DLCP field the program reads (version, drop_eligible, job_id, tensor_id, mag_class)
is checked through a decision that depends on its exact value: table entries that match
only that value (with decoys on both sides of it), the per-job counter and the drop rule.
The header leaves the switch exactly as Scapy wrote it.
"""

from __future__ import annotations

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from hosts.wire import DLCP, DLCP_PORT, Flags, MsgType
from tests.test_dlcp_pipeline import (  # noqa: F401  (program: module fixture)
    DST_IP,
    GW_MAC,
    HOST_MAC,
    IN_PORT,
    SRC_IP,
    DlcpSwitch,
    no_queue,
    program,
    switch,
)

FIELDS = ("version", "msg_type", "flags", "job_id", "worker_id", "tensor_id", "iteration",
          "offset", "tensor_len", "count", "mag_class", "prio_hint", "seq")

CASES = [
    dict(msg_type=MsgType.GRADIENT, flags=Flags.DROP_ELIGIBLE, job_id=1, worker_id=2,
         tensor_id=0, iteration=1, offset=0, tensor_len=1000, count=4, mag_class=128,
         prio_hint=7, seq=0),
    dict(msg_type=MsgType.PARAMETER, flags=Flags.LAST | Flags.RETRANSMIT, job_id=1023,
         worker_id=0xFFFF, tensor_id=0xFFFF, iteration=0xFFFFFFFF, offset=0xFFFFFFF0,
         tensor_len=0xFFFFFFFF, count=2, mag_class=254, prio_hint=0, seq=0xFFFFFFFF),
    dict(msg_type=MsgType.GRADIENT, flags=Flags.DROP_ELIGIBLE | Flags.LAST, job_id=0x0102,
         worker_id=0x0304, tensor_id=0x0506, iteration=0x0708090A, offset=0x0B0C0D0E,
         tensor_len=0x0F101112, count=3, mag_class=1, prio_hint=3, seq=0x13141516),
    dict(msg_type=MsgType.PROBE, flags=0, job_id=77, worker_id=5, tensor_id=300,
         iteration=12345, offset=0, tensor_len=4096, count=0, mag_class=0, prio_hint=1,
         seq=17),
]


def scapy_packet(fields: dict) -> bytes:
    payload = bytes(range(4 * fields["count"]))
    return bytes(Ether(src=HOST_MAC, dst=GW_MAC) / IP(src=SRC_IP, dst=DST_IP)
                 / UDP(sport=33333, dport=DLCP_PORT) / DLCP(**fields) / Raw(payload))


def install(switch: DlcpSwitch, fields: dict, drop_mags: tuple[int, int]) -> None:
    """Entries that hit only when the program read job, tensor and magnitude exactly."""
    switch.route("10.0.2.0", 24, 2)
    job, tensor, mag = fields["job_id"], fields["tensor_id"], fields["mag_class"]
    switch.layer_priority(job, (tensor, tensor), prio=5, dscp=33, mags=(mag, mag), priority=10)
    # Decoys just beside the true values, preferred if they matched.
    if tensor > 0:
        switch.layer_priority(job, (0, tensor - 1), prio=1, dscp=1, priority=20)
    if tensor < 0xFFFF:
        switch.layer_priority(job, (tensor + 1, 0xFFFF), prio=2, dscp=2, priority=21)
    if mag > 0:
        switch.layer_priority(job, (0, 0xFFFF), prio=3, dscp=3, mags=(0, mag - 1), priority=22)
    if mag < 0xFF:
        switch.layer_priority(job, (0, 0xFFFF), prio=4, dscp=4, mags=(mag + 1, 0xFF), priority=23)
    switch.drop_class(job, 1, tensors=(tensor, tensor), mags=drop_mags)


@pytest.mark.parametrize("fields", CASES, ids=[f"case{i}" for i in range(len(CASES))])
def test_program_reads_every_field_scapy_wrote(switch: DlcpSwitch, fields: dict) -> None:
    frame = scapy_packet(fields)
    # A drop class of exactly the packet's magnitude: dropped under congestion iff drop-eligible.
    install(switch, fields, drop_mags=(fields["mag_class"], fields["mag_class"]))

    jobs = switch.pipeline.ingress(frame, IN_PORT, 0)
    assert len(jobs) == 1
    assert jobs[0].priority == 5  # job_id, tensor_id, mag_class read exactly
    assert switch.counter("DlcpIngress.job_rx", fields["job_id"])[0] == 1
    assert switch.counter("DlcpIngress.ingress_drops", 3)[0] == 0  # version accepted

    switch.pipeline.egress(jobs[0], no_queue(depth=0))   # its queue is empty again
    switch.queued(2, 5, 1)                               # one packet ahead in queue (2, 5)
    eligible = bool(fields["flags"] & Flags.DROP_ELIGIBLE)
    assert (switch.pipeline.ingress(frame, IN_PORT, 0) == []) == eligible
    switch.queued(2, 5, 0)

    calm = switch.send(frame, depth=0)
    assert len(calm) == 1
    sent = Ether(calm[0][1])
    assert sent[IP].tos >> 2 == 33
    for name in FIELDS:
        assert getattr(sent[DLCP], name) == getattr(Ether(frame)[DLCP], name), name
    assert bytes(sent[UDP]) == bytes(Ether(frame)[UDP])  # header and payload untouched


def test_a_class_just_above_the_packet_does_not_drop(switch: DlcpSwitch) -> None:
    fields = dict(CASES[0], mag_class=200)
    install(switch, fields, drop_mags=(201, 255))
    switch.queued(2, 5, 5)
    assert len(switch.send(scapy_packet(fields), depth=5)) == 1
