// gradfabric's transports as ns-3 endpoints, compiled at run time by cppyy:
//  * DlcpEndpoint: the bounded-loss DLCP transport of hosts/ (one UDP port per host):
//    messages of gradient packets sent under a congestion window (slow start, then additive
//    increase; halved at most once per round trip on an ECN echo or loss beyond the bound),
//    a probe after every chunk answered by a bitmap of that chunk, probes re-sent after an
//    RTO (RFC 6298 estimator, doubled per attempt), a last probe asking the receiver to
//    complete the message within its loss bound, and rounds of retransmission of what is
//    missing while the loss exceeds the bound. Values the receiver never got are zero-filled:
//    counted, not resent. A rank's CPU per packet and per message, where set, is charged on
//    its host's sending and receiving servers (gradfabric_host.h).
#pragma once

#include "gradfabric_dlcp_wire.h"
#include "gradfabric_host.h"
#include "gradfabric_ns3.h"

#include <cmath>
#include <cstring>
#include <utility>

namespace gradfabric
{
using namespace ns3;

class DlcpEndpoint
{
  public:
    // (message id, data packets retransmitted, values missing at completion)
    using SentFn = std::function<void(uint32_t, uint32_t, uint32_t)>;
    // (source address, message id, values, values missing)
    using ReceivedFn = std::function<void(uint32_t, uint32_t, uint32_t, uint32_t)>;

    DlcpEndpoint(Ptr<Node> node, uint16_t port, uint32_t chunk, double initialWindow, double maxWindow,
                 double minRto, double initialRto)
        : m_port(port),
          m_chunk(chunk),
          m_cwnd(initialWindow),
          m_maxWindow(maxWindow),
          m_minRto(minRto),
          m_rto(initialRto)
    {
        m_socket = Socket::CreateSocket(node, UdpSocketFactory::GetTypeId());
        m_socket->Bind(InetSocketAddress(Ipv4Address::GetAny(), port));
        m_socket->SetIpRecvTos(true);
        m_socket->SetRecvCallback(MakeCallback(&DlcpEndpoint::Receive, this));
        m_node = node;
        m_nodeId = node->GetId();
    }

    SentFn onSent;
    ReceivedFn onReceived;
    DlcpStats stats;

    // Queue a message of `values` float32 values to `destination`; `priority` is its switch
    // queue (TOS bits 7..5), `urgency` its place in this host's sending order (higher first,
    // then older first), `eligibleShare` of its packets are drop-eligible, `bound` is the
    // share of values the receiver may go without.
    void Send(uint32_t msg, uint32_t destination, uint32_t values, uint32_t priority, uint32_t urgency,
              double eligibleShare, double bound)
    {
        Out out;
        out.msg = msg;
        out.dst = destination;
        out.values = std::max<uint32_t>(values, 1);
        out.packets = (out.values + VALUES_PER_PACKET - 1) / VALUES_PER_PACKET;
        out.priority = priority;
        out.urgency = urgency;
        out.eligibleShare = std::max(0.0, std::min(1.0, eligibleShare));
        out.allowed = static_cast<uint32_t>(std::floor(bound * out.values));
        out.order = m_order++;
        HostCpu* cpu = HostCpuOf(m_nodeId);
        double wait = cpu && cpu->txMessage > 0 ? cpu->tx.Delay(cpu->txMessage) : 0.0; // the message's own work
        if (wait <= 0)
        {
            m_out[msg] = out;
            Pump();
            return;
        }
        Simulator::Schedule(Seconds(wait), [this, out]() { m_out[out.msg] = out; Pump(); });
    }

    double Window() const
    {
        return m_cwnd;
    }

