#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sys/stat.h>
#include <unistd.h>

#include "verbs/pd_impl.hpp"

namespace roce::verbs {

void Fd::reset(int fd) {
    if (fd_ >= 0)
        ::close(fd_);
    fd_ = fd;
}

int ibv_access_of(unsigned access) {
    int a = 0;
    if (access & access_local_write)
        a |= IBV_ACCESS_LOCAL_WRITE;
    if (access & access_remote_write)
        a |= IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE;   // verbs requires both
    if (access & access_remote_read)
        a |= IBV_ACCESS_REMOTE_READ;
    if (access & access_remote_atomic)
        a |= IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_LOCAL_WRITE;
    return a;
}

Status Pd::open(const std::string& dev_name, std::shared_ptr<Pd>& out) {
    int n = 0;
    DeviceListPtr list(rdma_get_devices(&n));
    if (!list || n == 0) {
        struct stat st;
        const bool sysfs = ::stat("/sys/class/infiniband", &st) == 0;
        ROCE_ERROR("verbs: cannot open RDMA device '%s': no RDMA devices on this host (%s%s)",
                   dev_name.c_str(),
                   sysfs ? "librdmacm found none" : "no /sys/class/infiniband: the kernel has no RDMA support",
                   errno ? (std::string("; ") + std::strerror(errno)).c_str() : "");
        return Status::no_device;
    }
    ibv_context* ctx = nullptr;
    std::string names;
    for (int i = 0; i < n; ++i) {
        const char* nm = ibv_get_device_name(list.get()[i]->device);
        names += names.empty() ? "" : ", ";
        names += nm;
        if (dev_name == nm)
            ctx = list.get()[i];
    }
    if (!ctx) {
        ROCE_ERROR("verbs: no RDMA device named '%s' (present: %s)", dev_name.c_str(), names.c_str());
        return Status::no_device;
    }
    PdPtr pd(ibv_alloc_pd(ctx));
    if (!pd) {
        ROCE_ERROR("verbs: %s: ibv_alloc_pd failed: %s", dev_name.c_str(), std::strerror(errno));
        return Status::io_error;
    }
    out = std::make_shared<PdImpl>(std::move(list), ctx, std::move(pd), dev_name);
    return Status::ok;
}

Status PdImpl::reg_mr(void* addr, size_t len, unsigned access, MrKeys& out) {
    if (!addr || len == 0 || (access & ~unsigned(access_all | access_no_lookup)))
        return Status::invalid_param;
    MrPtr mr(ibv_reg_mr(pd_.get(), addr, len, ibv_access_of(access & access_all) | IBV_ACCESS_LOCAL_WRITE));
    if (!mr) {
        const int err = errno;   // (before the log line can change it)
        ROCE_ERROR("verbs: %s: ibv_reg_mr(%p, %zu) failed: %s", name_.c_str(), addr, len,
                   std::strerror(err));
        return err == ENOMEM ? Status::no_resource : Status::io_error;
    }
    const uint32_t lkey = mr->lkey;
    out.lkey = lkey;
    out.rkey = mr->rkey;
    std::lock_guard lk(mu_);
    const uintptr_t start = reinterpret_cast<uintptr_t>(addr);
    if (!(access & access_no_lookup)) {
        by_addr_.emplace(start, lkey);
        max_len_ = std::max(max_len_, len);
    }
    by_lkey_[lkey] = Region{start, len, access, std::move(mr)};
    return Status::ok;
}

Status PdImpl::dereg_mr(uint32_t lkey) {
    MrPtr mr;   // deregistered outside the lock
    {
        std::lock_guard lk(mu_);
        auto it = by_lkey_.find(lkey);
        if (it == by_lkey_.end())
            return Status::invalid_param;
        auto [b, e] = by_addr_.equal_range(it->second.start);
        for (auto a = b; a != e; ++a) {
            if (a->second == lkey) {
                by_addr_.erase(a);
                break;
            }
        }
        mr = std::move(it->second.mr);
        by_lkey_.erase(it);
    }
    return Status::ok;
}

bool PdImpl::find_lkey(const void* addr, size_t len, uint32_t& lkey) const {
    const uintptr_t a = reinterpret_cast<uintptr_t>(addr);
    std::lock_guard lk(mu_);
    // Regions starting at or before a, no longer than max_len_ before it.
    auto it = by_addr_.upper_bound(a);
    while (it != by_addr_.begin()) {
        --it;
        if (a - it->first > max_len_)
            break;
        const Region& r = by_lkey_.at(it->second);
        if (a + len <= r.start + r.len) {
            lkey = it->second;
            return true;
        }
    }
    return false;
}

} // namespace roce::verbs
