// The kernel side of the interop test (interop_rxe.cpp): raw verbs RC QPs on one RDMA device
// (kernel rxe), connected by hand exactly as ibv_rc_pingpong does — RESET -> INIT -> RTR (peer
// GID, QPN, rq_psn, path MTU) -> RTS (sq_psn) — and one registered buffer that every operation
// uses at an offset. Not part of the transport; errors are reported as text.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "verbs/gid_choice.hpp"
#include "verbs/raii.hpp"

namespace roce::verbs::interop {

struct ContextClose {
    void operator()(ibv_context* c) const noexcept { ibv_close_device(c); }
};
using ContextPtr = std::unique_ptr<ibv_context, ContextClose>;

// Device, PD, one CQ for every QP, and a registered buffer (remote read/write/atomic).
class KernelDevice {
public:
    // dev: ibv device name; gid_index < 0: the first RoCE v2 IPv4 GID (gid_choice.hpp).
    bool open(const std::string& dev, uint8_t port, int gid_index, size_t buf_bytes, std::string& err);

    ibv_context* ctx() const { return ctx_.get(); }
    ibv_pd* pd() const { return pd_.get(); }
    ibv_cq* cq() const { return cq_.get(); }
    uint8_t port() const { return port_; }
    const GidChoice& gid() const { return gid_; }
    ibv_mtu active_mtu() const { return mtu_; }
    uint8_t* buf() { return buf_.data(); }
    uint64_t va(size_t off = 0) { return uint64_t(uintptr_t(buf_.data() + off)); }
    uint32_t lkey() const { return mr_->lkey; }
    uint32_t rkey() const { return mr_->rkey; }
    // Polls the CQ once, appending what it found.
    void poll(std::vector<ibv_wc>& out);

private:
    ContextPtr ctx_;
    PdPtr pd_;
    CqPtr cq_;
    MrPtr mr_;
    std::vector<uint8_t> buf_;
    uint8_t port_ = 1;
    GidChoice gid_;
    ibv_mtu mtu_ = IBV_MTU_1024;
};

// What the other end tells us out of band.
struct RemoteEnd {
    uint8_t gid[16] = {};   // RoCE v2: the IPv4-mapped address ::ffff:a.b.c.d
    uint32_t qpn = 0;
    uint32_t psn = 0;       // its first send PSN = our rq_psn
};

class KernelQp {
public:
    bool create(KernelDevice& dev, std::string& err);
    uint32_t qpn() const { return qp_->qp_num; }
    // RESET -> INIT -> RTR -> RTS. sq_psn: our first PSN (the peer's expected PSN).
    bool connect(const RemoteEnd& peer, uint32_t sq_psn, std::string& err);
    ibv_qp_state state() const;

    // Work requests on the device buffer at `off`. Signaled; wr_id identifies the completion.
    bool post_recv(uint64_t wr_id, size_t off, uint32_t len);
    bool post_send(uint64_t wr_id, size_t off, uint32_t len, const uint32_t* imm = nullptr);
    bool post_rdma(uint64_t wr_id, ibv_wr_opcode op, size_t off, uint32_t len, uint64_t remote_va,
                   uint32_t rkey, const uint32_t* imm = nullptr);
    // Atomics: the original remote value lands in the 8 bytes at `off`.
    bool post_atomic(uint64_t wr_id, ibv_wr_opcode op, size_t off, uint64_t remote_va, uint32_t rkey,
                     uint64_t compare_add, uint64_t swap);

private:
    bool post(ibv_send_wr& wr);
    KernelDevice* dev_ = nullptr;
    QpPtr qp_;
};

} // namespace roce::verbs::interop
