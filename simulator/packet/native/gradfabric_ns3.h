// gradfabric's pieces of an ns-3 simulation, compiled at run time by cppyy (the ns3 wheel's
// bindings): the switch port's queue disc, ECMP routing with per-switch seeds, and the DLCP
// bounded-loss transport. Everything else is ns-3's own (links, IPv4, TCP, UDP, the engine).
//
// Packet classes travel in the IPv4 TOS byte, as on the fabric's hosts:
//   bits 7..5  priority (0 background .. 7 most urgent), one strict-priority band each;
//   bit  2     drop-eligible (a small-magnitude gradient packet within the loss bound);
//   bits 1..0  ECN (ECT(0) on DLCP packets, so a queue can mark instead of drop).
#pragma once

#include "ns3/core-module.h"
#include "ns3/internet-module.h"
#include "ns3/network-module.h"
#include "ns3/traffic-control-module.h"

#include <cmath>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <vector>

namespace gradfabric
{
using namespace ns3;

constexpr uint8_t TOS_ELIGIBLE = 0x04;
constexpr uint8_t TOS_ECT0 = 0x02;

inline uint8_t
MakeTos(uint32_t priority, bool eligible, bool ect)
{
    return static_cast<uint8_t>(((priority & 7) << 5) | (eligible ? TOS_ELIGIBLE : 0) | (ect ? TOS_ECT0 : 0));
}

// ---------------------------------------------------------------------------------------
// The CPU a software switch gets when it shares the machine's cores with the hosts: on for
// `on` seconds, then off (another process runs) for `off`, repeating, `phase` seconds into
// the first cycle at t = 0. While off the switch neither forwards (EcmpRouting) nor sends
// from its ports (PortQueueDisc), so what arrives meanwhile reaches the ports in a burst.
// `off` 0: always on (the default).
struct SwitchSchedule
{
    double on = 0;
    double off = 0;
    double phase = 0;

    bool Active() const
    {
        return off > 0 && on > 0;
    }

    // The start of the on period of the cycle `t` falls in (cycles start with their on period).
    double CycleStart(double t) const
    {
        double period = on + off;
        return std::floor((t + phase) / period) * period - phase;
    }

    // Seconds from `t` until the switch is on (0: on at `t`).
    double UntilOn(double t) const
    {
        if (!Active())
        {
            return 0;
        }
        double start = CycleStart(t);
        if (t < start) // rounding put `t` just before its cycle
        {
            return start - t;
        }
        return t < start + on ? 0.0 : start + on + off - t;
    }

    // When work of `cost` seconds of the switch's CPU, started at `t`, is done. Each pass moves
    // to the next cycle, so rounding cannot hold it in place.
    double Finish(double t, double cost) const
    {
        if (!Active())
        {
            return t + cost;
        }
        for (double start = CycleStart(t);; start += on + off)
        {
            t = std::max(t, start);
            if (t < start + on)
            {
                if (t + cost <= start + on)
                {
                    return t + cost;
                }
                cost -= start + on - t;
            }
        }
    }
};

// ---------------------------------------------------------------------------------------
// Switch port: strict priority over `bands` FIFOs of `limit` packets each. A drop-eligible
// packet is dropped on arrival once the depth reaches `dropThreshold`; an ECN-capable packet
// is marked once it reaches `ecnThreshold` (0 turns either off). The depth is the packet's
// own band, or the whole port with `portScope`.
class PortQueueDisc : public QueueDisc
{
  public:
    static TypeId GetTypeId()
    {
        static TypeId tid = TypeId("gradfabric::PortQueueDisc")
                                .SetParent<QueueDisc>()
                                .SetGroupName("TrafficControl")
                                .AddConstructor<PortQueueDisc>();
        return tid;
    }

    PortQueueDisc()
        : QueueDisc(QueueDiscSizePolicy::NO_LIMITS)
    {
    }

    void Configure(uint32_t bands, uint32_t limit, uint32_t dropThreshold, uint32_t ecnThreshold, bool portScope)
    {
        m_bands = bands;
        m_limit = limit;
        m_dropThreshold = dropThreshold;
        m_ecnThreshold = ecnThreshold;
        m_portScope = portScope;
    }

    // The switch's CPU (SwitchSchedule): while it is off the port sends nothing.
    void SetSchedule(double on, double off, double phase)
    {
        m_schedule = SwitchSchedule{on, off, phase};
    }

