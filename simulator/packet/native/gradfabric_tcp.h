// gradfabric's TCP endpoints on ns-3's TCP, compiled at run time by cppyy: a one-way
// connection carrying a stream of messages (gloo's transport), and short request/response
// connections (the experiment's `rr` background).
#pragma once

#include "gradfabric_ns3.h"

namespace gradfabric
{
using namespace ns3;

// ---------------------------------------------------------------------------------------
// One-way TCP connection carrying messages back to back; the receiver calls `onReceived`
// (message id) as each message's last byte arrives.
class TcpPipe
{
  public:
    using ReceivedFn = std::function<void(uint32_t)>;

    TcpPipe(Ptr<Node> from, Ptr<Node> to, uint32_t toAddress, uint16_t port, uint8_t tos, double start)
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
        while (!m_queue.empty())
        {
            uint32_t room = m_socket->GetTxAvailable();
            if (room == 0)
            {
                return;
            }
            auto& [msg, left] = m_queue.front();
            uint32_t n = static_cast<uint32_t>(std::min<uint64_t>(left, room));
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
        while (Ptr<Packet> p = s->Recv())
        {
            uint64_t n = p->GetSize();
            bytesReceived += n;
            m_have += n;
            while (!m_sizes.empty() && m_have >= m_sizes.front().second)
            {
                m_have -= m_sizes.front().second;
                uint32_t msg = m_sizes.front().first;
                m_sizes.pop_front();
                if (onReceived)
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
