// The sending mechanics of a DlcpEndpoint (gradfabric_transport.h), compiled at run time by
// cppyy: its socket and window, chunks of data each followed by its probe, probe timeouts and
// the RTT estimator, the pacer. What an answer means is the endpoint's.
#pragma once

#include "gradfabric_dlcp_state.h"
#include "gradfabric_host.h"

#include <cstring>
#include <utility>

namespace gradfabric
{
using namespace ns3;

class DlcpSenderBase
{
  public:
    DlcpSenderBase(Ptr<Node> node, uint16_t port, uint32_t chunk, double initialWindow, double maxWindow,
                   double minRto, double initialRto)
        : m_node(node),
          m_nodeId(node->GetId()),
          m_port(port),
          m_chunk(chunk),
          m_cwnd(initialWindow),
          m_maxWindow(maxWindow),
          m_minRto(minRto),
          m_rto(initialRto)
    {
        m_socket = Socket::CreateSocket(node, UdpSocketFactory::GetTypeId());
        m_socket->Bind(InetSocketAddress(Ipv4Address::GetAny(), port));
        m_socket->SetIpRecvTos(true);
    }

    DlcpStats stats;

    double Window() const
    {
        return m_cwnd;
    }

    double Alpha() const // DCTCP's estimate of the share of packets marked
    {
        return m_alpha;
    }

    // Pacing as the fabric's hosts do (hosts/pacing.py): bursts every `burst` s of max(1, rate x
    // burst) packets, rate = gain x cwnd / SRTT (gain 2 in slow start, else 1.25; `maxRate` before
    // an RTT sample; within [200, maxRate] pkt/s). `wholeBurst`: a chunk is charged a whole burst
    // (the hosts' pacer until 2026-11-26). burst 0: no pacing (the default).
    void SetPacing(double burst, double maxRate, bool wholeBurst)
    {
        m_burst = burst;
        m_maxRate = maxRate;
        m_wholeBurst = wholeBurst;
    }

  protected:
    using Chunk = DlcpChunk;
    using Out = DlcpOut;

    void Emit(uint32_t dst, const Wire& w, uint32_t payloadBytes, uint8_t tos)
    {
        std::vector<uint8_t> buf(std::max<uint32_t>(payloadBytes, sizeof(Wire)), 0);
        std::memcpy(buf.data(), &w, sizeof(Wire));
        Ptr<Packet> p = Create<Packet>(buf.data(), buf.size());
        SocketIpTosTag tag;
        tag.SetTos(tos);
        p->AddPacketTag(tag);
        InetSocketAddress to(Ipv4Address(dst), m_port);
        // Through the host's sending server (gradfabric_host.h): data costs, probes keep order.
        HostCpu* cpu = HostCpuOf(m_nodeId);
        double wait = cpu ? cpu->tx.Delay(w.type == W_DATA ? cpu->txPacket : 0.0) : 0.0;
        if (wait <= 0)
        {
            m_socket->SendTo(p, 0, to);
            return;
        }
        Ptr<Socket> s = m_socket;
        Simulator::Schedule(Seconds(wait), [s, p, to]() { s->SendTo(p, 0, to); });
    }

    // Highest-priority message (then the oldest) with data to send.
    Out* NextToSend()
    {
        Out* best = nullptr;
        for (auto& [id, o] : m_out)
        {
            if (o.complete || (o.resend.empty() && o.next >= o.packets))
            {
                continue;
            }
            if (!best || o.urgency > best->urgency || (o.urgency == best->urgency && o.order < best->order))
            {
                best = &o;
            }
        }
        return best;
    }

