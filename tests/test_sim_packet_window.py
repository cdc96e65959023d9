"""ns-3's DLCP window reacts to congestion as the hosts' does (hosts/pacing.py's Window and
RttEstimator): an ECN echo cuts by alpha / 2, alpha (DCTCP, RFC 8257) moved once per round
trip by 1/16 towards the share of packets marked; loss over the bound halves; the RTO is
SRTT + max(1 ms, 4 RTTVAR) within [min RTO, max RTO]. Expected figures are worked by hand
below. Skipped, with the reason, where the optional ``ns3`` extra is not installed.
"""

from __future__ import annotations

import pytest

from simulator.packet.runtime import missing_reason
from simulator.packet.topology import Port, tiny

needs_ns3 = pytest.mark.skipif(missing_reason() is not None, reason=str(missing_reason()))

_PROBE = r"""
namespace gfwindow
{
// The protected window rules of a DlcpEndpoint, callable from a test.
class Probe : public gradfabric::DlcpEndpoint
{
  public:
    using gradfabric::DlcpEndpoint::DlcpEndpoint;
    void Marks(double now, uint32_t acked, uint32_t marked) { OnMarks(now, acked, marked); }
    bool Echo(double now) { return EcnCut(now); }
    bool Loss(double now) { return Cut(now); }
    void Rtt(double r) { Sample(r); }
    void SetCwnd(double w) { m_cwnd = w; }
    double Ssthresh() const { return m_ssthresh; }
    double Rto() const { return m_rto; }
};
} // namespace gfwindow
"""


@pytest.fixture(scope="module")
def probe_class():  # type: ignore[no-untyped-def]
    import cppyy

    from simulator.packet.network import HostCosts, build
    from simulator.packet.runtime import load

    ns, _gf = load()
    if not hasattr(cppyy.gbl, "gfwindow"):
        cppyy.cppdef(_PROBE)
    net = build(tiny(1e9, 1e8, 1e-6, Port(rate_bps=1e8, queue_packets=64)), costs=HostCosts())
    made: list[object] = []

    def make(min_rto: float, initial_rto: float):  # type: ignore[no-untyped-def]
        p = cppyy.gbl.gfwindow.Probe(net.nodes["h1"], 40000 + len(made), 16, 10.0, 64.0, min_rto, initial_rto)
        made.append(p)
        return p

    yield make
    made.clear()
    ns.Simulator.Destroy()


@needs_ns3
def test_an_ecn_echo_cuts_by_half_the_share_marked_as_dctcp(probe_class) -> None:  # type: ignore[no-untyped-def]
    p = probe_class(0.001, 0.005)  # no RTT sample yet: a round trip is the initial RTO, 5 ms
    assert p.Alpha() == 1.0
    p.Marks(0.0, 10, 5)  # first move: alpha = 15/16 x 1 + 1/16 x 5/10
    assert p.Alpha() == pytest.approx(0.96875, abs=1e-12)
    p.Marks(0.001, 10, 10)  # 1 ms later, within the round trip: counted, alpha unchanged
    assert p.Alpha() == pytest.approx(0.96875, abs=1e-12)
    p.Marks(0.006, 10, 0)  # 6 ms after the move: 10 of the 20 since marked
    alpha = 15 / 16 * 0.96875 + 1 / 16 * 0.5  # 0.939453125
    assert p.Alpha() == pytest.approx(alpha, abs=1e-12)
    p.SetCwnd(20.0)
    assert p.Echo(0.01)
    assert p.Window() == pytest.approx(20.0 * (1 - alpha / 2), abs=1e-9)  # 10.60546875, not 10
    assert p.Ssthresh() == pytest.approx(10.60546875, abs=1e-9)
    assert not p.Echo(0.012)  # 2 ms later: within the round trip (the 5 ms RTO), no second cut
    assert p.Window() == pytest.approx(10.60546875, abs=1e-9)
    assert p.stats.windowCuts == 1


@needs_ns3
def test_few_marks_cut_little_and_loss_over_the_bound_halves(probe_class) -> None:  # type: ignore[no-untyped-def]
    p = probe_class(0.001, 0.005)
    alpha = 1.0
    for i in range(40):  # one packet in 100 marked, every 6 ms: one move each (round trip 5 ms)
        p.Marks(0.006 * i, 100, 1)
        alpha = 15 / 16 * alpha + 1 / 16 * 0.01
    assert p.Alpha() == pytest.approx(alpha, rel=1e-12)  # 0.0849: 0.01 + 0.99 x (15/16)^40
    p.SetCwnd(40.0)
    assert p.Echo(1.0)
    assert p.Window() == pytest.approx(40.0 * (1 - alpha / 2), rel=1e-9)  # 38.30, where halving gave 20
    assert p.Loss(1.006)
    assert p.Window() == pytest.approx(40.0 * (1 - alpha / 2) / 2, rel=1e-9)
    p.SetCwnd(3.0)
    assert p.Loss(1.012)
    assert p.Window() == 2.0  # never below two packets


@needs_ns3
def test_the_rto_has_the_hosts_floor_granularity_and_ceiling(probe_class) -> None:  # type: ignore[no-untyped-def]
    p = probe_class(0.01, 0.2)  # the hosts' 10 ms floor and 200 ms probe timeout before a sample
    assert p.Rto() == pytest.approx(0.2)
    p.Rtt(0.002)  # SRTT 2 ms, RTTVAR 1 ms: 2 + 4 = 6 ms, under the 10 ms floor
    assert p.Rto() == pytest.approx(0.01)
    p.Rtt(0.030)  # RTTVAR 0.75 + 7 = 7.75 ms, SRTT 1.75 + 3.75 = 5.5 ms: 5.5 + 31 = 36.5 ms
    assert p.Rto() == pytest.approx(0.0365, abs=1e-12)
    q = probe_class(0.0001, 0.005)
    for _ in range(50):  # a steady 0.5 ms: RTTVAR decays towards 0, the 1 ms granularity stays
        q.Rtt(0.0005)
    assert q.Rto() == pytest.approx(0.0015, abs=2e-5)
    r = probe_class(0.01, 0.2)
    r.Rtt(3.0)  # 3 s + 6 s: capped at the 2 s ceiling (SetReorder's max RTO)
    assert r.Rto() == pytest.approx(2.0)
