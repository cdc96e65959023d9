// gradfabric's TCP endpoints on ns-3's TCP, compiled at run time by cppyy: a one-way
// connection carrying a stream of messages (gloo's transport), and short request/response
// connections (the experiment's `rr` background).
#pragma once

#include "gradfabric_host.h"
#include "gradfabric_ns3.h"

namespace gradfabric
{
using namespace ns3;

// ---------------------------------------------------------------------------------------
// One-way TCP connection carrying messages back to back; the receiver calls `onReceived`
// (message id) as each message's last byte arrives. Where the hosts' CPU is set
// (gradfabric_host.h), the sender writes at most SEGMENTS_PER_WRITE segments at a time, each
// write once the sending server has done its segments' work, and a message is delivered once
// the receiving server has done the work of what was read up to its last byte (per byte).
class TcpPipe
{
  public:
    using ReceivedFn = std::function<void(uint32_t)>;

    static constexpr uint32_t SEGMENT_BYTES = 1448;
    static constexpr uint32_t SEGMENTS_PER_WRITE = 16;

    TcpPipe(Ptr<Node> from, Ptr<Node> to, uint32_t toAddress, uint16_t port, uint8_t tos, double start)
        : m_from(from->GetId()),
          m_to(to->GetId())
    {
        m_listen = Socket::CreateSocket(to, TcpSocketFactory::GetTypeId());
        m_listen->Bind(InetSocketAddress(Ipv4Address::GetAny(), port));
        m_listen->Listen();
        m_listen->SetAcceptCallback(MakeNullCallback<bool, Ptr<Socket>, const Address&>(),
                                    MakeCallback(&TcpPipe::Accepted, this));
        m_socket = Socket::CreateSocket(from, TcpSocketFactory::GetTypeId());
        m_socket->SetIpTos(tos);
        m_socket->Bind();
        m_socket->SetSendCallback(MakeCallback(&TcpPipe::Writable, this));
        m_socket->SetConnectCallback(MakeCallback(&TcpPipe::Connected, this),
                                     MakeCallback(&TcpPipe::Failed, this));
        Ptr<Socket> s = m_socket;
        InetSocketAddress peer(Ipv4Address(toAddress), port);
        Simulator::ScheduleWithContext(from->GetId(), Seconds(start), [s, peer]() { s->Connect(peer); });
    }

    ReceivedFn onReceived;
    uint64_t bytesSent = 0;
    uint64_t bytesReceived = 0;

    void Send(uint32_t msg, uint64_t bytes)
    {
        HostCpu* cpu = HostCpuOf(m_from);
        if (cpu && cpu->txMessage > 0)
        {
            cpu->tx.Delay(cpu->txMessage); // the message's own work, ahead of its segments
        }
        m_queue.push_back({msg, std::max<uint64_t>(bytes, 1)});
        m_sizes.push_back({msg, std::max<uint64_t>(bytes, 1)});
        Writable(m_socket, 0);
    }

  private:
    void Connected(Ptr<Socket>)
    {
        m_connected = true;
        Writable(m_socket, 0);
    }

    void Failed(Ptr<Socket>)
    {
        NS_FATAL_ERROR("gradfabric TcpPipe: connection failed");
    }

    void Accepted(Ptr<Socket> s, const Address&)
    {
        m_peer = s;
        s->SetRecvCallback(MakeCallback(&TcpPipe::Readable, this));
    }

    void Writable(Ptr<Socket>, uint32_t)
    {
        if (!m_connected)
        {
            return;
        }
        HostCpu* cpu = HostCpuOf(m_from);
        while (!m_queue.empty())
        {
            uint32_t room = m_socket->GetTxAvailable();
            room = room > m_writing ? room - m_writing : 0; // less what waits for the CPU
            if (room == 0)
            {
                return;
            }
            auto& [msg, left] = m_queue.front();
            uint32_t n = static_cast<uint32_t>(std::min<uint64_t>(left, room));
            if (cpu && (cpu->txPacket > 0 || cpu->txMessage > 0))
            {
                n = std::min(n, SEGMENTS_PER_WRITE * SEGMENT_BYTES);
                double wait = cpu->tx.Delay(cpu->txPacket * ((n + SEGMENT_BYTES - 1) / SEGMENT_BYTES));
                m_writing += n;
                Simulator::Schedule(Seconds(wait), [this, n]() {
                    m_writing -= n;
                    NS_ABORT_MSG_IF(m_socket->Send(Create<Packet>(n)) != int(n), "TcpPipe: reserved room refused");
                    Writable(m_socket, 0);
                });
                left -= n;
                bytesSent += n;
                if (left == 0)
                {
                    m_queue.pop_front();
                }
                continue;
            }
            int sent = m_socket->Send(Create<Packet>(n));
            if (sent <= 0)
            {
                return;
            }
            left -= sent;
            bytesSent += sent;
            if (left == 0)
            {
                m_queue.pop_front();
            }
        }
    }