    void Pump()
    {
        while (m_inflight < m_cwnd)
        {
            Out* o = NextToSend();
            if (!o)
            {
                return;
            }
            uint32_t room = static_cast<uint32_t>(std::max(1.0, m_cwnd - m_inflight));
            uint32_t n = std::min<uint32_t>(room, m_chunk);
            size_t pending = o->resend.size() + (o->packets - o->next);
            if (m_burst > 0)
            {
                double now = NowSeconds();
                if (now + 1e-9 < m_nextBurst) // the clock counts nanoseconds: due within one is due
                {
                    if (!std::exchange(m_pumpPending, true))
                    {
                        Simulator::Schedule(NanoSeconds(std::ceil((m_nextBurst - now) * 1e9)),
                                            [this]() { m_pumpPending = false; Pump(); });
                    }
                    return;
                }
                if (now - m_nextBurst > m_burst)
                {
                    m_nextBurst = now; // idle time earns no credit
                }
                double rate = PacingRate();
                auto allowed = static_cast<uint32_t>(std::max(1.0, std::floor(rate * m_burst)));
                n = std::min(n, allowed);
                uint32_t charged = m_wholeBurst ? allowed : std::min<uint32_t>(n, pending);
                m_nextBurst += charged / rate;
            }
            // Resends first (hosts/sender.py puts them ahead), then new packets; one answer
            // (MAX_MISSING packets) covers the chunk's range.
            std::vector<uint32_t> seqs;
            uint32_t lo = UINT32_MAX, hi = 0;
            auto fits = [&](uint32_t s) { return std::max(hi, s) - std::min(lo, s) < MAX_MISSING; };
            while (seqs.size() < n && !o->resend.empty() && fits(o->resend.front()))
            {
                uint32_t s = o->resend.front();
                o->resend.pop_front();
                seqs.push_back(s);
                lo = std::min(lo, s);
                hi = std::max(hi, s);
            }
            while (seqs.size() < n && o->next < o->packets && fits(o->next))
            {
                seqs.push_back(o->next++);
                lo = std::min(lo, seqs.back());
                hi = std::max(hi, seqs.back());
            }
            for (uint32_t seq : seqs)
            {
                Wire w{W_DATA, 0, uint8_t(o->priority), 0, o->msg, seq, o->packets, 0, 0, 0, o->values};
                Emit(o->dst, w, sizeof(Wire) + 4 * o->ValuesIn(seq), MakeTos(o->priority, o->Eligible(seq), true));
                if (o->sends[seq]++ > 0)
                {
                    stats.retransmitted++;
                    o->retransmitted++;
                }
                else
                {
                    stats.packets++;
                }
                o->queued[seq] = 0;
            }
            Chunk c;
            c.first = lo;
            c.count = hi - lo + 1;
            c.seqs = std::move(seqs);
            // Unsprayed, the last chunk's probe asks to complete; sprayed, Decide asks once
            // every chunk is answered (a probe may overtake data on another path).
            c.last = m_lastGrace < 0 && o->resend.empty() && o->next >= o->packets;
            m_inflight += c.seqs.size();
            o->lastSent = NowSeconds();
            Open(*o, std::move(c));
        }
    }

    double PacingRate() const // see SetPacing
    {
        double gain = m_cwnd < m_ssthresh ? 2.0 : 1.25;
        return m_srtt < 0 ? m_maxRate : std::min(m_maxRate, std::max(200.0, gain * m_cwnd / std::max(m_srtt, 1e-4)));
    }

    void Open(Out& o, Chunk c)
    {
        c.nonce = m_nonce++;
        c.sentAt = NowSeconds();
        c.rto = m_rto;
        uint32_t nonce = c.nonce;
        o.chunks[nonce] = std::move(c);
        SendProbe(o, o.chunks[nonce]);
    }

    void SendProbe(Out& o, Chunk& c)
    {
        Wire w{W_PROBE, uint8_t(c.last ? F_LAST : 0), uint8_t(o.priority), 0, o.msg, c.first, c.count,
               o.packets, o.allowed, c.nonce, o.values};
        Emit(o.dst, w, sizeof(Wire), MakeTos(o.priority, false, true));
        stats.probes++;
        uint32_t msg = o.msg;
        uint32_t nonce = c.nonce;
        c.timer = Simulator::Schedule(Seconds(c.rto), [this, msg, nonce]() { ProbeTimeout(msg, nonce); });
    }

    void ProbeTimeout(uint32_t msg, uint32_t nonce)
    {
        auto it = m_out.find(msg);
        if (it == m_out.end())
        {
            return;
        }
        auto ct = it->second.chunks.find(nonce);
        if (ct == it->second.chunks.end())
        {
            return;
        }
        stats.probeTimeouts++;
        ct->second.rto = std::min(ct->second.rto * 2, std::max(m_maxRto, m_minRto)); // hosts' back-off
        ct->second.sentAt = -1; // no RTT sample from a re-sent probe (Karn)
        SendProbe(it->second, ct->second);
    }

