#include "verbs/interop/kernel_qp.hpp"

#include <arpa/inet.h>
#include <cerrno>
#include <cstring>

namespace roce::verbs::interop {

namespace {
std::string errno_text(const char* what, int e) { return std::string(what) + ": " + std::strerror(e); }
} // namespace

bool KernelDevice::open(const std::string& dev, uint8_t port, int gid_index, size_t buf_bytes,
                        std::string& err) {
    int n = 0;
    std::unique_ptr<ibv_device*, void (*)(ibv_device**)> list(ibv_get_device_list(&n), ibv_free_device_list);
    if (!list) {
        err = errno_text("ibv_get_device_list", errno);
        return false;
    }
    for (int i = 0; i < n && !ctx_; ++i)
        if (dev == ibv_get_device_name(list.get()[i]))
            ctx_.reset(ibv_open_device(list.get()[i]));
    if (!ctx_) {
        err = "no RDMA device " + dev + " (or ibv_open_device failed)";
        return false;
    }
    port_ = port;
    ibv_port_attr pa{};
    if (const int rc = ibv_query_port(ctx_.get(), port, &pa); rc != 0) {
        err = errno_text("ibv_query_port", rc);
        return false;
    }
    if (pa.state != IBV_PORT_ACTIVE || pa.link_layer != IBV_LINK_LAYER_ETHERNET) {
        err = dev + " port " + std::to_string(port) + " is not an active RoCE port";
        return false;
    }
    mtu_ = pa.active_mtu;
    if (choose_gid(dev, port, gid_index, gid_) != Status::ok) {
        err = "no usable RoCE v2 GID on " + dev;
        return false;
    }
    pd_.reset(ibv_alloc_pd(ctx_.get()));
    cq_.reset(pd_ ? ibv_create_cq(ctx_.get(), 512, nullptr, nullptr, 0) : nullptr);
    if (!pd_ || !cq_) {
        err = errno_text("ibv_alloc_pd/ibv_create_cq", errno);
        return false;
    }
    buf_.assign(buf_bytes, 0);
    mr_.reset(ibv_reg_mr(pd_.get(), buf_.data(), buf_.size(),
                         IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                             IBV_ACCESS_REMOTE_ATOMIC));
    if (!mr_) {
        err = errno_text("ibv_reg_mr", errno);
        return false;
    }
    return true;
}

void KernelDevice::poll(std::vector<ibv_wc>& out) {
    ibv_wc wc[16];
    const int n = ibv_poll_cq(cq_.get(), 16, wc);
    for (int i = 0; i < n; ++i)
        out.push_back(wc[i]);
}

bool KernelQp::create(KernelDevice& dev, std::string& err) {
    dev_ = &dev;
    ibv_qp_init_attr ia{};
    ia.send_cq = ia.recv_cq = dev.cq();
    ia.qp_type = IBV_QPT_RC;
    ia.cap.max_send_wr = 64;
    ia.cap.max_recv_wr = 64;
    ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
    qp_.reset(ibv_create_qp(dev.pd(), &ia));
    if (!qp_)
        err = errno_text("ibv_create_qp", errno);
    return bool(qp_);
}

bool KernelQp::connect(const RemoteEnd& peer, uint32_t sq_psn, std::string& err) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.pkey_index = 0;
    a.port_num = dev_->port();
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
    if (const int rc = ibv_modify_qp(qp_.get(), &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                                        IBV_QP_ACCESS_FLAGS)) {
        err = errno_text("ibv_modify_qp(INIT)", rc);
        return false;
    }
    a = {};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = dev_->active_mtu();
    a.dest_qp_num = peer.qpn;
    a.rq_psn = peer.psn;
    a.max_dest_rd_atomic = 16;
    a.min_rnr_timer = 12;
    a.ah_attr.is_global = 1;
    std::memcpy(a.ah_attr.grh.dgid.raw, peer.gid, 16);
    a.ah_attr.grh.sgid_index = uint8_t(dev_->gid().index);
    a.ah_attr.grh.hop_limit = 64;
    a.ah_attr.port_num = dev_->port();
    if (const int rc = ibv_modify_qp(qp_.get(), &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
                                                        IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                                        IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)) {
        err = errno_text("ibv_modify_qp(RTR)", rc);
        return false;
    }
    a = {};
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 14;   // 67 ms
    a.retry_cnt = 7;  // rxe retries forever with 7 (rxe_comp.c skips the decrement, as for rnr_retry)
    a.rnr_retry = 7;
    a.sq_psn = sq_psn;
    a.max_rd_atomic = 16;
    if (const int rc = ibv_modify_qp(qp_.get(), &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                                        IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                                                        IBV_QP_MAX_QP_RD_ATOMIC)) {
        err = errno_text("ibv_modify_qp(RTS)", rc);
        return false;
    }
    return true;
}

ibv_qp_state KernelQp::state() const {
    ibv_qp_attr a{};
    ibv_qp_init_attr ia{};
    if (ibv_query_qp(qp_.get(), &a, IBV_QP_STATE, &ia) != 0)
        return IBV_QPS_UNKNOWN;
    return a.qp_state;
}

bool KernelQp::post_recv(uint64_t wr_id, size_t off, uint32_t len) {
    ibv_sge sge{dev_->va(off), len, dev_->lkey()};
    ibv_recv_wr wr{};
    ibv_recv_wr* bad = nullptr;
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    return ibv_post_recv(qp_.get(), &wr, &bad) == 0;
}

bool KernelQp::post(ibv_send_wr& wr) {
    ibv_send_wr* bad = nullptr;
    wr.send_flags |= IBV_SEND_SIGNALED;
    return ibv_post_send(qp_.get(), &wr, &bad) == 0;
}

bool KernelQp::post_send(uint64_t wr_id, size_t off, uint32_t len, const uint32_t* imm) {
    ibv_sge sge{dev_->va(off), len, dev_->lkey()};
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = imm ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND;
    if (imm)
        wr.imm_data = htonl(*imm);
    return post(wr);
}

bool KernelQp::post_rdma(uint64_t wr_id, ibv_wr_opcode op, size_t off, uint32_t len, uint64_t remote_va,
                         uint32_t rkey, const uint32_t* imm) {
    ibv_sge sge{dev_->va(off), len, dev_->lkey()};
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = op;
    if (imm)
        wr.imm_data = htonl(*imm);
    wr.wr.rdma.remote_addr = remote_va;
    wr.wr.rdma.rkey = rkey;
    return post(wr);
}

bool KernelQp::post_atomic(uint64_t wr_id, ibv_wr_opcode op, size_t off, uint64_t remote_va, uint32_t rkey,
                           uint64_t compare_add, uint64_t swap) {
    ibv_sge sge{dev_->va(off), 8, dev_->lkey()};
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = op;
    wr.wr.atomic.remote_addr = remote_va;
    wr.wr.atomic.rkey = rkey;
    wr.wr.atomic.compare_add = compare_add;
    wr.wr.atomic.swap = swap;
    return post(wr);
}

} // namespace roce::verbs::interop
