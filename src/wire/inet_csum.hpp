// The Internet checksum (RFC 1071) of IPv4 and UDP headers: what pcap traces write and what tells
// an IPv4 header from other bytes (a UD receive buffer's header area, verbs/ud.cpp).
#pragma once

#include <cstddef>
#include <cstdint>

#include "wire/byteorder.hpp"

namespace roce::wire {

// Ones' complement sum of big-endian 16-bit words (an odd last byte is padded with zero).
inline uint32_t csum_add(uint32_t sum, const uint8_t* p, size_t n) {
    for (; n >= 2; p += 2, n -= 2)
        sum += be::load16(p);
    if (n)
        sum += uint32_t(p[0]) << 8;
    return sum;
}

// The checksum field's value for a sum: its ones' complement, folded to 16 bits.
inline uint16_t csum_fold(uint32_t sum) {
    while (sum >> 16)
        sum = (sum & 0xffff) + (sum >> 16);
    return uint16_t(~sum);
}

// A 20-byte IPv4 header without options whose checksum holds.
inline bool is_ipv4_header(const uint8_t* h) {
    return h[0] == 0x45 && csum_fold(csum_add(0, h, 20)) == 0;
}

} // namespace roce::wire
