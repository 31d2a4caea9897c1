#include "sw/gso_icrc.hpp"

#include "wire/icrc.hpp"

namespace roce::sw {
namespace {

// The ID bytes' raw CRC is shifted over everything the ICRC covers after them (8 LRH + 20 IPv4
// + 8 UDP + payload - 4 ICRC - 14 up to the ID's end).
uint32_t id_shift(size_t udp_payload_len) {
    return wire::detail::crc32_x8n(8 + 20 + 8 + udp_payload_len - 4 - 14);
}

uint32_t id_delta(uint32_t shift, uint16_t id) {
    uint32_t c = 0;
    const uint8_t bytes[2] = {uint8_t(id >> 8), uint8_t(id)};
    for (uint8_t byte : bytes) {
        c ^= byte;
        for (int k = 0; k < 8; ++k)
            c = c & 1 ? (c >> 1) ^ 0xedb88320u : c >> 1;
    }
    return wire::detail::crc32_mulmod(shift, c);
}

} // namespace

uint32_t icrc_gso_delta(size_t udp_payload_len, uint16_t id) {
    return id_delta(id_shift(udp_payload_len), id);
}

uint32_t GsoIcrcPatches::patch(size_t len, unsigned k) {
    if (k >= max_segments)
        return icrc_gso_delta(len, uint16_t(k));   // not from tx_send_gso (runs of <= 64)
    Entry* e = nullptr;
    for (Entry& c : cache_) {
        if (c.len == len) {
            e = &c;
            break;
        }
    }
    if (!e) {
        e = &cache_[next_];
        next_ = (next_ + 1) % cache_.size();
        e->len = len;
        const uint32_t shift = id_shift(len);
        for (unsigned b = 0; b < e->bit.size(); ++b)
            e->bit[b] = id_delta(shift, uint16_t(1u << b));
    }
    uint32_t d = 0;
    for (unsigned b = 0; k; ++b, k >>= 1) {
        if (k & 1)
            d ^= e->bit[b];
    }
    return d;
}

} // namespace roce::sw