    // The port's clock as p4switch's traffic manager keeps it (traffic_manager.py, gf_switch.h):
    // a packet may leave at max(its enqueue time, the port's free time), the free time then
    // moves on by its service at `rateBps` (with the point-to-point header), and a packet whose
    // time came while the switch was off leaves as soon as it is on again: the backlog goes out
    // in a burst, the port loses none of its rate to the switch's waits. The device behind it
    // must be fast (network.py sets it): it carries what the clock releases. 0 turns it off.
    void SetPortClock(double rateBps)
    {
        m_clockBps = rateBps;
    }

    uint64_t overflowDrops = 0; // a full band
    uint64_t earlyDrops = 0;    // drop-eligible packets above the threshold
    uint64_t marks = 0;         // ECN marks
    uint64_t enqueued = 0;
    uint32_t maxDepth = 0;

  private:
    uint32_t Band(Ptr<QueueDiscItem> item) const
    {
        uint8_t tos = 0;
        item->GetUint8Value(QueueItem::IP_DSFIELD, tos);
        return std::min<uint32_t>(tos >> 5, m_bands - 1);
    }

    bool DoEnqueue(Ptr<QueueDiscItem> item) override
    {
        uint8_t tos = 0;
        item->GetUint8Value(QueueItem::IP_DSFIELD, tos);
        uint32_t band = std::min<uint32_t>(tos >> 5, m_bands - 1);
        uint32_t own = GetInternalQueue(band)->GetNPackets();
        uint32_t depth = m_portScope ? GetNPackets() : own;
        if (own >= m_limit)
        {
            overflowDrops++;
            DropBeforeEnqueue(item, "band full");
            return false;
        }
        if (m_dropThreshold > 0 && (tos & TOS_ELIGIBLE) && depth >= m_dropThreshold)
        {
            earlyDrops++;
            DropBeforeEnqueue(item, "drop-eligible above threshold");
            return false;
        }
        if (m_ecnThreshold > 0 && depth >= m_ecnThreshold && Mark(item, "ECN above threshold"))
        {
            marks++;
        }
        item->SetTimeStamp(Simulator::Now());
        GetInternalQueue(band)->Enqueue(item);
        enqueued++;
        maxDepth = std::max<uint32_t>(maxDepth, GetNPackets());
        return true;
    }

    // Run again `wait` seconds from now (one nanosecond past the rounded end, so the port is
    // on or the packet due when it resumes); one pending at a time.
    void ResumeIn(double wait)
    {
        if (!m_resumePending)
        {
            m_resumePending = true;
            Ptr<PortQueueDisc> self = this;
            Simulator::Schedule(NanoSeconds(std::llround(wait * 1e9) + 1), [self]() {
                self->m_resumePending = false;
                self->Run();
            });
        }
    }

    // With the port clock: the highest band's head once its time has come and the switch is on.
    Ptr<QueueDiscItem> DequeueClocked()
    {
        for (int32_t band = static_cast<int32_t>(m_bands) - 1; band >= 0; band--)
        {
            Ptr<const QueueDiscItem> head = GetInternalQueue(band)->Peek();
            if (!head)
            {
                continue;
            }
            double now = Simulator::Now().GetSeconds();
            double due = std::max(head->GetTimeStamp().GetSeconds(), m_freeAt);
            double at = std::max(now, due);
            at += m_schedule.Active() ? m_schedule.UntilOn(at) : 0.0;
            if (at > now + 1e-10)
            {
                ResumeIn(at - now);
                return nullptr;
            }
            Ptr<QueueDiscItem> item = GetInternalQueue(band)->Dequeue();
            m_freeAt = due + (item->GetSize() + 2) * 8.0 / m_clockBps; // + the PPP header
            return item;
        }
        return nullptr;
    }

    Ptr<QueueDiscItem> DoDequeue() override
    {
        if (m_clockBps > 0)
        {
            return DequeueClocked();
        }
        if (m_schedule.Active() && GetNPackets() > 0)
        {
            double wait = m_schedule.UntilOn(Simulator::Now().GetSeconds());
            if (wait > 0)
            {
                ResumeIn(wait);
                return nullptr;
            }
        }
        for (int32_t band = static_cast<int32_t>(m_bands) - 1; band >= 0; band--)
        {
            Ptr<QueueDiscItem> item = GetInternalQueue(band)->Dequeue();
            if (item)
            {
                return item;
            }
        }
        return nullptr;
    }

