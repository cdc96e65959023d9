// The CPU a rank's transport spends on its host, compiled at run time by cppyy: each host has
// one sending and one receiving server (the fabric's ranks send and receive in their own
// threads); each packet a rank's transport sends or takes in waits, in order, for the
// server's earlier work, then costs the server its own. Costs are seconds of wall time, the
// CPU time already divided by the share of a CPU the rank's threads get when they can run
// (simulator/packet/host_cpu.py). No costs set: nothing waits (the default).
#pragma once

#include "gradfabric_ns3.h"

namespace gradfabric
{
using namespace ns3;

// One FIFO server: work queued behind what is already waiting.
class CpuServer
{
  public:
    // Seconds from now until work of `cost` seconds, queued now, is done.
    double Delay(double cost)
    {
        double now = Simulator::Now().GetSeconds();
        m_busyUntil = std::max(m_busyUntil, now) + cost;
        busy += cost;
        return m_busyUntil - now;
    }

    double busy = 0; // seconds of work taken
  private:
    double m_busyUntil = 0;
};

struct HostCpu
{
    double txPacket = 0;  // per data packet (or 1,448-byte segment) sent
    double rxPacket = 0;  // per data packet (or segment) received
    double txMessage = 0; // per message sent
    double rxMessage = 0; // per message received
    CpuServer tx;
    CpuServer rx;
};

inline std::map<uint32_t, HostCpu>&
HostCpus()
{
    static std::map<uint32_t, HostCpu> hosts;
    return hosts;
}

// Costs of the rank's transport on node `node` (its id); a new network clears them all.
inline void
SetHostCpu(uint32_t node, double txPacket, double rxPacket, double txMessage, double rxMessage)
{
    HostCpu& h = HostCpus()[node];
    h.txPacket = txPacket;
    h.rxPacket = rxPacket;
    h.txMessage = txMessage;
    h.rxMessage = rxMessage;
}

inline void
ClearHostCpus()
{
    HostCpus().clear();
}

// The node's costs, or null where none were set (nothing to wait for).
inline HostCpu*
HostCpuOf(uint32_t node)
{
    auto it = HostCpus().find(node);
    return it == HostCpus().end() ? nullptr : &it->second;
}

// Seconds of work the node's sending (`tx`) or receiving server took in the run.
inline double
HostCpuBusy(uint32_t node, bool tx)
{
    HostCpu* h = HostCpuOf(node);
    return h ? (tx ? h->tx.busy : h->rx.busy) : 0.0;
}

} // namespace gradfabric
