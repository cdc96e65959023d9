// What a DlcpEndpoint (gradfabric_transport.h) knows of one message it sends, and what it
// receives of one, compiled at run time by cppyy.
#pragma once

#include "gradfabric_dlcp_wire.h"
#include "gradfabric_ns3.h"

#include <cmath>
#include <deque>
#include <map>
#include <vector>

namespace gradfabric
{
using namespace ns3;

// Packets one answer covers (a chunk's or probe's range), and last-flagged asks within the
// bound before a new round (hosts/sender.py's FINALS).
constexpr uint32_t MAX_MISSING = 360;
constexpr uint32_t FINALS = 2;

struct DlcpChunk
{
    uint32_t first = 0;             // the probed range: first packet
    uint32_t count = 0;             // and how many
    std::vector<uint32_t> seqs;     // data packets sent in the chunk (their window credit)
    std::vector<uint32_t> confirms; // a probe only: packets it confirms as lost
    bool isConfirm = false;
    bool last = false;
    uint32_t nonce = 0;
    double sentAt = 0;
    double rto = 0;
    EventId timer;
};

struct DlcpOut
{
    uint32_t msg = 0, dst = 0, values = 0, packets = 0, priority = 0, urgency = 0, allowed = 0;
    double eligibleShare = 0;
    uint64_t order = 0;
    uint32_t next = 0;                     // next packet never sent
    std::deque<uint32_t> resend;           // packets to send again
    std::map<uint32_t, DlcpChunk> chunks;  // unanswered chunks by nonce
    std::vector<uint8_t> received;         // an answer showed it arrived
    std::vector<uint8_t> sends;            // times sent
    std::vector<uint8_t> shown;            // an answer showed it missing at least once
    std::vector<uint8_t> confirmed;        // a confirmation showed it still missing: lost
    std::vector<uint8_t> queued;           // queued for a resend
    std::map<uint32_t, double> suspects;   // packet -> when an answer first showed it missing
    uint32_t missingValues = 0;            // values no answer showed arrived
    uint32_t shownOpen = 0;                // values shown missing and not (yet) shown arrived
    uint32_t confirmedOpen = 0;            // packets confirmed lost and not shown arrived
    uint32_t roundLost = 0;                // values answers showed missing this round
    uint32_t retransmitted = 0, confirmsAsked = 0, confirmMissing = 0, finals = 0;
    double lastSent = 0;
    bool cutThisRound = false;
    bool held = false;                     // waiting out an allowance before probing
    bool earlyPending = false;             // a confirmation check is scheduled
    bool tentative = false;                // the round's cut, to undo if the loss was only late
    bool deferring = false;                // loss over the bound this round waits for its confirmation to cut
    double tCwnd = 0, tSsthresh = 0;
    uint64_t tCuts = 0;
    bool complete = false;

    DlcpOut() = default;

    DlcpOut(uint32_t m, uint32_t destination, uint32_t nValues, uint32_t prio, uint32_t urg, double eligible,
            double bound, uint64_t ord)
        : msg(m),
          dst(destination),
          values(std::max<uint32_t>(nValues, 1)),
          priority(prio),
          urgency(urg),
          order(ord)
    {
        packets = (values + VALUES_PER_PACKET - 1) / VALUES_PER_PACKET;
        eligibleShare = std::max(0.0, std::min(1.0, eligible));
        allowed = static_cast<uint32_t>(std::floor(bound * values + 1e-9));
        received.assign(packets, 0);
        sends.assign(packets, 0);
        shown.assign(packets, 0);
        confirmed.assign(packets, 0);
        queued.assign(packets, 0);
        missingValues = values;
    }

    uint32_t ValuesIn(uint32_t seq) const
    {
        return seq + 1 < packets ? VALUES_PER_PACKET : values - VALUES_PER_PACKET * (packets - 1);
    }

    bool Eligible(uint32_t seq) const
    {
        return std::floor((seq + 1) * eligibleShare) > std::floor(seq * eligibleShare);
    }

    bool AllSent() const
    {
        return resend.empty() && next >= packets;
    }

    // Of packets first .. first + count - 1, all but `missing` (ascending) arrived. Returns how
    // many of those sent were news; `reordered` counts those shown missing before and never resent.
    uint32_t MarkArrived(uint32_t first, uint32_t count, const std::vector<uint32_t>& missing, uint64_t& reordered)
    {
        uint32_t newly = 0;
        size_t m = 0;
        for (uint32_t s = first; s < first + count && s < packets; s++)
        {
            while (m < missing.size() && missing[m] < s)
            {
                m++;
            }
            if ((m < missing.size() && missing[m] == s) || received[s])
            {
                continue;
            }
            received[s] = 1;
            missingValues -= ValuesIn(s);
            newly += sends[s] > 0 ? 1 : 0;
            if (shown[s])
            {
                shownOpen -= ValuesIn(s);
                confirmedOpen -= confirmed[s] ? 1 : 0;
                reordered += sends[s] == 1 ? 1 : 0;
            }
        }
        return newly;
    }

    // A packet of the chunk just answered is not in: shown missing, a suspect from `now`.
    void ShownMissing(uint32_t s, double now)
    {
        if (!shown[s])
        {
            shown[s] = 1;
            shownOpen += ValuesIn(s);
        }
        suspects.emplace(s, now);
    }

    // The fewest of `candidates` to resend so that the loss confirmed and not yet resent is
    // within the bound again (in order: the model has no magnitude classes).
    std::vector<uint32_t> OverBound(const std::vector<uint32_t>& candidates) const
    {
        int64_t unresolved = 0;
        for (uint32_t s = 0; s < packets; s++)
        {
            unresolved += confirmed[s] && !received[s] && !queued[s] ? ValuesIn(s) : 0;
        }
        int64_t excess = unresolved - int64_t(allowed);
        std::vector<uint32_t> out;
        for (uint32_t s : candidates)
        {
            if (excess <= 0)
            {
                break;
            }
            out.push_back(s);
            excess -= ValuesIn(s);
        }
        return out;
    }
};

} // namespace gradfabric