    bool CheckConfig() override
    {
        if (GetNQueueDiscClasses() > 0 || GetNPacketFilters() > 0 || m_bands == 0 || m_limit == 0)
        {
            return false;
        }
        if (GetNInternalQueues() == 0)
        {
            for (uint32_t i = 0; i < m_bands; i++)
            {
                auto q = CreateObject<DropTailQueue<QueueDiscItem>>();
                q->SetMaxSize(QueueSize(QueueSizeUnit::PACKETS, m_limit));
                AddInternalQueue(q);
            }
        }
        return GetNInternalQueues() == m_bands;
    }

    void InitializeParams() override
    {
    }

    SwitchSchedule m_schedule;
    bool m_resumePending = false;
    double m_clockBps = 0;
    double m_freeAt = 0;
    uint32_t m_bands = 8;
    uint32_t m_limit = 32;
    uint32_t m_dropThreshold = 0;
    uint32_t m_ecnThreshold = 0;
    bool m_portScope = false;
};

inline Ptr<PortQueueDisc>
InstallPortQueue(Ptr<NetDevice> device, uint32_t bands, uint32_t limit, uint32_t dropThreshold,
                 uint32_t ecnThreshold, bool portScope)
{
    Ptr<TrafficControlLayer> tc = device->GetNode()->GetObject<TrafficControlLayer>();
    Ptr<PortQueueDisc> qd = CreateObject<PortQueueDisc>();
    qd->Configure(bands, limit, dropThreshold, ecnThreshold, portScope);
    tc->DeleteRootQueueDiscOnDevice(device);
    tc->SetRootQueueDiscOnDevice(device, qd);
    return qd;
}

// ---------------------------------------------------------------------------------------
// ECMP over precomputed equal-cost next hops to every host address. Per flow: a hash of the
// 5-tuple and the switch's seed picks the next hop. Per packet (`spray`): a random next hop
// from the switch's own generator, for UDP packets to or from `sprayPort` (0: every packet).
class EcmpRouting : public Ipv4RoutingProtocol
{
  public:
    static TypeId GetTypeId()
    {
        static TypeId tid = TypeId("gradfabric::EcmpRouting")
                                .SetParent<Ipv4RoutingProtocol>()
                                .SetGroupName("Internet")
                                .AddConstructor<EcmpRouting>();
        return tid;
    }

    void Configure(uint64_t seed, bool spray, uint16_t sprayPort)
    {
        m_seed = seed;
        m_spray = spray;
        m_sprayPort = sprayPort;
        m_rng.seed(seed);
    }

    void AddRoute(uint32_t destination, uint32_t interface, uint32_t gateway)
    {
        m_routes[destination].push_back({interface, gateway});
    }

    // Host-side costs of the emulated fabric, none by default. `forwardCost`: a software
    // switch forwards one packet at a time: each packet it forwards takes that long of one
    // server, in arrival order, ahead of the egress queues; at most `backlog` packets wait
    // (beyond: dropped, counted in cpuDrops). `deliverLatency`: each packet delivered to this
    // node's own sockets arrives that much later (a receiving process's wake-up).
    void SetHostCosts(double forwardCost, uint32_t backlog, double deliverLatency)
    {
        m_forwardCost = Seconds(forwardCost);
        m_backlog = backlog;
        m_deliverLatency = Seconds(deliverLatency);
    }

    // The switch's CPU (SwitchSchedule): forwarding waits for an on period.
    void SetSchedule(double on, double off, double phase)
    {
        m_schedule = SwitchSchedule{on, off, phase};
    }

    uint64_t sprayed = 0;
    uint64_t cpuDrops = 0;
    uint32_t cpuMaxBacklog = 0;

    Ptr<Ipv4Route> RouteOutput(Ptr<Packet> p, const Ipv4Header& header, Ptr<NetDevice> oif,
                               Socket::SocketErrno& sockerr) override
    {
        Ptr<Ipv4Route> route = Pick(p, header);
        sockerr = route ? Socket::ERROR_NOTERROR : Socket::ERROR_NOROUTETOHOST;
        return route;
    }

