// The reliability header of ud_roce: our own, carried as the first bytes of every UD payload
// (after the RoCEv2 BTH/DETH on the wire, which the device adds and strips). 20 bytes:
//
//   0        8        16       24       32
//   +--------+--------+--------+--------+
//   |  type  | flags  | am_id  | vers   |
//   +--------+--------+--------+--------+
//   |           sender_id (32)          |   random per interface: tells a restarted peer apart
//   +-----------------------------------+
//   |              psn (32)             |   this packet's sequence number (data, probe)
//   +-----------------------------------+
//   |              ack (32)             |   next psn the sender expects from the receiver
//   +-----------------------------------+
//   |             sack (32)             |   bit i: packet ack+1+i has arrived
//   +-----------------------------------+
//   |  payload (data: an AM fragment)   |
//
// Every packet acknowledges (ack/sack), so data in the other direction carries the ACK for free.
#pragma once

#include <cstddef>
#include <cstdint>

#include "wire/byteorder.hpp"

namespace roce::ud {

enum class PktType : uint8_t {
    data = 1,    // an AM fragment, sequenced
    probe = 2,   // sequenced, no payload, not delivered: keepalive / ep_check
    ack = 3,     // unsequenced, acknowledgement only
};

enum : uint8_t {
    flag_first = 1u << 0,     // first fragment of an AM
    flag_last = 1u << 1,      // last fragment of an AM
    flag_ack_req = 1u << 2,   // acknowledge without delay
    // (ACK) the receiver is alive but takes no data now: its owner is away with as much as it may
    // keep waiting (Transport's deferred_). Not progress, but no reason to give the peer up.
    flag_busy = 1u << 3,
    // (any packet's ack fields) packets beyond `ack` arrived and were dropped, not held (the
    // receiver's hold budget was spent): resend from `ack` now. Without it the sender, seeing no
    // SACK, would wait for its timer on every loss while strangers fill the budget. A receiver
    // that never sets it (an older build) costs only those timeouts.
    flag_nak = 1u << 4,
};

inline constexpr uint8_t header_version = 1;

struct Header {
    PktType type = PktType::data;
    uint8_t flags = 0;
    uint8_t am_id = 0;
    uint32_t sender_id = 0;
    uint32_t psn = 0;
    uint32_t ack = 0;
    uint32_t sack = 0;
};
inline constexpr size_t header_size = 20;

inline void encode(const Header& h, uint8_t* p) {
    p[0] = uint8_t(h.type);
    p[1] = h.flags;
    p[2] = h.am_id;
    p[3] = header_version;
    wire::be::store32(p + 4, h.sender_id);
    wire::be::store32(p + 8, h.psn);
    wire::be::store32(p + 12, h.ack);
    wire::be::store32(p + 16, h.sack);
}

// False for anything that is not a header of this version (too short, unknown type, sender id
// 0: never sent, and 0 stands for "not heard yet" in a peer's state).
inline bool decode(const uint8_t* p, size_t len, Header& h) {
    if (len < header_size || p[3] != header_version || p[0] < 1 || p[0] > 3 ||
        (p[4] | p[5] | p[6] | p[7]) == 0) {
        return false;
    }
    h.type = PktType(p[0]);
    h.flags = p[1];
    h.am_id = p[2];
    h.sender_id = wire::be::load32(p + 4);
    h.psn = wire::be::load32(p + 8);
    h.ack = wire::be::load32(p + 12);
    h.sack = wire::be::load32(p + 16);
    return true;
}

// Sequence-number order with wrap-around (serial number arithmetic).
inline bool seq_lt(uint32_t a, uint32_t b) { return int32_t(a - b) < 0; }
inline bool seq_le(uint32_t a, uint32_t b) { return int32_t(a - b) <= 0; }

} // namespace roce::ud
