// Protection domain: memory regions and their unguessable keys.
#include "sw/pd.hpp"

#include <mutex>
#include <random>
#include <sys/random.h>

namespace roce::sw {

std::shared_ptr<Pd> Pd::create() { return std::make_shared<PdImpl>(); }

PdImpl::PdImpl() {
    if (getrandom(rng_state_, sizeof(rng_state_), 0) != ssize_t(sizeof(rng_state_))) {
        std::random_device rd;
        rng_state_[0] = uint64_t(rd()) << 32 | rd();
        rng_state_[1] = uint64_t(rd()) << 32 | rd();
    }
    rng_state_[1] |= 1;
}

// xorshift128+ seeded from getrandom; keys must be unpredictable to peers, not cryptographic.
uint32_t PdImpl::random_key_locked() {
    for (;;) {
        uint64_t s1 = rng_state_[0];
        const uint64_t s0 = rng_state_[1];
        rng_state_[0] = s0;
        s1 ^= s1 << 23;
        rng_state_[1] = s1 ^ s0 ^ (s1 >> 17) ^ (s0 >> 26);
        const uint32_t k = uint32_t((rng_state_[1] + s0) >> 16);
        if (k != 0 && !by_rkey_.count(k) && !lkey_to_rkey_.count(k))
            return k;
    }
}

Status PdImpl::reg_mr(void* addr, size_t len, unsigned access, MrKeys& out) {
    if (!addr || len == 0 || (access & ~unsigned(access_all)) != 0)
        return Status::invalid_param;
    if (uintptr_t(addr) + len < uintptr_t(addr))
        return Status::invalid_param;
    std::unique_lock lk(mu_);
    const uint32_t rkey = random_key_locked();
    by_rkey_.emplace(rkey, Region{uintptr_t(addr), len, access, 0});
    const uint32_t lkey = random_key_locked();
    by_rkey_[rkey].lkey = lkey;
    lkey_to_rkey_.emplace(lkey, rkey);
    out.lkey = lkey;
    out.rkey = rkey;
    return Status::ok;
}

Status PdImpl::dereg_mr(uint32_t lkey) {
    std::unique_lock lk(mu_);
    auto it = lkey_to_rkey_.find(lkey);
    if (it == lkey_to_rkey_.end())
        return Status::invalid_param;
    by_rkey_.erase(it->second);
    lkey_to_rkey_.erase(it);
    gen_.fetch_add(1, std::memory_order_relaxed);
    return Status::ok;
}

uint8_t* PdImpl::lookup_locked(uint32_t rkey, uint64_t va, uint64_t len, unsigned needed) const {
    auto it = by_rkey_.find(rkey);
    if (it == by_rkey_.end())
        return nullptr;
    const Region& r = it->second;
    if ((r.access & needed) != needed)
        return nullptr;
    if (va < r.addr || len > r.len || va - r.addr > r.len - len)
        return nullptr;
    return reinterpret_cast<uint8_t*>(uintptr_t(va));
}

uint8_t* PdImpl::lookup(uint32_t rkey, uint64_t va, uint64_t len, unsigned needed) const {
    std::shared_lock lk(mu_);
    return lookup_locked(rkey, va, len, needed);
}

} // namespace roce::sw