    bool RouteInput(Ptr<const Packet> p, const Ipv4Header& header, Ptr<const NetDevice> idev,
                    const UnicastForwardCallback& ucb, const MulticastForwardCallback& mcb,
                    const LocalDeliverCallback& lcb, const ErrorCallback& ecb) override
    {
        uint32_t iif = m_ipv4->GetInterfaceForDevice(idev);
        if (m_ipv4->IsDestinationAddress(header.GetDestination(), iif))
        {
            if (lcb.IsNull())
            {
                return false;
            }
            if (m_deliverLatency.IsZero())
            {
                lcb(p, header, iif);
            }
            else
            {
                Simulator::Schedule(m_deliverLatency, [lcb, p, header, iif]() { lcb(p, header, iif); });
            }
            return true;
        }
        Ptr<Ipv4Route> route = Pick(p, header);
        if (!route)
        {
            ecb(p, header, Socket::ERROR_NOROUTETOHOST);
            return true;
        }
        if (m_forwardCost.IsZero() && !m_schedule.Active())
        {
            ucb(route, p, header);
            return true;
        }
        double now = Simulator::Now().GetSeconds();
        if (m_waiting > m_backlog) // one being forwarded and `backlog` waiting ahead of it
        {
            cpuDrops++;
            return true;
        }
        cpuMaxBacklog = std::max(cpuMaxBacklog, m_waiting);
        m_waiting++;
        m_busyUntil = m_schedule.Finish(std::max(m_busyUntil, now), m_forwardCost.GetSeconds());
        Ptr<EcmpRouting> self = this;
        Simulator::Schedule(NanoSeconds(static_cast<int64_t>(std::llround((m_busyUntil - now) * 1e9))),
                            [self, ucb, route, p, header]() {
                                self->m_waiting--;
                                ucb(route, p, header);
                            });
        return true;
    }

    void NotifyInterfaceUp(uint32_t) override
    {
    }

    void NotifyInterfaceDown(uint32_t) override
    {
    }

    void NotifyAddAddress(uint32_t, Ipv4InterfaceAddress) override
    {
    }

    void NotifyRemoveAddress(uint32_t, Ipv4InterfaceAddress) override
    {
    }

    void SetIpv4(Ptr<Ipv4> ipv4) override
    {
        m_ipv4 = ipv4;
    }

    void PrintRoutingTable(Ptr<OutputStreamWrapper> stream, Time::Unit) const override
    {
        for (const auto& [dest, hops] : m_routes)
        {
            *stream->GetStream() << Ipv4Address(dest) << ":";
            for (const auto& hop : hops)
            {
                *stream->GetStream() << " if" << hop.first;
            }
            *stream->GetStream() << "\n";
        }
    }

  private:
    static uint64_t Mix(uint64_t x)
    {
        x += 0x9e3779b97f4a7c15ULL;
        x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
        x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
        return x ^ (x >> 31);
    }

    Ptr<Ipv4Route> Pick(Ptr<const Packet> p, const Ipv4Header& header)
    {
        auto it = m_routes.find(header.GetDestination().Get());
        if (it == m_routes.end() || it->second.empty())
        {
            return nullptr;
        }
        const auto& hops = it->second;
        size_t choice = 0;
        if (hops.size() > 1)
        {
            uint16_t sport = 0;
            uint16_t dport = 0;
            uint8_t proto = header.GetProtocol();
            if (p && p->GetSize() >= 4 && (proto == 6 || proto == 17))
            {
                uint8_t ports[4];
                p->CopyData(ports, 4);
                sport = static_cast<uint16_t>((ports[0] << 8) | ports[1]);
                dport = static_cast<uint16_t>((ports[2] << 8) | ports[3]);
            }
            bool spray = m_spray && (m_sprayPort == 0 ||
                                     (proto == 17 && (sport == m_sprayPort || dport == m_sprayPort)));
            if (spray)
            {
                choice = std::uniform_int_distribution<size_t>(0, hops.size() - 1)(m_rng);
                sprayed++;
            }
            else
            {
                uint64_t key = Mix(m_seed ^ Mix((uint64_t(header.GetSource().Get()) << 32) |
                                                 header.GetDestination().Get()) ^
                                   Mix((uint64_t(proto) << 32) | (uint64_t(sport) << 16) | dport));
                choice = key % hops.size();
            }
        }
        uint32_t interface = hops[choice].first;
        Ptr<Ipv4Route> route = Create<Ipv4Route>();
        route->SetDestination(header.GetDestination());
        route->SetGateway(Ipv4Address(hops[choice].second));
        route->SetOutputDevice(m_ipv4->GetNetDevice(interface));
        route->SetSource(m_ipv4->GetAddress(interface, 0).GetLocal());
        return route;
    }

