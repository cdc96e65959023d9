// The receiving side of a DlcpEndpoint (gradfabric_transport.h), compiled at run time by
// cppyy, as hosts/receiver.py: a message completes once every packet arrived, or at a
// last-flagged probe once the values missing are within its bound; a probe is answered with
// the packets of its range that have not arrived and the CE marks seen since the last answer.
#pragma once

#include "gradfabric_dlcp_state.h"
#include "gradfabric_host.h"

#include <cstring>
#include <functional>

namespace gradfabric
{
using namespace ns3;

class DlcpReceiver
{
  public:
    // (source address, message id, values, values missing)
    using ReceivedFn = std::function<void(uint32_t, uint32_t, uint32_t, uint32_t)>;

    // `onReceived` and `stats` are the endpoint's (it outlives this).
    DlcpReceiver(uint32_t nodeId, uint16_t port, DlcpStats& stats, ReceivedFn& onReceived)
        : onReceived(onReceived),
          m_nodeId(nodeId),
          m_port(port),
          m_stats(stats)
    {
    }

    ReceivedFn& onReceived;

    void Data(uint32_t src, uint8_t tos, const Wire& w)
    {
        In& in = m_in[{src, w.msg}];
        if (in.got.empty())
        {
            in.got.assign(w.count, false);
        }
        in.values = w.values;
        if ((tos & 0x03) == 0x03)
        {
            m_ce[src]++;
        }
        if (w.seq < in.got.size() && !in.got[w.seq])
        {
            in.got[w.seq] = true;
            in.arrived++;
            if (in.arrived == in.got.size() && !in.complete)
            {
                Complete(in, src, w.msg, 0);
            }
        }
    }

    void Answer(Ptr<Socket> socket, uint32_t src, const Wire& w)
    {
        In& in = m_in[{src, w.msg}];
        if (in.got.empty())
        {
            in.got.assign(w.total, false);
            in.values = w.values;
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
        if (!in.complete && (w.flags & F_LAST))
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
                Complete(in, src, w.msg, lost);
            }
        }
        uint8_t flags = in.complete ? F_COMPLETE : 0;
        uint32_t answerCount = in.complete ? in.lost : arrived;
        uint32_t ce = m_ce[src];
        m_ce[src] = 0;
        if (missing.size() > MAX_MISSING)
        {
            missing.resize(MAX_MISSING);
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
        socket->SendTo(p, 0, InetSocketAddress(Ipv4Address(src), m_port));
    }

  private:
    struct In
    {
        std::vector<bool> got;
        uint32_t values = 0;
        uint32_t arrived = 0;
        uint32_t lost = 0;
        bool complete = false;
    };

    void Complete(In& in, uint32_t src, uint32_t msg, uint32_t lost)
    {
        in.complete = true;
        in.lost = lost;
        m_stats.lostValues += lost;
        m_stats.receivedValues += in.values - lost;
        HostCpu* cpu = HostCpuOf(m_nodeId);
        double wait = cpu && cpu->rxMessage > 0 ? cpu->rx.Delay(cpu->rxMessage) : 0.0; // the message's own work
        uint32_t values = in.values;
        if (onReceived && wait > 0)
        {
            ReceivedFn fn = onReceived;
            Simulator::Schedule(Seconds(wait), [fn, src, msg, values, lost]() { fn(src, msg, values, lost); });
        }
        else if (onReceived)
        {
            onReceived(src, msg, values, lost);
        }
    }

    uint32_t m_nodeId;
    uint16_t m_port;
    DlcpStats& m_stats;
    std::map<std::pair<uint32_t, uint32_t>, In> m_in;
    std::map<uint32_t, uint32_t> m_ce;
};

} // namespace gradfabric