    // The window to `beta` of itself (loss over the bound: half), at most once per round trip
    // (the SRTT, the RTO before a sample), as hosts/pacing.py's Window.on_congestion.
    bool Cut(double now, double beta = 0.5)
    {
        if (now - m_lastCut < (m_srtt < 0 ? m_rto : m_srtt))
        {
            return false;
        }
        m_ssthresh = std::max(2.0, m_cwnd * beta);
        m_cwnd = m_ssthresh;
        m_lastCut = now;
        stats.windowCuts++;
        return true;
    }

    // DCTCP (RFC 8257), as hosts/pacing.py's Window: `acked` data packets answered, `marked` of
    // them by an answer with an ECN echo; once per round trip alpha moves towards the share
    // marked since its last move, by the gain 1/16.
    void OnMarks(double now, uint32_t acked, uint32_t marked)
    {
        m_acked += acked;
        m_marked += marked;
        if (now - m_alphaAt >= (m_srtt < 0 ? m_rto : m_srtt) && m_acked > 0)
        {
            double share = std::min(1.0, double(m_marked) / double(m_acked));
            m_alpha = (1 - ECN_GAIN) * m_alpha + ECN_GAIN * share;
            m_acked = m_marked = 0;
            m_alphaAt = now;
        }
    }

    bool EcnCut(double now) // an ECN echo: the window cut by alpha / 2 (DCTCP)
    {
        return Cut(now, 1.0 - m_alpha / 2);
    }

    // Packets an answer showed missing arrived without a resend: the path reorders, so the next
    // REORDER_PERSIST losses over a bound cut only once confirmed (hosts/pacing.py's Window).
    void SawReordering()
    {
        m_reorderCredit = REORDER_PERSIST;
    }

    // Whether loss shown over a bound waits for its confirmation before cutting (the path was
    // seen to reorder); counts the episode in `deferred`.
    bool DeferCut()
    {
        if (m_reorderCredit == 0)
        {
            return false;
        }
        stats.deferred++;
        return true;
    }

    void LossConfirmed() // a loss over a bound was confirmed: one reordering credit less
    {
        m_reorderCredit -= m_reorderCredit > 0 ? 1 : 0;
    }

    void Sample(double r) // an RTT sample (RFC 6298)
    {
        if (m_srtt < 0)
        {
            m_srtt = r;
            m_rttvar = r / 2;
        }
        else
        {
            m_rttvar = 0.75 * m_rttvar + 0.25 * std::fabs(m_srtt - r);
            m_srtt = 0.875 * m_srtt + 0.125 * r;
        }
        m_rto = std::min(m_maxRto, std::max(m_minRto, m_srtt + std::max(RTO_GRANULARITY, 4 * m_rttvar)));
    }

    static constexpr double ECN_GAIN = 1.0 / 16;
    static constexpr double RTO_GRANULARITY = 0.001; // hosts/pacing.py's RttEstimator.granularity

    Ptr<Node> m_node;
    uint32_t m_nodeId;
    uint16_t m_port;
    Ptr<Socket> m_socket;
    uint32_t m_chunk;
    double m_cwnd;
    double m_ssthresh = 1e9;
    double m_maxWindow;
    double m_minRto;
    double m_rto;
    double m_srtt = -1;
    double m_rttvar = 0;
    double m_lastCut = -1e9;
    double m_alpha = 1.0; // DCTCP's estimate of the share marked (OnMarks)
    double m_alphaAt = -1e9;
    uint32_t m_reorderCredit = 0; // loss episodes left whose cut waits for a confirmation
    uint64_t m_acked = 0, m_marked = 0;
    double m_lastGrace = -1;
    double m_confirmGrace = 0.005;
    uint32_t m_maxConfirms = 20;
    double m_maxRto = 2.0;
    double m_inflight = 0;
    double m_burst = 0;
    double m_maxRate = 1e6;
    bool m_wholeBurst = false;
    double m_nextBurst = 0;
    bool m_pumpPending = false;
    uint32_t m_nonce = 1;
    uint64_t m_order = 0;
    std::map<uint32_t, Out> m_out;
};

} // namespace gradfabric
