"""ns-3's DLCP transport meets reordering as the hosts' does (hosts/sender.py): a packet that
arrives late is neither resent nor zero-filled, and the window cut its absence caused is
taken back; a packet really lost is resent (reliable) or zero-filled (within the bound).
Once packets shown missing arrived without a resend, the next 16 losses over a bound cut the
window only when a confirmation shows them (hosts/pacing.py's REORDER_PERSIST, `deferred`); a
path that never reorders still cuts at once. Skipped, with the reason, where the optional ``ns3`` extra is not installed.

h1 -- s1 -- h2: h1's link at 1 Gbit/s, s1's port and h2's link at 100 Mbit/s, 1 us of
propagation each, no host or switch costs. A full DLCP packet is 32 + 1,440 bytes of UDP
payload, a 1,502-byte frame: 12.016 us on h1's link, 120.16 us on the port. h1's window
starts at 10 packets, so packets 0-9 leave at t = 0 and packet k reaches h2 at
14.016 + 120.16 (k + 1) us: packet 2 at 374.496 us. The tests hold packet 2's first frame into h2
for 4 ms (then it is taken in: 4,374.496 us) or drop it; several messages go one after another. The reorder grace
is the hosts' 5 ms, longer than the hold, so the confirming probe finds the held packet in.
"""

from __future__ import annotations

import pytest

from simulator.packet.runtime import missing_reason
from simulator.packet.topology import Port, tiny

needs_ns3 = pytest.mark.skipif(missing_reason() is not None, reason=str(missing_reason()))

VALUES = 20 * 360  # 20 full packets
HOLD_S = 0.004
HELD_ARRIVES_NS = 4_374_496  # 14.016 + 3 x 120.16 us to h2, then the 4 ms hold
DROP = -1.0

# A frame into h2: PPP (2) + IPv4 (20) + UDP (8) bytes, then the DLCP header (gradfabric_dlcp_wire.h:
# type at 0, msg at 4, seq at 8, host byte order as memcpy'd).
_HOLDER = r"""
namespace gfdefer
{
using namespace ns3;
// Holds packet 2's first frame of each message listed: after its delay it is received again
// (negative: never, a loss).
class HoldSeq : public ErrorModel
{
  public:
    void Set(Ptr<NetDevice> device) { m_device = device->GetObject<PointToPointNetDevice>(); }
    void Add(uint32_t msg, double delay) { m_delay[msg] = delay; }
    uint32_t held = 0;

  private:
    bool DoCorrupt(Ptr<Packet> p) override
    {
        uint8_t b[42];
        if (p->GetSize() < 1000 || p->CopyData(b, sizeof(b)) != sizeof(b) || b[30] != 1)
        {
            return false;
        }
        uint32_t msg, seq;
        std::memcpy(&msg, b + 34, 4);
        std::memcpy(&seq, b + 38, 4);
        auto it = m_delay.find(msg);
        if (seq != 2 || it == m_delay.end())
        {
            return false;
        }
        double delay = it->second;
        m_delay.erase(it);  // only the first frame: a resend or the held one passes
        held++;
        if (delay >= 0)
        {
            Ptr<PointToPointNetDevice> d = m_device;
            Ptr<Packet> copy = p->Copy();
            Simulator::Schedule(Seconds(delay), [d, copy]() { d->Receive(copy); });
        }
        return true;
    }

    void DoReset() override
    {
    }

    Ptr<PointToPointNetDevice> m_device;
    std::map<uint32_t, double> m_delay;
};
} // namespace gfdefer
"""


@pytest.fixture(scope="module")
def ns3():  # type: ignore[no-untyped-def]
    import cppyy

    from simulator.packet.runtime import load

    ns, gf = load()
    if not hasattr(cppyy.gbl, "gfdefer"):
        cppyy.cppdef(_HOLDER)
    return ns, gf, cppyy.gbl.gfdefer


def _send(ns3, delays: list[float | None], bound: float = 0.0) -> dict[str, int]:  # type: ignore[no-untyped-def]
    """Messages 1..len(delays) of VALUES from h1 to h2 with `bound`, one after another; message
    i's packet 2 held delays[i - 1] s (DROP: lost, None: not touched). Returns the sender's
    counts and the receiver's of the last message."""
    from simulator.packet.network import HostCosts, build

    ns, gf, gfdefer = ns3
    net = build(tiny(1e9, 1e8, 1e-6, Port(rate_bps=1e8, queue_packets=64)), costs=HostCosts())
    holder = ns.CreateObject[gfdefer.HoldSeq]()
    holder.Set(net.devices[("h2", "s1")])
    for msg, delay in enumerate(delays, 1):
        if delay is not None:
            holder.Add(msg, delay)
    net.devices[("h2", "s1")].SetAttribute("ReceiveErrorModel", ns.PointerValue(holder))
    sender = gf.DlcpEndpoint(net.nodes["h1"], 40000, 16, 10.0, 64.0, 0.001, 0.005)
    receiver = gf.DlcpEndpoint(net.nodes["h2"], 40000, 16, 10.0, 64.0, 0.001, 0.005)
    for ep in (sender, receiver):
        ep.SetLastGrace(0.0)  # as sprayed: no data probe asks to complete
        ep.SetReorder(0.005, 20, 2.0)
    got = dict(done=0, missing=0)

    def received(src: int, msg: int, values: int, lost: int) -> None:
        got.update(at_ns=round(gf.NowSeconds() * 1e9), values=values, lost=lost)

    def send(msg: int) -> None:
        sender.Send(msg, net.address("h2"), VALUES, 0, 0, 0.0, bound)

    def sent(msg: int, retransmitted: int, missing: int) -> None:
        got.update(done=got["done"] + 1, missing=got["missing"] + missing)
        if msg < len(delays):
            send(msg + 1)

    def start() -> None:
        send(1)

    receiver.onReceived = received
    sender.onSent = sent
    gf.ScheduleCall(0.0, start)  # from within the simulation, as jobs start
    ns.Simulator.Stop(ns.Seconds(5))
    ns.Simulator.Run()
    st = sender.stats
    got.update(retransmitted=int(st.retransmitted), reordered=int(st.reordered), cuts=int(st.windowCuts),
               undone=int(st.cutsUndone), deferred=int(st.deferred), packets=int(st.packets), held=int(holder.held))
    ns.Simulator.Destroy()
    return got


