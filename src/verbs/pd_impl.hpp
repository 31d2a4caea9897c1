// verbs::Pd implementation: the device's ibv_context (from librdmacm's list), an ibv_pd, and the
// registered regions, indexed by lkey and by address (zero-copy operations find their local
// buffer's lkey by address).
#pragma once

#include <map>
#include <mutex>
#include <unordered_map>

#include "verbs/device.hpp"
#include "verbs/raii.hpp"

namespace roce::verbs {

class PdImpl final : public Pd {
public:
    PdImpl(DeviceListPtr list, ibv_context* ctx, PdPtr pd, std::string name)
        : list_(std::move(list)), ctx_(ctx), pd_(std::move(pd)), name_(std::move(name)) {}
    const std::string& dev_name() const override { return name_; }
    Status reg_mr(void* addr, size_t len, unsigned access, MrKeys& out) override;
    Status dereg_mr(uint32_t lkey) override;

    ibv_context* ctx() const { return ctx_; }
    ibv_pd* pd() const { return pd_.get(); }
    // lkey of a region covering [addr, addr+len) (all are registered with local write); false if none.
    bool find_lkey(const void* addr, size_t len, uint32_t& lkey) const;

private:
    struct Region {
        uintptr_t start;
        size_t len;
        unsigned access;
        MrPtr mr;
    };
    DeviceListPtr list_;
    ibv_context* ctx_;
    PdPtr pd_;
    std::string name_;
    mutable std::mutex mu_;
    std::unordered_map<uint32_t, Region> by_lkey_;
    std::multimap<uintptr_t, uint32_t> by_addr_;   // start -> lkey
    size_t max_len_ = 0;                             // longest region (bounds the address search)
};

int ibv_access_of(unsigned access);

} // namespace roce::verbs
