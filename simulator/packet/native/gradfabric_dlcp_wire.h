// The DLCP transport's wire format and counters (gradfabric_transport.h's DlcpEndpoint),
// compiled at run time by cppyy.
#pragma once

#include <cstdint>

namespace gradfabric
{
// float32 values in one full DLCP packet: 32 header + 1,440 payload bytes = a 1,500-byte
// IPv4 datagram.
constexpr uint32_t VALUES_PER_PACKET = 360;
// Loss episodes whose cut waits for a confirmation after reordering was last seen (hosts/pacing.py's
// REORDER_PERSIST, as Linux keeps RACK's reordering window for 16 recoveries after a DSACK).
constexpr uint32_t REORDER_PERSIST = 16;

enum WireType : uint8_t
{
    W_DATA = 1,
    W_PROBE = 2,
    W_BITMAP = 3
};

constexpr uint8_t F_LAST = 1;     // probe: complete the message if within the bound
constexpr uint8_t F_COMPLETE = 2; // bitmap: the message is complete at the receiver

#pragma pack(push, 1)
struct Wire
{
    uint8_t type;
    uint8_t flags;
    uint8_t priority;
    uint8_t pad;
    uint32_t msg;
    uint32_t seq;   // data: packet index; probe/bitmap: first packet of the chunk
    uint32_t count; // data: packets in the message; probe/bitmap: packets in the chunk
    uint32_t total; // probe: packets in the message; bitmap: of the chunk, how many arrived
    uint32_t aux;   // probe: allowed missing values; bitmap: CE marks seen since last answer
    uint32_t nonce; // probe/bitmap: which probe is answered
    uint32_t values; // values in the message
};
#pragma pack(pop)
static_assert(sizeof(Wire) == 32, "DLCP header is 32 bytes");

struct DlcpStats
{
    uint64_t packets = 0;       // first transmissions of data packets
    uint64_t retransmitted = 0; // data packets sent again
    uint64_t probes = 0;
    uint64_t probeTimeouts = 0;
    uint64_t ecnEchoes = 0;
    uint64_t windowCuts = 0;
    uint64_t cutsUndone = 0; // cuts taken back: the loss behind them was reordering
    uint64_t deferred = 0;   // loss episodes whose cut waited for a confirmation (reordering seen)
    uint64_t confirms = 0;   // confirming probes before a resend
    uint64_t reordered = 0;  // packets an answer showed missing that arrived without a resend
    uint64_t lostValues = 0; // zero-filled values of messages this endpoint received
    uint64_t receivedValues = 0;
};

} // namespace gradfabric
