// RAII owners for every ibv_* / rdma_* object the verbs backend creates. Each is a unique_ptr with
// a deleter that calls the matching destroy function; a failing destroy is logged once (it means
// a leak or a bug, never something the caller can act on) and never throws.
#pragma once

#include <algorithm>
#include <cstdint>
#include <infiniband/verbs.h>
#include <memory>
#include <rdma/rdma_cma.h>

#include "common/log.hpp"

namespace roce::verbs {

namespace detail {
template <auto Fn, const char* Name>
struct Deleter {
    template <typename T>
    void operator()(T* p) const noexcept {
        if (p) {
            const int rc = Fn(p);
            if (rc != 0)
                ROCE_ERROR("verbs: %s failed: %d", Name, rc);
        }
    }
};
inline constexpr char n_pd[] = "ibv_dealloc_pd";
inline constexpr char n_cq[] = "ibv_destroy_cq";
inline constexpr char n_ch[] = "ibv_destroy_comp_channel";
inline constexpr char n_qp[] = "ibv_destroy_qp";
inline constexpr char n_srq[] = "ibv_destroy_srq";
inline constexpr char n_mr[] = "ibv_dereg_mr";
inline constexpr char n_ah[] = "ibv_destroy_ah";
inline constexpr char n_id[] = "rdma_destroy_id";
inline int destroy_channel(rdma_event_channel* c) { return rdma_destroy_event_channel(c), 0; }
inline int free_devices(ibv_context** l) { return rdma_free_devices(l), 0; }
inline constexpr char n_ec[] = "rdma_destroy_event_channel";
inline constexpr char n_dl[] = "rdma_free_devices";
} // namespace detail

using PdPtr = std::unique_ptr<ibv_pd, detail::Deleter<ibv_dealloc_pd, detail::n_pd>>;
using CqPtr = std::unique_ptr<ibv_cq, detail::Deleter<ibv_destroy_cq, detail::n_cq>>;
using CompChannelPtr = std::unique_ptr<ibv_comp_channel, detail::Deleter<ibv_destroy_comp_channel, detail::n_ch>>;
using QpPtr = std::unique_ptr<ibv_qp, detail::Deleter<ibv_destroy_qp, detail::n_qp>>;
using SrqPtr = std::unique_ptr<ibv_srq, detail::Deleter<ibv_destroy_srq, detail::n_srq>>;
using MrPtr = std::unique_ptr<ibv_mr, detail::Deleter<ibv_dereg_mr, detail::n_mr>>;
using AhPtr = std::unique_ptr<ibv_ah, detail::Deleter<ibv_destroy_ah, detail::n_ah>>;
// rdma_destroy_id blocks until every event reported on the id has been acked: ack first.
using CmIdPtr = std::unique_ptr<rdma_cm_id, detail::Deleter<rdma_destroy_id, detail::n_id>>;
using EventChannelPtr = std::unique_ptr<rdma_event_channel, detail::Deleter<detail::destroy_channel, detail::n_ec>>;
// librdmacm's device list (its ibv_contexts stay open while the list is held).
using DeviceListPtr = std::unique_ptr<ibv_context*, detail::Deleter<detail::free_devices, detail::n_dl>>;

// ibv_create_qp asking for a.cap.max_inline_data inline bytes, and again without inline data
// on a device that refuses it; `a.cap` then says what was granted (nullptr: errno says why).
inline ibv_qp* create_qp_inline_or_not(ibv_pd* pd, ibv_qp_init_attr& a) {
    ibv_qp* qp = ibv_create_qp(pd, &a);
    if (!qp && a.cap.max_inline_data) {
        a.cap.max_inline_data = 0;
        qp = ibv_create_qp(pd, &a);
    }
    return qp;
}

// Completion moderation: one send in `requested` asks for a completion, at most one in half the
// send queue, so a full queue always holds a signaled work request whose completion frees it.
inline uint32_t signal_interval(uint32_t requested, uint32_t sq_depth) {
    return std::clamp<uint32_t>(requested, 1, std::max<uint32_t>(1, sq_depth / 2));
}

// A file descriptor.
class Fd {
public:
    Fd() = default;
    explicit Fd(int fd) : fd_(fd) {}
    Fd(Fd&& o) noexcept : fd_(o.release()) {}
    Fd& operator=(Fd&& o) noexcept {
        if (this != &o) {
            reset(o.release());
        }
        return *this;
    }
    ~Fd() { reset(); }
    int get() const { return fd_; }
    int release() { int f = fd_; fd_ = -1; return f; }
    void reset(int fd = -1);
    explicit operator bool() const { return fd_ >= 0; }
private:
    int fd_ = -1;
};

} // namespace roce::verbs
