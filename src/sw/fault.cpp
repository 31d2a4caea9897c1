#include "sw/fault.hpp"

#include "wire/headers.hpp"
#include "wire/packet.hpp"

namespace roce::sw {

FaultInjector::FaultInjector(const FaultConfig& cfg) : cfg_(cfg), s_(cfg.seed * 0x9e3779b97f4a7c15ull + 1) {}

// splitmix64: small, fast, reproducible per seed.
uint64_t FaultInjector::next() {
    uint64_t z = (s_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

double FaultInjector::uniform() { return double(next() >> 11) * (1.0 / 9007199254740992.0); }

FaultInjector::Decision FaultInjector::decide(uint8_t opcode) {
    Decision d;
    if (!cfg_.any())
        return d;
    d.drop = cfg_.drop > 0 && uniform() < cfg_.drop;
    if (!d.drop && cfg_.drop_acks > 0 && opcode == uint8_t(wire::Opcode::rc_ack) && uniform() < cfg_.drop_acks)
        d.drop = d.ack_dropped = true;
    if (d.drop)
        return d;
    d.truncate = cfg_.truncate > 0 && uniform() < cfg_.truncate;
    d.delay = cfg_.delay > 0 && uniform() < cfg_.delay;
    d.corrupt = cfg_.corrupt > 0 && uniform() < cfg_.corrupt;
    d.duplicate = cfg_.duplicate > 0 && uniform() < cfg_.duplicate;
    d.reorder = cfg_.reorder > 0 && uniform() < cfg_.reorder;
    d.ce = cfg_.ce > 0 && uniform() < cfg_.ce;
    return d;
}

size_t FaultInjector::truncated_length(size_t len) { return len ? size_t(next() % len) : 0; }

void FaultInjector::corrupt(uint8_t* pkt, size_t len) {
    if (len < wire::bth_size + wire::icrc_size)
        return;
    size_t lo = wire::bth_size, hi = len - wire::icrc_size;
    size_t pos;
    if (hi > lo) {
        pos = lo + size_t(next() % (hi - lo));
    } else {
        pos = size_t(next() % (wire::bth_size - 1));
        if (pos >= 4)
            ++pos;   // skip the masked byte 4
    }
    pkt[pos] ^= uint8_t(1u << (next() & 7));
}

} // namespace roce::sw
