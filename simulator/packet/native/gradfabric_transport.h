// gradfabric's transports as ns-3 endpoints, compiled at run time by cppyy:
//  * DlcpEndpoint: the bounded-loss DLCP transport of hosts/ (one UDP port per host), as
//    hosts/sender.py and hosts/receiver.py run it: messages of gradient packets sent under a
//    congestion window (slow start, then additive increase), a probe after every chunk
//    answered by a bitmap of its range, probes re-sent after an RTO (RFC 6298 estimator,
//    doubled per attempt). Late is not lost: the window is cut (at most once per round trip)
//    on an ECN echo (by alpha / 2, alpha the share of packets marked, as DCTCP) or by half
//    once the loss answers showed this round exceeds the bound, and that cut is taken back when the packets arrive after all
//    (once the path was seen to reorder, the next REORDER_PERSIST such losses cut only when a
//    confirmation shows them: `deferred`); packets shown missing are resent
//    only after a confirming probe a reorder grace later still shows them missing (the
//    fewest that bring the loss within the bound), or, every chunk answered and over the
//    bound, after confirmations that stop improving. Within the bound a last-flagged probe,
//    an allowance (SRTT, at least the grace) after the data, asks the receiver to complete;
//    it completes by itself once every packet arrived. Values the receiver never got are
//    zero-filled: counted, not resent. A rank's CPU per packet and per message, where set, is
//    charged on its host's sending and receiving servers (gradfabric_host.h).
#pragma once

#include "gradfabric_dlcp_receiver.h"
#include "gradfabric_dlcp_sender.h"
#include "gradfabric_host.h"
#include "gradfabric_ns3.h"

#include <cmath>
#include <cstring>
#include <memory>
#include <utility>

namespace gradfabric
{
using namespace ns3;

class DlcpEndpoint : public DlcpSenderBase
{
  public:
    // (message id, data packets retransmitted, values missing at completion)
    using SentFn = std::function<void(uint32_t, uint32_t, uint32_t)>;
    // (source address, message id, values, values missing)
    using ReceivedFn = DlcpReceiver::ReceivedFn;

    DlcpEndpoint(Ptr<Node> node, uint16_t port, uint32_t chunk, double initialWindow, double maxWindow,
                 double minRto, double initialRto)
        : DlcpSenderBase(node, port, chunk, initialWindow, maxWindow, minRto, initialRto)
    {
        m_socket->SetRecvCallback(MakeCallback(&DlcpEndpoint::Receive, this));
        m_receiver = std::make_unique<DlcpReceiver>(m_nodeId, m_port, stats, onReceived);
    }

    SentFn onSent;
    ReceivedFn onReceived;

