#include "sw/gso_icrc.hpp"

#include "wire/icrc.hpp"

namespace roce::sw {
namespace {

// The change for `id`: the XOR of its set bits' changes.
uint32_t compose(const uint32_t* bit, unsigned id) {
    uint32_t d = 0;
    for (unsigned b = 0; id; ++b, id >>= 1) {
        if (id & 1)
            d ^= bit[b];
    }
    return d;
}

} // namespace

uint32_t icrc_gso_delta(size_t udp_payload_len, uint16_t id) {
    uint32_t bit[16];
    wire::icrc_ipv4_id_bit_deltas(udp_payload_len, bit);
    return compose(bit, id);
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
        wire::icrc_ipv4_id_bit_deltas(len, e->bit);
    }
    return compose(e->bit.data(), k);
}

} // namespace roce::sw
