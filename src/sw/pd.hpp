// Protection domain internals: the MR table the responder consults for every remote access.
// rkeys are random 32-bit values (never reused while registered); lookups check bounds and
// access rights under a shared lock, so a deregistered region can never be written.
#pragma once

#include <atomic>
#include <cstdint>
#include <shared_mutex>
#include <unordered_map>

#include "sw/device.hpp"

namespace roce::sw {

class PdImpl final : public Pd {
public:
    PdImpl();
    Status reg_mr(void* addr, size_t len, unsigned access, MrKeys& out) override;
    Status dereg_mr(uint32_t lkey) override;

    // Address of [va, va+len) inside the region `rkey` if the region grants `needed` (a mask of
    // Access bits); nullptr otherwise. len == 0 is checked against the region bounds too.
    uint8_t* lookup(uint32_t rkey, uint64_t va, uint64_t len, unsigned needed) const;

    // Runs fn(ptr) with the region pinned (shared lock held) so a concurrent dereg cannot free
    // it mid-copy. Returns false (fn not called) when lookup fails.
    template <class Fn>
    bool with_region(uint32_t rkey, uint64_t va, uint64_t len, unsigned needed, Fn&& fn) const {
        std::shared_lock lk(mu_);
        uint8_t* p = lookup_locked(rkey, va, len, needed);
        if (!p)
            return false;
        fn(p);
        return true;
    }

    // For packets that point into regions until they are sent (gather send of READ responses,
    // DeviceImpl::emit_gather): a dereg_mr waits while the pin is held, and the generation
    // (bumped by every dereg_mr) tells tx_flush whether a region may have gone meanwhile.
    std::shared_lock<std::shared_mutex> pin() const { return std::shared_lock(mu_); }
    uint64_t generation() const { return gen_.load(std::memory_order_relaxed); }
    // lookup() for a caller holding pin().
    uint8_t* lookup_pinned(uint32_t rkey, uint64_t va, uint64_t len, unsigned needed) const {
        return lookup_locked(rkey, va, len, needed);
    }

private:
    struct Region {
        uintptr_t addr;
        size_t len;
        unsigned access;
        uint32_t lkey;
    };
    uint8_t* lookup_locked(uint32_t rkey, uint64_t va, uint64_t len, unsigned needed) const;
    uint32_t random_key_locked();

    mutable std::shared_mutex mu_;
    std::atomic<uint64_t> gen_{0};
    std::unordered_map<uint32_t, Region> by_rkey_;
    std::unordered_map<uint32_t, uint32_t> lkey_to_rkey_;
    uint64_t rng_state_[2];
};

} // namespace roce::sw