    // Queue a message of `values` float32 values to `destination`; `priority` is its switch
    // queue (TOS bits 7..5), `urgency` its place in this host's sending order (higher first,
    // then older first), `eligibleShare` of its packets are drop-eligible, `bound` is the
    // share of values the receiver may go without.
    void Send(uint32_t msg, uint32_t destination, uint32_t values, uint32_t priority, uint32_t urgency,
              double eligibleShare, double bound)
    {
        Out out(msg, destination, values, priority, urgency, eligibleShare, bound, m_order++);
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

    // On a sprayed fabric a probe may overtake data: then no data chunk's probe asks to
    // complete; once every chunk is answered the last probe goes, an allowance of at least
    // `grace` (and the SRTT) after the data. Negative: the last chunk's probe asks.
    void SetLastGrace(double grace)
    {
        m_lastGrace = grace;
    }

    // The hosts' reorder handling (hosts/endpoint.py): `grace` before a packet shown missing is
    // confirmed lost, at most `maxConfirms` confirmations at a round's end (0: believe the first
    // answer), allowances capped at `maxRto`.
    void SetReorder(double grace, uint32_t maxConfirms, double maxRto)
    {
        m_confirmGrace = grace;
        m_maxConfirms = maxConfirms;
        m_maxRto = maxRto;
    }

  private:
    // An answer to chunk `nonce`: of its range, the packets in `missing` had not arrived.
    void Answered(Out& o, const Wire& w, const std::vector<uint32_t>& missing)
    {
        auto ct = o.chunks.find(w.nonce);
        if (ct == o.chunks.end())
        {
            return; // a duplicate answer
        }
        Chunk c = std::move(ct->second);
        Simulator::Cancel(c.timer);
        o.chunks.erase(ct);
        m_inflight = m_inflight > c.seqs.size() ? m_inflight - c.seqs.size() : 0;
        double now = NowSeconds();
        if (c.sentAt >= 0)
        {
            Sample(now - c.sentAt);
        }
        uint64_t reorderedBefore = stats.reordered;
        uint32_t newly = o.MarkArrived(c.first, c.count, missing, stats.reordered);
        if ((w.flags & F_COMPLETE) && w.total == 0)
        {
            o.MarkArrived(0, o.packets, {}, stats.reordered); // completed with every value
        }
        uint32_t lostHere = 0;
        for (uint32_t s : c.seqs)
        {
            if (!o.received[s])
            {
                lostHere += o.ValuesIn(s);
                o.ShownMissing(s, now);
            }
        }
        o.roundLost += lostHere;
        bool late = stats.reordered > reorderedBefore; // shown missing, arrived without a resend
        bool congested = false, confirmed = false;
        if (c.isConfirm) // what a confirmation still shows missing is lost
        {
            std::vector<uint32_t> lostNow;
            for (uint32_t s : c.confirms)
            {
                if (!o.received[s])
                {
                    o.confirmedOpen += o.confirmed[s] ? 0 : 1;
                    o.confirmed[s] = 1;
                    lostNow.push_back(s);
                }
            }
            std::vector<uint32_t> again = o.OverBound(lostNow);
            if (!again.empty() && !(w.flags & F_COMPLETE))
            {
                Retransmit(o, again);
                o.tentative = false; // confirmed loss over the bound: the cut stands
                confirmed = true;
                if (!o.cutThisRound)
                {
                    o.cutThisRound = congested = true;
                }
            }
        }
        bool echo = false;
        if (w.aux > 0)
        {
            stats.ecnEchoes++;
            echo = !congested;
        }
        bool tentative = false;
        if (!o.cutThisRound && !o.deferring && o.roundLost > o.allowed)
        {
            // Loss over the bound: cut now, undone if the packets prove only late; on a path
            // seen to reorder the confirmation decides instead (Early, Decide).
            o.deferring = m_maxConfirms > 0 && w.aux == 0 && DeferCut();
            if (!o.deferring)
            {
                o.cutThisRound = congested = true;
                tentative = m_maxConfirms > 0 && w.aux == 0;
            }
        }
        if (late)
        {
            SawReordering();
        }
        if (confirmed)
        {
            LossConfirmed();
        }
        OnMarks(now, newly, w.aux > 0 ? newly : 0);
        if (congested)
        {
            double cwnd = m_cwnd, ssthresh = m_ssthresh;
            if (Cut(now) && tentative)
            {
                o.tentative = true;
                o.tCwnd = cwnd;
                o.tSsthresh = ssthresh;
                o.tCuts = stats.windowCuts;
            }
        }
        else if (echo)
        {
            EcnCut(now);
        }
        else if (newly > 0)
        {
            m_cwnd += m_cwnd < m_ssthresh ? newly : double(newly) / m_cwnd;
            m_cwnd = std::min(m_cwnd, m_maxWindow);
        }
        if (o.tentative && o.confirmedOpen == 0 && o.shownOpen <= o.allowed)
        {
            // Late, not lost: take the cut back (only its factor if other cuts came since).
            m_cwnd = stats.windowCuts == o.tCuts ? std::max(m_cwnd, o.tCwnd) : std::min(m_maxWindow, 2 * m_cwnd);
            m_ssthresh = stats.windowCuts == o.tCuts ? o.tSsthresh : 2 * m_ssthresh;
            m_lastCut = -1e9;
            stats.cutsUndone++;
            o.tentative = false;
            o.cutThisRound = false;
        }
        if (w.flags & F_COMPLETE)
        {
            Finish(o, w.total);
            return;
        }
        Early(o);
        if (!o.held && o.chunks.empty() && o.resend.empty() && o.next >= o.packets)
        {
            Decide(o);
        }
    }

    // Once the round's loss is over the bound, packets shown missing `m_confirmGrace` ago are
    // probed again; what is still missing then is lost (hosts/sender.py's _early).
    void Early(Out& o)
    {
        if (o.complete || o.suspects.empty() || o.roundLost <= o.allowed)
        {
            return;
        }
        double now = NowSeconds();
        double oldest = 1e300;
        std::vector<uint32_t> ripe;
        for (auto it = o.suspects.begin(); it != o.suspects.end();)
        {
            if (o.received[it->first])
            {
                it = o.suspects.erase(it);
                continue;
            }
            if ((now - it->second >= m_confirmGrace - 1e-12 || m_maxConfirms == 0) &&
                (ripe.empty() || it->first - ripe.front() < MAX_MISSING))
            {
                ripe.push_back(it->first);
                it = o.suspects.erase(it);
                continue;
            }
            oldest = std::min(oldest, it->second);
            ++it;
        }
        if (!ripe.empty() && m_maxConfirms == 0)
        {
            Retransmit(o, ripe);
        }
        else if (!ripe.empty())
        {
            Chunk c;
            c.first = ripe.front();
            c.count = ripe.back() - ripe.front() + 1;
            c.confirms = ripe;
            c.isConfirm = true;
            stats.confirms++;
            Open(o, std::move(c));
        }
        if (oldest < 1e300 && !o.earlyPending)
        {
            o.earlyPending = true;
            uint32_t msg = o.msg;
            double wait = std::max(0.0, oldest + m_confirmGrace - now);
            Simulator::Schedule(Seconds(wait), [this, msg]() {
                auto it = m_out.find(msg);
                if (it != m_out.end())
                {
                    it->second.earlyPending = false;
                    Early(it->second);
                }
            });
        }
    }

    void Retransmit(Out& o, const std::vector<uint32_t>& seqs)
    {
        for (auto it = seqs.rbegin(); it != seqs.rend(); ++it)
        {
            if (!o.queued[*it])
            {
                o.queued[*it] = 1;
                o.resend.push_front(*it);
            }
        }
        Pump();
    }

    double Allowance() const // how long data may still be on its way behind a probe
    {
        return std::min(m_maxRto, std::max({m_confirmGrace, m_lastGrace, std::max(m_srtt, 0.0)}));
    }

    // Every chunk answered, nothing to send, not complete (hosts/sender.py's _decide): within
    // the bound, ask to complete (at most FINALS times, each an allowance after the data);
    // over it, confirm while the bitmaps improve, then resend what is missing.
    void Decide(Out& o)
    {
        double now = NowSeconds();
        if (o.missingValues <= o.allowed)
        {
            if (o.finals >= FINALS)
            {
                NewRound(o, false);
                return;
            }
            double wait = o.missingValues > 0 ? o.lastSent + Allowance() - now : 0.0;
            Hold(o, wait, [this](Out& m) {
                if (m.missingValues > 0)
                {
                    m.lastSent = NowSeconds(); // the next ask gives the data another allowance
                }
                m.finals++;
                ProbeMissing(m, true);
            });
            return;
        }
        if (o.confirmsAsked < m_maxConfirms && (o.confirmsAsked == 0 || o.missingValues < o.confirmMissing))
        {
            o.confirmsAsked++;
            o.confirmMissing = o.missingValues;
            stats.confirms++;
            Hold(o, m_confirmGrace, [this](Out& m) { ProbeMissing(m, false); });
            return;
        }
        NewRound(o, !o.cutThisRound);
    }

    void Hold(Out& o, double wait, std::function<void(Out&)> then)
    {
        if (wait <= 0)
        {
            then(o);
            return;
        }
        o.held = true;
        uint32_t msg = o.msg;
        Simulator::Schedule(Seconds(wait), [this, msg, then]() {
            auto it = m_out.find(msg);
            if (it != m_out.end())
            {
                it->second.held = false;
                then(it->second);
            }
        });
    }

    // Last-flagged probes (no data) over the message (`all`) or the range not shown to have
    // arrived, in pieces of one answer; the last piece asks to complete.
    void ProbeMissing(Out& o, bool all)
    {
        uint32_t lo = 0, hi = o.packets;
        if (!all)
        {
            while (lo < hi && o.received[lo])
            {
                lo++;
            }
            while (hi > lo && o.received[hi - 1])
            {
                hi--;
            }
        }
        for (uint32_t start = lo; start < hi; start += MAX_MISSING)
        {
            Chunk c;
            c.first = start;
            c.count = std::min(hi, start + MAX_MISSING) - start;
            c.last = start + MAX_MISSING >= hi;
            Open(o, std::move(c));
        }
    }

    void NewRound(Out& o, bool cut)
    {
        if (cut)
        {
            Cut(NowSeconds());
            if (o.deferring)
            {
                LossConfirmed();
            }
        }
        o.suspects.clear();
        o.confirmsAsked = o.finals = o.roundLost = 0;
        o.cutThisRound = o.tentative = o.deferring = false;
        for (uint32_t s = 0; s < o.packets; s++)
        {
            if (!o.received[s] && !o.queued[s])
            {
                o.queued[s] = 1;
                o.resend.push_back(s);
            }
        }
        Pump();
    }

    void Finish(Out& o, uint32_t missing)
    {
        for (auto& [nonce, c] : o.chunks)
        {
            Simulator::Cancel(c.timer);
            m_inflight = m_inflight > c.seqs.size() ? m_inflight - c.seqs.size() : 0;
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
            m_receiver->Data(src, tos, w);
        }
        else if (w.type == W_PROBE)
        {
            m_receiver->Answer(m_socket, src, w);
        }
        else if (w.type == W_BITMAP)
        {
            std::vector<uint32_t> missing;
            for (size_t off = sizeof(Wire); off + 4 <= buf.size(); off += 4)
            {
                uint32_t seq;
                std::memcpy(&seq, buf.data() + off, 4);
                missing.push_back(seq);
            }
            auto it = m_out.find(w.msg);
            if (it != m_out.end())
            {
                Answered(it->second, w, missing);
            }
            Pump();
        }
    }

    std::unique_ptr<DlcpReceiver> m_receiver;
};

} // namespace gradfabric