    Ptr<Ipv4> m_ipv4;
    std::map<uint32_t, std::vector<std::pair<uint32_t, uint32_t>>> m_routes;
    uint64_t m_seed = 0;
    bool m_spray = false;
    uint16_t m_sprayPort = 0;
    std::mt19937_64 m_rng;
    Time m_forwardCost;
    uint32_t m_backlog = 0;
    Time m_deliverLatency;
    double m_busyUntil = 0;
    uint32_t m_waiting = 0; // packets not yet forwarded (one in hand, the rest waiting)
    SwitchSchedule m_schedule;
};

inline Ptr<EcmpRouting>
InstallEcmpRouting(Ptr<Node> node, uint64_t seed, bool spray, uint16_t sprayPort)
{
    Ptr<EcmpRouting> routing = CreateObject<EcmpRouting>();
    routing->Configure(seed, spray, sprayPort);
    node->GetObject<Ipv4>()->SetRoutingProtocol(routing);
    return routing;
}

// ---------------------------------------------------------------------------------------
// A UDP sink that records each datagram's arrival time and the 32-bit sequence number its
// payload starts with; and a burst of such datagrams sent at once (the hand-checked tests).
class RecordingSink
{
  public:
    RecordingSink(Ptr<Node> node, uint16_t port)
    {
        m_socket = Socket::CreateSocket(node, UdpSocketFactory::GetTypeId());
        m_socket->Bind(InetSocketAddress(Ipv4Address::GetAny(), port));
        m_socket->SetIpRecvTos(true);
        m_socket->SetRecvCallback(MakeCallback(&RecordingSink::Receive, this));
    }

    std::vector<double> times;
    std::vector<uint32_t> sequences;
    std::vector<uint32_t> tos;

  private:
    void Receive(Ptr<Socket> socket)
    {
        Address from;
        while (Ptr<Packet> packet = socket->RecvFrom(from))
        {
            uint8_t head[4] = {0, 0, 0, 0};
            packet->CopyData(head, 4);
            SocketIpTosTag tag;
            tos.push_back(packet->PeekPacketTag(tag) ? tag.GetTos() : 0);
            times.push_back(Simulator::Now().GetSeconds());
            sequences.push_back((uint32_t(head[0]) << 24) | (uint32_t(head[1]) << 16) | (uint32_t(head[2]) << 8) |
                                head[3]);
        }
    }

    Ptr<Socket> m_socket;
};

inline void
SendBurstNow(Ptr<Node> node, uint32_t destination, uint16_t port, uint32_t count, uint32_t payloadBytes, uint8_t tos,
             uint32_t first)
{
    Ptr<Socket> socket = Socket::CreateSocket(node, UdpSocketFactory::GetTypeId());
    socket->Bind();
    socket->Connect(InetSocketAddress(Ipv4Address(destination), port));
    for (uint32_t i = first; i < first + count; i++)
    {
        std::vector<uint8_t> payload(std::max<uint32_t>(payloadBytes, 4), 0);
        payload[0] = uint8_t(i >> 24);
        payload[1] = uint8_t(i >> 16);
        payload[2] = uint8_t(i >> 8);
        payload[3] = uint8_t(i);
        Ptr<Packet> packet = Create<Packet>(payload.data(), payload.size());
        SocketIpTosTag tag;
        tag.SetTos(tos);
        packet->AddPacketTag(tag);
        socket->Send(packet);
    }
}

// `count` datagrams of `payloadBytes` from `node` at simulated time `at` (seconds), numbered
// from `first`.
inline void
SendBurst(Ptr<Node> node, uint32_t destination, uint16_t port, uint32_t count, uint32_t payloadBytes, uint8_t tos,
          double at, uint32_t first)
{
    Simulator::ScheduleWithContext(node->GetId(), Seconds(at), &SendBurstNow, node, destination, port, count,
                                   payloadBytes, tos, first);
}

inline void
ScheduleCall(double delaySeconds, std::function<void()> call)
{
    Simulator::Schedule(Seconds(delaySeconds), [call]() { call(); });
}

// Python callbacks by number: one dispatcher handed over once, then events carry a token
// (a new Python callable per event would cost a binding wrapper each).
inline std::function<void(uint64_t)>&
Dispatcher()
{
    static std::function<void(uint64_t)> dispatcher;
    return dispatcher;
}

inline void
SetDispatcher(std::function<void(uint64_t)> dispatcher)
{
    Dispatcher() = dispatcher;
}

inline void
ScheduleToken(double delaySeconds, uint64_t token)
{
    Simulator::Schedule(Seconds(delaySeconds), [token]() { Dispatcher()(token); });
}

inline double
NowSeconds()
{
    return Simulator::Now().GetSeconds();
}

} // namespace gradfabric