    void Readable(Ptr<Socket> s)
    {
        HostCpu* cpu = HostCpuOf(m_to);
        while (Ptr<Packet> p = s->Recv())
        {
            uint64_t n = p->GetSize();
            bytesReceived += n;
            m_have += n;
            double wait = cpu ? cpu->rx.Delay(cpu->rxPacket * double(n) / SEGMENT_BYTES) : 0.0; // this read's work
            while (!m_sizes.empty() && m_have >= m_sizes.front().second)
            {
                m_have -= m_sizes.front().second;
                uint32_t msg = m_sizes.front().first;
                m_sizes.pop_front();
                if (cpu && cpu->rxMessage > 0)
                {
                    wait = cpu->rx.Delay(cpu->rxMessage);
                }
                if (onReceived && wait > 0)
                {
                    Simulator::Schedule(Seconds(wait), [this, msg]() { onReceived(msg); });
                }
                else if (onReceived)
                {
                    onReceived(msg);
                }
            }
        }
    }

    Ptr<Socket> m_listen;
    Ptr<Socket> m_socket;
    Ptr<Socket> m_peer;
    bool m_connected = false;
    std::deque<std::pair<uint32_t, uint64_t>> m_queue; // sender: bytes left per message
    std::deque<std::pair<uint32_t, uint64_t>> m_sizes; // receiver: message boundaries
    uint64_t m_have = 0;
    uint32_t m_from;
    uint32_t m_to;
    uint32_t m_writing = 0; // bytes whose write waits for the sending server
};

// ---------------------------------------------------------------------------------------
// Short request/response connections (the experiment's `rr` background): every `interval`
// the client opens a new TCP connection, sends `request` bytes, and the server answers with
// `response` bytes; `fct` holds each completed exchange's time from connect to last byte.
class RrFlow
{
  public:
    RrFlow(Ptr<Node> client, Ptr<Node> server, uint32_t serverAddress, uint16_t port, uint32_t request,
           uint32_t response, double interval, double start, double stop)
        : m_client(client),
          m_peer(Ipv4Address(serverAddress), port),
          m_request(request),
          m_response(response),
          m_interval(interval),
          m_stop(stop)
    {
        m_listen = Socket::CreateSocket(server, TcpSocketFactory::GetTypeId());
        m_listen->Bind(InetSocketAddress(Ipv4Address::GetAny(), port));
        m_listen->Listen();
        m_listen->SetAcceptCallback(MakeNullCallback<bool, Ptr<Socket>, const Address&>(),
                                    MakeCallback(&RrFlow::Accepted, this));
        Simulator::ScheduleWithContext(client->GetId(), Seconds(start), &RrFlow::Open, this);
    }

    std::vector<double> fct;
    uint32_t started = 0;

  private:
    void Open()
    {
        if (Simulator::Now().GetSeconds() >= m_stop)
        {
            return;
        }
        Ptr<Socket> s = Socket::CreateSocket(m_client, TcpSocketFactory::GetTypeId());
        s->Bind();
        s->SetConnectCallback(MakeCallback(&RrFlow::Connected, this), MakeCallback(&RrFlow::Refused, this));
        s->SetRecvCallback(MakeCallback(&RrFlow::ClientRead, this));
        m_open[PeekPointer(s)] = {Simulator::Now().GetSeconds(), 0};
        m_sockets.push_back(s);
        s->Connect(m_peer);
        started++;
        Simulator::Schedule(Seconds(m_interval), &RrFlow::Open, this);
    }

    void Connected(Ptr<Socket> s)
    {
        s->Send(Create<Packet>(m_request));
    }

    void Refused(Ptr<Socket>)
    {
    }

    void ClientRead(Ptr<Socket> s)
    {
        auto& [t0, got] = m_open[PeekPointer(s)];
        while (Ptr<Packet> p = s->Recv())
        {
            got += p->GetSize();
        }
        if (got >= m_response && t0 >= 0)
        {
            fct.push_back(Simulator::Now().GetSeconds() - t0);
            t0 = -1;
            s->Close();
        }
    }

    void Accepted(Ptr<Socket> s, const Address&)
    {
        m_served[PeekPointer(s)] = 0;
        m_sockets.push_back(s);
        s->SetRecvCallback(MakeCallback(&RrFlow::ServerRead, this));
    }

    void ServerRead(Ptr<Socket> s)
    {
        uint32_t& got = m_served[PeekPointer(s)];
        bool before = got >= m_request;
        while (Ptr<Packet> p = s->Recv())
        {
            got += p->GetSize();
        }
        if (!before && got >= m_request)
        {
            s->Send(Create<Packet>(m_response));
            s->Close();
        }
    }

    Ptr<Node> m_client;
    InetSocketAddress m_peer;
    uint32_t m_request;
    uint32_t m_response;
    double m_interval;
    double m_stop;
    Ptr<Socket> m_listen;
    std::vector<Ptr<Socket>> m_sockets;
    std::map<Socket*, std::pair<double, uint32_t>> m_open;
    std::map<Socket*, uint32_t> m_served;
};

} // namespace gradfabric
