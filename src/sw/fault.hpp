// Transmit-side fault injection (FaultConfig): a seeded PRNG decides per packet whether to drop,
// duplicate, reorder (swap with the next packet) or corrupt it (flip one bit after the ICRC was
// computed, so the receiver's ICRC check must catch it), or mark it CE (ECN congestion experienced,
// what an ECN-marking switch queue does, so the receiver's notification point must answer it),
// cut it short (truncate), hold it back for a while (delay), or drop RC ACKs/NAKs only (the requester's retransmission timer and
// the responder's duplicate handling must recover without them).
#pragma once

#include <cstddef>
#include <cstdint>

#include "sw/device.hpp"

namespace roce::sw {

class FaultInjector {
public:
    explicit FaultInjector(const FaultConfig& cfg);
    bool enabled() const { return cfg_.any(); }

    struct Decision {
        bool drop = false, duplicate = false, reorder = false, corrupt = false, ce = false, truncate = false,
             delay = false;
        bool ack_dropped = false;   // drop set because the packet is an RC ACK/NAK (drop_acks)
    };
    // For one packet whose first byte (BTH opcode) is `opcode`.
    Decision decide(uint8_t opcode);
    // A length in [0, len) to cut the packet to.
    size_t truncated_length(size_t len);
    // Flips one bit of the packet outside the masked BTH byte 4 and outside the ICRC itself:
    // in the payload/extension headers when there are any, else in the BTH.
    void corrupt(uint8_t* pkt, size_t len);

private:
    double uniform();
    uint64_t next();
    FaultConfig cfg_;
    uint64_t s_;
};

} // namespace roce::sw
