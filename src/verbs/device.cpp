// verbs::Device: open/close, the device's counters, the QP table and QP lifecycle (create,
// fail, abort, release, destroy) and receive buffers. Posting is in post.cpp, completions and
// progress in completion.cpp, connection management (rdma_cm) in cm.cpp.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "common/log.hpp"
#include "common/roce_mtu.hpp"
#include "verbs/device_impl.hpp"
#include "verbs/ports.hpp"
#include "verbs/recv_chain.hpp"

namespace roce::verbs {

namespace {
bool set_nonblock(int fd) {
    const int fl = fcntl(fd, F_GETFL);
    return fl >= 0 && fcntl(fd, F_SETFL, fl | O_NONBLOCK) == 0;
}
} // namespace

Status Device::open(const DeviceConfig& cfg, std::shared_ptr<Pd> pd, std::unique_ptr<Device>& out) {
    if (!valid_roce_mtu(cfg.mtu))
        return Status::invalid_param;
    if (cfg.sq_depth == 0 || cfg.max_rd_atomic == 0 || cfg.max_recv_msg == 0 ||
        cfg.recv_buffers == 0 || cfg.bounce_slots == 0 || cfg.bounce_size < 8 ||
        cfg.cq_size < 2 * cfg.sq_depth || cfg.signal_every == 0 || cfg.port == 0)
        return Status::invalid_param;
    if (!pd) {
        const Status s = Pd::open(cfg.dev_name, pd);
        if (s != Status::ok)
            return s;
    }
    auto pdi = std::dynamic_pointer_cast<PdImpl>(pd);
    if (!pdi || pdi->dev_name() != cfg.dev_name) {
        ROCE_ERROR("verbs: Device::open(%s): the Pd belongs to another device", cfg.dev_name.c_str());
        return Status::invalid_param;
    }
    auto dev = std::make_unique<DeviceImpl>(cfg, std::move(pdi));
    const Status s = dev->init();
    if (s != Status::ok)
        return s;
    out = std::move(dev);
    return Status::ok;
}

DeviceImpl::DeviceImpl(const DeviceConfig& cfg, std::shared_ptr<PdImpl> pd) : cfg_(cfg), pd_(std::move(pd)) {}

Status DeviceImpl::init() {
    ibv_context* ctx = pd_->ctx();
    const char* name = cfg_.dev_name.c_str();
    if (ibv_query_device(ctx, &dev_attr_) != 0 || ibv_query_port(ctx, cfg_.port, &port_attr_) != 0) {
        ROCE_ERROR("verbs: %s port %u: cannot query the device/port", name, unsigned(cfg_.port));
        return Status::no_device;
    }
    // One listener never takes more than half the device's QPs (max_qp is shared by every
    // process and device instance on it).
    cfg_.max_passive_qps = std::min<uint32_t>(cfg_.max_passive_qps, std::max(1, dev_attr_.max_qp / 2));
    if (port_attr_.state != IBV_PORT_ACTIVE) {
        ROCE_ERROR("verbs: %s port %u is not active (state %d)", name, unsigned(cfg_.port), int(port_attr_.state));
        return Status::no_device;
    }
    if (port_attr_.link_layer != IBV_LINK_LAYER_ETHERNET) {
        ROCE_ERROR("verbs: %s port %u is not RoCE (link layer %d)", name, unsigned(cfg_.port), int(port_attr_.link_layer));
        return Status::no_device;
    }
    // rdma_cm sends in the device's default RoCE mode (v2): a v1 entry cannot carry our connections.
    if (cfg_.gid.version == gid::RoceVersion::v1) {
        ROCE_ERROR("verbs: %s port %u: %s", name, unsigned(cfg_.port),
                   gid::config_error("ROCE_VERSION", "1", "rc_roce on an RDMA device connects through rdma_cm, "
                                     "which uses RoCE v2", "auto, 2").c_str());
        return Status::invalid_param;
    }
    std::string err;
    Status s = load_gid_context(cfg_.dev_name, cfg_.port, cfg_.gid, gid_ctx_, err, cfg_.sysroot);
    if (s == Status::ok) {
        s = choose_gid(gid_ctx_, nullptr,
                       [this](const gid::GidEntry& e, const gid::PeerGid*, std::string& why) { return validate_gid(e, why); },
                       gid_, err);
    }
    if (s != Status::ok) {
        ROCE_ERROR("verbs: %s port %u: %s", name, unsigned(cfg_.port), err.c_str());
        return s;
    }
    addr_ = gid_.addr;
    tc_ = gid::resolve_traffic_class(cfg_.gid, gid_ctx_.port.default_tclass);
    ROCE_INFO("verbs: %s port %u: GID index %d (%s); traffic class %s", name, unsigned(cfg_.port), gid_.index,
              gid_.reason.c_str(), tc_.str().c_str());
    signal_every_ = signal_interval(cfg_.signal_every, cfg_.sq_depth);

    channel_.reset(ibv_create_comp_channel(ctx));
    if (!channel_ || !set_nonblock(channel_->fd)) {
        ROCE_ERROR("verbs: %s: ibv_create_comp_channel failed: %s", name, std::strerror(errno));
        return Status::io_error;
    }
    const int scq = int(std::min<uint32_t>(cfg_.cq_size, uint32_t(dev_attr_.max_cqe)));
    const int rcq = int(std::min<uint32_t>(cfg_.recv_buffers + 16, uint32_t(dev_attr_.max_cqe)));
    send_cq_.reset(ibv_create_cq(ctx, scq, nullptr, channel_.get(), 0));
    recv_cq_.reset(ibv_create_cq(ctx, rcq, nullptr, channel_.get(), 0));
    if (!send_cq_ || !recv_cq_) {
        ROCE_ERROR("verbs: %s: ibv_create_cq failed: %s", name, std::strerror(errno));
        return Status::io_error;
    }
    cfg_.cq_size = uint32_t(send_cq_->cqe);
    ibv_srq_init_attr sa{};
    sa.attr.max_wr = cfg_.recv_buffers;
    sa.attr.max_sge = 1;
    srq_.reset(ibv_create_srq(pd_->pd(), &sa));
    if (!srq_) {
        ROCE_ERROR("verbs: %s: ibv_create_srq(%u) failed: %s", name, cfg_.recv_buffers, std::strerror(errno));
        return Status::io_error;
    }
    const size_t rbytes = size_t(cfg_.recv_buffers) * cfg_.max_recv_msg;
    recv_buf_.reset(new (std::nothrow) uint8_t[rbytes]);
    const size_t bbytes = size_t(cfg_.bounce_slots) * cfg_.bounce_size;
    bounce_buf_.reset(new (std::nothrow) uint8_t[bbytes]);
    if (!recv_buf_ || !bounce_buf_)
        return Status::no_resource;
    recv_mr_.reset(ibv_reg_mr(pd_->pd(), recv_buf_.get(), rbytes, IBV_ACCESS_LOCAL_WRITE));
    bounce_mr_.reset(ibv_reg_mr(pd_->pd(), bounce_buf_.get(), bbytes, IBV_ACCESS_LOCAL_WRITE));
    if (!recv_mr_ || !bounce_mr_) {
        ROCE_ERROR("verbs: %s: registering %zu + %zu bytes of buffers failed: %s", name, rbytes,
                   bbytes, std::strerror(errno));
        return Status::no_resource;
    }
    bounce_free_.reserve(cfg_.bounce_slots);
    for (uint32_t i = cfg_.bounce_slots; i-- > 0;)
        bounce_free_.push_back(int(i));
    for (uint32_t i = 0; i < cfg_.recv_buffers; ++i)
        repost_recv(i);
    // At most an eighth of the buffers wait for a batch, so the SRQ stays nearly full (a few
    // buffers: one at a time, as before).
    repost_batch_ = std::clamp<uint32_t>(cfg_.recv_buffers / 8, 1, 16);
    repost_.reserve(repost_batch_);

    notify_fd_ = Fd(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    epoll_fd_ = Fd(epoll_create1(EPOLL_CLOEXEC));
    if (!notify_fd_ || !epoll_fd_)
        return Status::io_error;
    cc_mode_ = resolve_cc_mode();
    for (int fd : {channel_->fd, notify_fd_.get()}) {
        epoll_event ev{};
        ev.events = EPOLLIN;
        ev.data.fd = fd;
        if (epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, fd, &ev) != 0)
            return Status::io_error;
    }
    return cm_init();
}

// Each entry is probed once per device (gid_entry_sends): choices per peer reuse the answer.
bool DeviceImpl::validate_gid(const gid::GidEntry& e, std::string& why) {
    auto it = gid_checked_.find(e.index);
    if (it == gid_checked_.end()) {
        std::string res;
        gid_entry_sends(pd_->pd(), cfg_.port, e, res);
        it = gid_checked_.emplace(e.index, std::move(res)).first;
    }
    why = it->second;
    return why.empty();
}

DeviceImpl::~DeviceImpl() {
    if (cm_thread_.joinable()) {
        stop_ = true;
        uint64_t one = 1;
        (void)!write(wake_fd_.get(), &one, sizeof(one));
        cm_thread_.join();
    }
    std::lock_guard lk(mu_);
    for (auto& [qpn, q] : qps_)
        release_qp(*q, Status::canceled);
    last_qp_[0] = last_qp_[1] = nullptr;
    qps_.clear();           // QPs and their rdma_cm ids before the listener and the channel
    tokens_.clear();
    listen_id_.reset();
}

DeviceStats DeviceImpl::stats() const {
    std::lock_guard lk(mu_);
    return st_;
}

RcDevice::Counters DeviceImpl::counters() const {
    const DeviceStats st = stats();
    Counters out;
#define ROCE_VERBS_STAT(f) out.emplace_back(#f, st.f);
    ROCE_VERBS_STAT(sends) ROCE_VERBS_STAT(writes) ROCE_VERBS_STAT(reads) ROCE_VERBS_STAT(atomics)
    ROCE_VERBS_STAT(inline_sends) ROCE_VERBS_STAT(bounce_copies) ROCE_VERBS_STAT(temp_regs)
    ROCE_VERBS_STAT(signaled) ROCE_VERBS_STAT(unsignaled) ROCE_VERBS_STAT(untracked_sends)
    ROCE_VERBS_STAT(send_cqes)
    ROCE_VERBS_STAT(recv_cqes) ROCE_VERBS_STAT(recv_errors) ROCE_VERBS_STAT(cm_established)
    ROCE_VERBS_STAT(cm_rejected) ROCE_VERBS_STAT(cm_refused) ROCE_VERBS_STAT(cm_errors)
    ROCE_VERBS_STAT(wr_errors)
#undef ROCE_VERBS_STAT
    // The port's own counters: what the NIC (or rxe) saw on the wire — retries, sequence errors,
    // RNR, CNPs/ECN on NICs that count them — named hw_<sysfs name>.
    for (auto& [name, value] : read_port_hw_counters(cfg_.dev_name, cfg_.port))
        out.emplace_back("hw_" + name, value);
    return out;
}

static RcDevice::Counters qp_stat_list(const VQpStats& st) {
    RcDevice::Counters out;
#define ROCE_NAMED(f) out.emplace_back(#f, st.f);
    ROCE_VERBS_QP_STATS(ROCE_NAMED)
#undef ROCE_NAMED
    return out;
}

std::vector<RcDevice::QpCounters> DeviceImpl::qp_counters() const {
    std::lock_guard lk(mu_);
    std::vector<QpCounters> out;
    out.reserve(qps_.size());
    for (const auto& [qpn, q] : qps_) {
        QpCounters c{qpn, q->dest_qpn, q->peer.to_string(), q->state, {}};
        c.counters = qp_stat_list(q->st);
        c.counters.emplace_back("outstanding_now", q->sq.size() + q->n_anon);
        // In the hardware send queue (posted, completion not polled yet) and its size: the
        // first may not exceed the second (mlx5 frees a slot only when its CQE is polled).
        c.counters.emplace_back("posted_now", hw_posted(*q));
        c.counters.emplace_back("hw_send_queue_now", q->max_send_wr);
        c.counters.emplace_back("rd_atomic_now", q->rd_atomic);
        c.counters.emplace_back("dest_rd_atomic_now", q->dest_rd_atomic);
        if (q->cc && q->cc->delay()) {
            c.counters.emplace_back("cc_window_bytes_now", uint64_t(q->cc->cwnd_bytes()));
            c.counters.emplace_back("srtt_us_now", uint64_t(q->cc->delay()->srtt() / 1000));
        }
        if (q->cc)
            c.counters.emplace_back("cc_outstanding_bytes_now", q->cc_outstanding);
        out.push_back(std::move(c));
    }
    for (const auto& [peer, st] : closed_qps_)
        out.push_back(QpCounters{0, 0, peer, QpState::error, qp_stat_list(st), true});
    return out;
}

VQp* DeviceImpl::find_qp_slow(uint32_t qpn) {
    auto it = qps_.find(qpn);
    return it == qps_.end() ? nullptr : it->second.get();
}

void DeviceImpl::insert_qp(std::unique_ptr<VQp> q) {
    last_qp_[0] = last_qp_[1] = nullptr;   // in case it was an entry replaced here
    const uint32_t qpn = q->qpn;
    q->next_seq = cfg_.first_seq;
    passive_qps_ += q->passive;
    qps_[qpn] = std::move(q);
}

VQp* DeviceImpl::find_token(uint64_t token) {
    auto it = tokens_.find(token);
    return it == tokens_.end() ? nullptr : find_qp(it->second);
}

void DeviceImpl::notify() {
    notified_.store(true, std::memory_order_release);
    uint64_t one = 1;
    (void)!write(notify_fd_.get(), &one, sizeof(one));
}

void DeviceImpl::flush_reposts() {
    const int rc = post_recv_chain(
            repost_, 0,
            [&](uint32_t idx) {
                return ibv_sge{reinterpret_cast<uintptr_t>(recv_buf_.get() + size_t(idx) * cfg_.max_recv_msg),
                               cfg_.max_recv_msg, recv_mr_->lkey};
            },
            [&](ibv_recv_wr* wr, ibv_recv_wr** bad) { return ibv_post_srq_recv(srq_.get(), wr, bad); });
    if (rc != 0)
        ROCE_ERROR("verbs: %s: ibv_post_srq_recv failed: %s (receive buffers are lost)",
                   cfg_.dev_name.c_str(), std::strerror(rc));
    repost_.clear();
}

void DeviceImpl::repost_recv(uint32_t idx) {
    ibv_sge sge{reinterpret_cast<uintptr_t>(recv_buf_.get() + size_t(idx) * cfg_.max_recv_msg),
                cfg_.max_recv_msg, recv_mr_->lkey};
    ibv_recv_wr wr{};
    wr.wr_id = idx;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    if (const int rc = ibv_post_srq_recv(srq_.get(), &wr, &bad); rc != 0)
        ROCE_ERROR("verbs: %s: ibv_post_srq_recv failed: %s (a receive buffer is lost)",
                   cfg_.dev_name.c_str(), std::strerror(rc));
}

// ---- queue pairs

Status DeviceImpl::new_ibv_qp(VQp& q) {
    ibv_qp_init_attr a{};
    a.send_cq = send_cq_.get();
    a.recv_cq = recv_cq_.get();
    a.srq = srq_.get();
    a.qp_type = IBV_QPT_RC;
    a.sq_sig_all = 0;
    // Room for an internal reclaim WRITE after every unsignaled run.
    a.cap.max_send_wr = std::min<uint32_t>(2 * cfg_.sq_depth, uint32_t(dev_attr_.max_qp_wr));
    a.cap.max_send_sge = std::min(4, dev_attr_.max_sge);
    a.cap.max_inline_data = cfg_.max_inline;
    ibv_qp* qp = create_qp_inline_or_not(pd_->pd(), a);
    if (!qp) {
        const int err = errno;   // (before the log line can change it)
        ROCE_ERROR("verbs: %s: ibv_create_qp failed: %s", cfg_.dev_name.c_str(), std::strerror(err));
        return err == ENOMEM ? Status::no_resource : Status::io_error;
    }
    q.qp.reset(qp);
    q.qpn = qp->qp_num;
    q.gen = next_gen_++;
    q.max_inline = a.cap.max_inline_data;
    q.max_send_wr = a.cap.max_send_wr;   // (the provider's, which may be more than asked)
    cc_init(q);
    return Status::ok;
}

Status DeviceImpl::create_qp(uint32_t& qpn) {
    std::lock_guard lk(mu_);
    auto q = std::make_unique<VQp>();
    const Status s = new_ibv_qp(*q);
    if (s != Status::ok)
        return s;
    qpn = q->qpn;
    insert_qp(std::move(q));
    return Status::ok;
}

QpState DeviceImpl::qp_state(uint32_t qpn) const {
    std::lock_guard lk(mu_);
    auto it = qps_.find(qpn);
    return it == qps_.end() ? QpState::error : it->second->state;
}

size_t DeviceImpl::outstanding(uint32_t qpn) const {
    std::lock_guard lk(mu_);
    if (qpn != 0) {
        auto it = qps_.find(qpn);
        return it == qps_.end() ? 0 : it->second->sq.size() - it->second->n_internal - it->second->n_pieces + it->second->n_anon;
    }
    size_t n = 0;
    for (auto& [k, q] : qps_)
        n += q->sq.size() - q->n_internal - q->n_pieces + q->n_anon;
    return n;
}

void DeviceImpl::complete_lazy(uint32_t qpn) {
    std::lock_guard lk(mu_);
    if (qpn != 0) {
        if (VQp* q = find_qp(qpn); q && (!q->sq.empty() || q->n_anon))
            q->lazy_wanted = true;
        return;
    }
    for (auto& [n, q] : qps_) {
        if (!q->sq.empty() || q->n_anon)
            q->lazy_wanted = true;
    }
}

// Pending (never posted) WRs complete with `st`; posted ones flush through the CQ once the HCA
// has moved the QP to error.
void DeviceImpl::fail_qp(VQp& q, Status st) {
    q.state = QpState::error;
    std::deque<WrRec> pend;
    while (q.sq.size() > q.n_posted) {
        pend.push_front(std::move(q.sq.back()));
        q.sq.pop_back();
    }
    total_wrs_ -= pend.size();
    for (WrRec& r : pend) {
        if (r.internal)
            --q.n_internal;
        if (r.piece)
            --q.n_pieces;
        finish(q, r, st);
    }
}

// Posted WRs flush only once the HW QP is in error, and unsignaled ones the HCA already finished
// leave no CQE at all (an error QP is not reclaimed later): a signaled WRITE posted first, while
// the HCA still has the QP in RTS, flushes with the others and retires them. Without this, a QP
// whose ibv_post_send failed kept its posted tail until destroy (its flush never ended).
// If that WRITE cannot be posted either (a failure that persists), the tail stays until the QP
// is destroyed (release_qp completes it as canceled): UCX's rc_verbs aborts the process there.
void DeviceImpl::abort_qp(VQp& q, Status st) {
    fail_qp(q, st);
    if (q.unsignaled_run != 0) {
        reclaim_tail(q);
        if (q.unsignaled_run != 0)
            ROCE_WARN("verbs: QP %u: %u unsignaled work requests complete only when the QP is destroyed",
                      q.qpn, q.unsignaled_run);
    }
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_ERR;
    if (const int rc = ibv_modify_qp(q.qp.get(), &a, IBV_QP_STATE); rc != 0)
        ROCE_WARN("verbs: QP %u: ibv_modify_qp to error failed: %s", q.qpn, std::strerror(rc));
}

void DeviceImpl::release_qp(VQp& q, Status st) {
    if (q.id && (q.state == QpState::rts || q.state == QpState::connecting))
        rdma_disconnect(q.id.get());   // DREQ to the peer (its passive QP is freed)
    if (q.qp) {
        ibv_qp_attr a{};
        a.qp_state = IBV_QPS_ERR;
        ibv_modify_qp(q.qp.get(), &a, IBV_QP_STATE);
        q.qp.reset();   // the HCA no longer touches our buffers after this
    }
    q.id.reset();       // the CM thread acks events before it takes the lock: no wait here
    q.state = QpState::error;
    total_wrs_ -= q.sq.size();
    while (!q.sq.empty()) {
        WrRec r = std::move(q.sq.front());
        q.sq.pop_front();
        finish(q, r, st);
    }
    total_wrs_ -= q.n_anon;
    for (; !q.anon.empty(); q.anon.pop_front())
        finish_anon(q, q.anon.front().wr_id, q.anon.front().count, st);
    q.n_posted = q.n_internal = q.n_pieces = q.n_anon = 0;
    signaled_inflight_ -= q.signaled_inflight;
    q.signaled_inflight = q.unsignaled_run = 0;
    q.lazy_tail = q.lazy_wanted = false;
}

void DeviceImpl::erase_qp(uint32_t qpn) {
    auto it = qps_.find(qpn);
    if (it == qps_.end())
        return;
    if (it->second->token)
        tokens_.erase(it->second->token);
    std::erase(tails_, qpn);
    const VQp& q = *it->second;
    passive_qps_ -= q.passive;
    if (q.state != QpState::reset || q.st.sends + q.st.writes + q.st.reads + q.st.atomics)
        add_closed(closed_qps_, q.peer, q.st);
    for (VQp*& c : last_qp_) {
        if (c == it->second.get())
            c = nullptr;
    }
    qps_.erase(it);
}

Status DeviceImpl::destroy_qp(uint32_t qpn) {
    std::lock_guard lk(mu_);
    VQp* q = find_qp(qpn);
    if (!q)
        return Status::invalid_param;
    release_qp(*q, Status::canceled);
    erase_qp(qpn);
    notify();
    return Status::ok;
}

Status DeviceImpl::cancel_qp(uint32_t qpn) {
    std::lock_guard lk(mu_);
    VQp* q = find_qp(qpn);
    if (!q)
        return Status::invalid_param;
    if (q->state != QpState::error) {
        const bool connected = q->id && (q->state == QpState::rts || q->state == QpState::connecting);
        abort_qp(*q, Status::canceled);   // held WRs now; posted ones flush from the CQ
        if (connected)
            rdma_disconnect(q->id.get());   // DREQ: release_qp skips it for a QP in error
    }
    notify();
    return Status::ok;
}

} // namespace roce::verbs