    // On a sprayed fabric a probe may overtake data: then the last probe (complete within
    // the bound) goes alone, once every chunk is answered and `grace` (at least the SRTT)
    // has passed, so late data is not taken for lost. Negative: the last chunk's probe asks.
    void SetLastGrace(double grace)
    {
        m_lastGrace = grace;
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

  private:
    struct Chunk
    {
        uint32_t first;
        uint32_t count;
        uint32_t credit; // packets sent in the chunk
        uint32_t nonce;
        double sentAt;
        double rto;
        bool last;
        bool retransmission;
        EventId timer;
    };

    struct Out
    {
        uint32_t msg, dst, values, packets, priority, urgency, allowed;
        double eligibleShare;
        uint64_t order;
        uint32_t next = 0;          // next packet never sent
        std::deque<uint32_t> resend; // packets to send again (this round)
        std::set<uint32_t> missing;  // packets answered as missing
        std::map<uint32_t, Chunk> chunks; // unanswered chunks by nonce
        uint32_t retransmitted = 0;
        bool lastAsked = false;
        bool graceWait = false; // waiting to send the last probe alone
        bool graceDone = false;
        bool roundOver = false; // the last probe was answered: not complete
        bool complete = false;
    };

    struct In
    {
        std::vector<bool> got;
        uint32_t values = 0;
        uint32_t arrived = 0;
        uint32_t lost = 0;
        bool complete = false;
    };

    uint32_t ValuesIn(const Out& o, uint32_t seq) const
    {
        return seq + 1 < o.packets ? VALUES_PER_PACKET : o.values - VALUES_PER_PACKET * (o.packets - 1);
    }

    bool Eligible(const Out& o, uint32_t seq) const
    {
        return std::floor((seq + 1) * o.eligibleShare) > std::floor(seq * o.eligibleShare);
    }

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

    // Highest-priority message (then the oldest) with something to send.
    Out* NextToSend()
    {
        Out* best = nullptr;
        for (auto& [id, o] : m_out)
        {
            bool lastReady = !o.lastAsked && o.chunks.empty() && o.resend.empty() && o.next >= o.packets &&
                             (m_lastGrace < 0 || o.graceDone);
            bool has = !o.resend.empty() || o.next < o.packets || lastReady;
            if (!has || o.complete)
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
            size_t pending = o->resend.empty() ? o->packets - o->next : o->resend.size();
            if (m_burst > 0 && pending > 0) // data is paced; a last probe alone is not
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
            std::vector<uint32_t> seqs;
            bool retx = !o->resend.empty();
            while (seqs.size() < n && !o->resend.empty())
            {
                seqs.push_back(o->resend.front());
                o->resend.pop_front();
            }
            while (!retx && seqs.size() < n && o->next < o->packets)
            {
                seqs.push_back(o->next++);
            }
            for (uint32_t seq : seqs)
            {
                Wire w{W_DATA, 0, uint8_t(o->priority), 0, o->msg, seq, o->packets, 0, 0, 0, o->values};
                Emit(o->dst, w, sizeof(Wire) + 4 * ValuesIn(*o, seq), MakeTos(o->priority, Eligible(*o, seq), true));
                if (retx)
                {
                    stats.retransmitted++;
                    o->retransmitted++;
                    o->missing.erase(seq);
                }
                else
                {
                    stats.packets++;
                }
            }
            bool last = o->resend.empty() && o->next >= o->packets && (m_lastGrace < 0 || seqs.empty());
            uint32_t first = seqs.empty() ? 0 : *std::min_element(seqs.begin(), seqs.end());
            uint32_t last_seq = seqs.empty() ? 0 : *std::max_element(seqs.begin(), seqs.end());
            Chunk c{first, seqs.empty() ? 0 : last_seq - first + 1, uint32_t(seqs.size()), m_nonce++, NowSeconds(),
                    m_rto, last, retx, {}};
            m_inflight += seqs.size();
            o->lastAsked = o->lastAsked || last;
            o->chunks[c.nonce] = c;
            SendProbe(*o, o->chunks[c.nonce]);
        }
    }

    double PacingRate() const // see SetPacing
    {
        double gain = m_cwnd < m_ssthresh ? 2.0 : 1.25;
        return m_srtt < 0 ? m_maxRate : std::min(m_maxRate, std::max(200.0, gain * m_cwnd / std::max(m_srtt, 1e-4)));
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
        ct->second.rto = std::min(ct->second.rto * 2, 64 * m_minRto + 1.0);
        ct->second.sentAt = -1; // no RTT sample from a re-sent probe (Karn)
        SendProbe(it->second, ct->second);
    }

    void Answered(Out& o, const Wire& w)
    {
        auto ct = o.chunks.find(w.nonce);
        if (ct == o.chunks.end())
        {
            return; // a duplicate answer
        }
        Chunk c = ct->second;
        Simulator::Cancel(c.timer);
        o.chunks.erase(ct);
        m_inflight = m_inflight > c.credit ? m_inflight - c.credit : 0;
        if (c.sentAt >= 0)
        {
            double r = NowSeconds() - c.sentAt;
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
            m_rto = std::max(m_minRto, m_srtt + 4 * m_rttvar);
        }
        // The bitmap: packets of the chunk that did not arrive follow the header.
        uint32_t lostHere = (w.flags & F_COMPLETE) ? 0 : c.count - std::min(c.count, w.total);
        bool cut = w.aux > 0;
        if (w.aux > 0)
        {
            stats.ecnEchoes++;
        }
        if (lostHere > 0 && c.count > 0 && double(lostHere) / c.count > double(o.allowed) / o.values)
        {
            cut = true;
        }
        double now = NowSeconds();
        if (cut && now - m_lastCut > std::max(m_srtt, 0.0))
        {
            m_cwnd = std::max(2.0, m_cwnd / 2);
            m_ssthresh = m_cwnd;
            m_lastCut = now;
            stats.windowCuts++;
        }
        else if (!cut)
        {
            m_cwnd += m_cwnd < m_ssthresh ? c.count : double(c.count) / m_cwnd;
            m_cwnd = std::min(m_cwnd, m_maxWindow);
        }
        if (w.flags & F_COMPLETE)
        {
            Finish(o, w.total);
            return;
        }
        if (c.last)
        {
            o.roundOver = true;
            o.missing = std::set<uint32_t>(m_lastMissing.begin(), m_lastMissing.end());
        }
        if (o.roundOver && o.chunks.empty())
        {
            // Over the bound at the receiver: a new round with what is missing, then ask again.
            o.roundOver = false;
            o.resend.assign(o.missing.begin(), o.missing.end());
            o.lastAsked = false;
            o.graceDone = false;
        }
        MaybeGrace(o);
    }

    void MaybeGrace(Out& o)
    {
        if (m_lastGrace < 0 || o.lastAsked || o.graceWait || o.graceDone || !o.chunks.empty() ||
            !o.resend.empty() || o.next < o.packets)
        {
            return;
        }
        o.graceWait = true;
        uint32_t msg = o.msg;
        Simulator::Schedule(Seconds(std::max(m_lastGrace, std::max(m_srtt, 0.0))), [this, msg]() {
            auto it = m_out.find(msg);
            if (it != m_out.end())
            {
                it->second.graceWait = false;
                it->second.graceDone = true;
                Pump();
            }
        });
    }

    void Finish(Out& o, uint32_t missing)
    {
        for (auto& [nonce, c] : o.chunks)
        {
            Simulator::Cancel(c.timer);
            m_inflight = m_inflight > c.credit ? m_inflight - c.credit : 0;
        }
        o.complete = true;
        uint32_t msg = o.msg;
        uint32_t retx = o.retransmitted;
        m_out.erase(msg);
        if (onSent)
        {
            onSent(msg, retx, missing);
        }
    }

    void Receive(Ptr<Socket> socket)
    {
        Address from;
        while (Ptr<Packet> p = socket->RecvFrom(from))
        {
            uint32_t src = InetSocketAddress::ConvertFrom(from).GetIpv4().Get();
            SocketIpTosTag tag;
            uint8_t tos = p->PeekPacketTag(tag) ? tag.GetTos() : 0;
            std::vector<uint8_t> buf(p->GetSize());
            p->CopyData(buf.data(), buf.size());
            // Through the host's receiving server (gradfabric_host.h): data costs, the rest keeps order.
            HostCpu* cpu = HostCpuOf(m_nodeId);
            double wait = cpu ? cpu->rx.Delay(buf.size() > sizeof(Wire) && buf[0] == W_DATA ? cpu->rxPacket : 0.0) : 0.0;
            if (wait > 0)
            {
                Simulator::Schedule(Seconds(wait), [this, src, tos, buf]() { Handle(src, tos, buf); });
                continue;
            }
            Handle(src, tos, buf);
        }
    }

    void Handle(uint32_t src, uint8_t tos, const std::vector<uint8_t>& buf)
    {
        Wire w;
        std::memcpy(&w, buf.data(), sizeof(Wire));
        if (w.type == W_DATA)
        {
            In& in = m_in[{src, w.msg}];
            if (in.got.empty())
            {
                in.got.assign(w.count, false);
            }
            if (w.seq < in.got.size() && !in.got[w.seq])
            {
                in.got[w.seq] = true;
                in.arrived++;
            }
            in.values = w.values;
            if ((tos & 0x03) == 0x03)
            {
                m_ce[src]++;
            }
        }
        else if (w.type == W_PROBE)
        {
            AnswerProbe(src, w);
        }
        else if (w.type == W_BITMAP)
        {
            auto it = m_out.find(w.msg);
            m_lastMissing.clear();
            for (size_t off = sizeof(Wire); off + 4 <= buf.size(); off += 4)
            {
                uint32_t seq;
                std::memcpy(&seq, buf.data() + off, 4);
                m_lastMissing.push_back(seq);
            }
            if (it != m_out.end())
            {
                Answered(it->second, w);
            }
            Pump();
        }
    }

    void AnswerProbe(uint32_t src, const Wire& w)
    {
        In& in = m_in[{src, w.msg}];
        if (in.got.empty())
        {
            in.got.assign(w.total, false);
        }
        std::vector<uint32_t> missing;
        uint32_t arrived = 0;
        for (uint32_t s = w.seq; s < w.seq + w.count && s < in.got.size(); s++)
        {
            if (in.got[s])
            {
                arrived++;
            }
            else
            {
                missing.push_back(s);
            }
        }
        uint8_t flags = 0;
        uint32_t answerCount = arrived;
        if (in.complete)
        {
            flags = F_COMPLETE;
            answerCount = in.lost;
        }
        else if (w.flags & F_LAST)
        {
            // Values never received over the whole message (the last packet may be short).
            uint32_t lost = 0;
            for (uint32_t s = 0; s < in.got.size(); s++)
            {
                if (!in.got[s])
                {
                    lost += s + 1 < in.got.size() ? VALUES_PER_PACKET : w.values - VALUES_PER_PACKET * (w.total - 1);
                }
            }
            if (lost <= w.aux)
            {
                in.complete = true;
                in.lost = lost;
                answerCount = lost;
                flags = F_COMPLETE;
                stats.lostValues += lost;
                stats.receivedValues += w.values - lost;
                HostCpu* cpu = HostCpuOf(m_nodeId);
                double wait = cpu && cpu->rxMessage > 0 ? cpu->rx.Delay(cpu->rxMessage) : 0.0; // the message's own work
                if (onReceived && wait > 0)
                {
                    Simulator::Schedule(Seconds(wait), [this, src, w, lost]() { onReceived(src, w.msg, w.values, lost); });
                }
                else if (onReceived)
                {
                    onReceived(src, w.msg, w.values, lost);
                }
            }
            else
            {
                missing.clear(); // the whole message's missing packets, for a new round
                for (uint32_t s = 0; s < in.got.size(); s++)
                {
                    if (!in.got[s])
                    {
                        missing.push_back(s);
                    }
                }
            }
        }
        uint32_t ce = m_ce[src];
        m_ce[src] = 0;
        if (missing.size() > 360)
        {
            missing.resize(360);
        }
        Wire a{W_BITMAP, flags, w.priority, 0, w.msg, w.seq, w.count, answerCount, ce, w.nonce, w.values};
        std::vector<uint8_t> buf(sizeof(Wire) + 4 * missing.size());
        std::memcpy(buf.data(), &a, sizeof(Wire));
        if (!missing.empty())
        {
            std::memcpy(buf.data() + sizeof(Wire), missing.data(), 4 * missing.size());
        }
        Ptr<Packet> p = Create<Packet>(buf.data(), buf.size());
        SocketIpTosTag tag;
        tag.SetTos(MakeTos(w.priority, false, true));
        p->AddPacketTag(tag);
        m_socket->SendTo(p, 0, InetSocketAddress(Ipv4Address(src), m_port));
    }

    Ptr<Socket> m_socket;
    Ptr<Node> m_node;
    uint32_t m_nodeId;
    uint16_t m_port;
    uint32_t m_chunk;
    double m_cwnd;
    double m_ssthresh = 1e9;
    double m_maxWindow;
    double m_minRto;
    double m_rto;
    double m_srtt = -1;
    double m_rttvar = 0;
    double m_lastCut = -1e9;
    double m_lastGrace = -1;
    double m_inflight = 0;
    double m_burst = 0;
    double m_maxRate = 1e6;
    bool m_wholeBurst = false;
    double m_nextBurst = 0;
    bool m_pumpPending = false;
    uint32_t m_nonce = 1;
    uint64_t m_order = 0;
    std::map<uint32_t, Out> m_out;
    std::map<std::pair<uint32_t, uint32_t>, In> m_in;
    std::map<uint32_t, uint32_t> m_ce;
    std::vector<uint32_t> m_lastMissing;
};

} // namespace gradfabric