@needs_ns3
def test_a_reliable_messages_late_packet_is_not_resent_and_its_cut_is_taken_back(ns3) -> None:  # type: ignore[no-untyped-def]
    got = _send(ns3, [HOLD_S])
    # Complete when the held packet is taken in: nothing resent, nothing zero-filled. The first
    # chunk's answer showed it missing (over a bound of 0: the window was cut), the confirming
    # probe found it in: the cut is undone and the packet counted late.
    assert (got["at_ns"], got["lost"], got["values"]) == (HELD_ARRIVES_NS, 0, VALUES)
    assert (got["packets"], got["retransmitted"], got["reordered"]) == (20, 0, 1)
    assert (got["cuts"], got["undone"], got["missing"]) == (1, 1, 0)


@needs_ns3
def test_a_reliable_messages_lost_packet_is_resent_once_after_its_confirmation(ns3) -> None:  # type: ignore[no-untyped-def]
    got = _send(ns3, [DROP])
    assert (got["lost"], got["values"], got["missing"]) == (0, VALUES, 0)
    assert (got["packets"], got["retransmitted"], got["reordered"]) == (20, 1, 0)
    assert (got["cuts"], got["undone"]) == (1, 0)
    # Resent only after the 5 ms reorder grace from the first answer that showed it missing
    # (that answer came after packet 9 reached h2: 1,215.616 us).
    assert got["at_ns"] > 1_215_616 + 5_000_000


@needs_ns3
def test_within_the_bound_a_late_packet_is_waited_for_and_a_lost_one_zero_filled(ns3) -> None:  # type: ignore[no-untyped-def]
    bound = 360 / VALUES  # one packet's values may be missing
    late = _send(ns3, [HOLD_S], bound)
    assert (late["at_ns"], late["lost"]) == (HELD_ARRIVES_NS, 0)
    assert (late["retransmitted"], late["cuts"], late["reordered"]) == (0, 0, 1)
    lost = _send(ns3, [DROP], bound)
    assert (lost["lost"], lost["missing"], lost["retransmitted"], lost["cuts"]) == (360, 360, 0, 0)
    # The last probe went an allowance (the 5 ms grace) after the last data left h1.
    assert lost["at_ns"] > 5_000_000


@needs_ns3
def test_after_reordering_is_seen_late_packets_cut_nothing(ns3) -> None:  # type: ignore[no-untyped-def]
    # Every message's packet 2 comes 4 ms late. The first message's loss cuts at once (no
    # reordering seen yet) and the cut is taken back; the other 7 wait for a confirmation,
    # which finds the packet in: no cut to take back. (Cutting at once, as before, took back 8.)
    got = _send(ns3, [HOLD_S] * 8)
    assert (got["done"], got["missing"], got["held"], got["retransmitted"], got["reordered"]) == (8, 0, 8, 0, 8)
    assert (got["deferred"], got["cuts"], got["undone"]) == (7, 1, 1)


@needs_ns3
def test_a_path_that_never_reorders_cuts_at_once(ns3) -> None:  # type: ignore[no-untyped-def]
    got = _send(ns3, [DROP] * 8)
    assert (got["done"], got["missing"], got["held"], got["retransmitted"], got["reordered"]) == (8, 0, 8, 8, 0)
    assert (got["deferred"], got["cuts"], got["undone"]) == (0, 8, 0)


@needs_ns3
def test_after_reordering_a_confirmed_loss_still_cuts(ns3) -> None:  # type: ignore[no-untyped-def]
    # Message 1 late (cut, taken back, reordering seen); message 2 lost: its cut waits for the
    # confirmation, which shows the loss, and then stands; message 3 untouched.
    got = _send(ns3, [HOLD_S, DROP, None])
    assert (got["done"], got["missing"], got["retransmitted"], got["reordered"]) == (3, 0, 1, 1)
    assert (got["deferred"], got["cuts"], got["undone"]) == (1, 2, 1)
