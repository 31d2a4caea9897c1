// The ICRC patch of a GSO segment: UDP_SEGMENT sends give a run's segments the IPv4 IDs
// 0, 1, 2, ... (DF, unconnected socket), and the ICRC covers the ID, so segment k's ICRC,
// computed for ID 0, is XORed with the change that ID k makes.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace roce::sw {

// The change is linear in the ID (a CRC over GF(2)), so the changes of the six low ID bits give
// that of every segment number below 64; they depend on the segment length only, and a stream
// has few lengths (full packets, each message size's last one): kept for the last 8 lengths.
// Measured: computing the change per segment (bitwise multiplies mod P) was ~0.4 us for the
// second packet of each 2-packet message and ~3% of a 1 MiB stream's sender.
class GsoIcrcPatches {
public:
    static constexpr unsigned max_segments = 64;   // IDs 0..63: six bits

    // The XOR for segment `k` of `udp_payload_len` bytes; 0 for k == 0. From the cache below
    // max_segments, computed directly above.
    uint32_t patch(size_t udp_payload_len, unsigned k);

private:
    struct Entry {
        size_t len = 0;   // 0: empty (no RoCE packet is that short)
        std::array<uint32_t, 6> bit{};
    };
    std::array<Entry, 8> cache_{};
    unsigned next_ = 0;   // round-robin victim
};

// Applies (or, again, undoes) a change to the ICRC at `icrc` (its 4 bytes as on the wire).
inline void xor_icrc(uint8_t* icrc, uint32_t delta) {
    icrc[0] ^= uint8_t(delta);
    icrc[1] ^= uint8_t(delta >> 8);
    icrc[2] ^= uint8_t(delta >> 16);
    icrc[3] ^= uint8_t(delta >> 24);
}

// The change of the ICRC of a UDP payload of this length when its IPv4 ID goes from 0 to `id`,
// computed without the cache (any 16-bit ID, wire::icrc_ipv4_id_bit_deltas).
uint32_t icrc_gso_delta(size_t udp_payload_len, uint16_t id);

} // namespace roce::sw
