// verbs::Device: open/close, QP table, posting, completion moderation, progress and receive
// buffers. Connection management (rdma_cm) is in cm.cpp.
//
// How a payload reaches the HCA:
//   * inline (IBV_SEND_INLINE) when the QP is connected and the payload fits its max_inline: the
//     provider copies it during ibv_post_send, nothing to keep;
//   * copy semantics otherwise (SEND, WRITE with copy): a slot of the registered bounce pool, or a
//     temporary registered buffer when larger than a slot;
//   * zero-copy (WRITE without copy, READ): the Pd's region covering the buffer (found by
//     address); an unregistered buffer is registered for the operation (READs of up to one slot
//     land in a bounce slot instead and are copied out at completion).
// Completion moderation: a WR is signaled when the caller wants its completion (wr_id != 0 and
// not lazy), when it needs work at completion (READ via bounce, atomics, temporary registration),
// every `signal_every` WRs, or when bounce slots run low. An unsignaled tail left when the caller
// stops posting is reclaimed by progress() with a signaled zero-length RDMA WRITE (no rkey
// needed), so outstanding() drains to 0 and bounce slots come back. RC completes in order: a
// signaled CQE completes every earlier WR of its QP, and each of them gets its completion then.
// Lazy WRs (wr_id_lazy: the glue's AMs and PUTs without a completion callback, counted off by
// their completions for flush) are unsignaled as UCX's rc_verbs posts them: a ping-pong then
// costs no send CQE per message (measured in the rxe guest: the CQE and its handling were ~15%
// of rc_roce's instructions per am_lat iteration). A tail of lazy WRs is reclaimed only once the
// caller waits for it (complete_lazy, from the glue's flush), not after every idle progress,
// which in a ping-pong would add a WRITE per message. A failed WR completes with an error CQE
// whether signaled or not (man ibv_poll_cq), so an error is still seen.
#include <algorithm>
#include <arpa/inet.h>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "common/log.hpp"
#include "verbs/device_impl.hpp"
#include "verbs/ports.hpp"
#include "verbs/recv_chain.hpp"

namespace roce::verbs {

namespace {

Status status_of(ibv_wc_status s) {
    switch (s) {
    case IBV_WC_SUCCESS: return Status::ok;
    case IBV_WC_REM_ACCESS_ERR: return Status::remote_access;
    case IBV_WC_REM_INV_REQ_ERR:
    case IBV_WC_REM_OP_ERR: return Status::remote_invalid;
    case IBV_WC_RETRY_EXC_ERR:
    case IBV_WC_RNR_RETRY_EXC_ERR: return Status::timeout;
    case IBV_WC_WR_FLUSH_ERR: return Status::canceled;
    default: return Status::io_error;
    }
}

bool set_nonblock(int fd) {
    const int fl = fcntl(fd, F_GETFL);
    return fl >= 0 && fcntl(fd, F_SETFL, fl | O_NONBLOCK) == 0;
}
} // namespace

Status Device::open(const DeviceConfig& cfg, std::shared_ptr<Pd> pd, std::unique_ptr<Device>& out) {
    if (cfg.mtu != 256 && cfg.mtu != 512 && cfg.mtu != 1024 && cfg.mtu != 2048 && cfg.mtu != 4096)
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

// UCX's test of a RoCE GID: an address handle from the entry to its own address. It fails (EINVAL)
// on entries the kernel cannot send from (a misconfigured second NIC, a vanished netdev).
bool DeviceImpl::validate_gid(const gid::GidEntry& e, std::string& why) {
    auto it = gid_checked_.find(e.index);
    if (it == gid_checked_.end()) {
        ibv_ah_attr a{};
        a.is_global = 1;
        a.port_num = cfg_.port;
        a.grh.sgid_index = uint8_t(e.index);
        a.grh.hop_limit = 64;
        std::memcpy(a.grh.dgid.raw, e.gid.raw.b.data(), 16);
        std::string res;
        if (e.index > 255) {
            res = "index beyond the 8-bit sgid_index of an address handle";
        } else if (ibv_ah* ah = ibv_create_ah(pd_->pd(), &a)) {
            ibv_destroy_ah(ah);
        } else {
            res = std::string("ibv_create_ah: ") + std::strerror(errno);
        }
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
    ROCE_VERBS_STAT(cm_rejected) ROCE_VERBS_STAT(cm_errors) ROCE_VERBS_STAT(wr_errors)
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
        ROCE_ERROR("verbs: %s: ibv_create_qp failed: %s", cfg_.dev_name.c_str(), std::strerror(errno));
        return errno == ENOMEM ? Status::no_resource : Status::io_error;
    }
    q.qp.reset(qp);
    q.qpn = qp->qp_num;
    q.gen = next_gen_++;
    q.max_inline = a.cap.max_inline_data;
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

void DeviceImpl::finish(VQp& q, WrRec& r, Status st) {
    if (st == Status::ok) {
        const uint8_t* src = r.bounce >= 0 ? bounce_ptr(r.bounce) : r.temp_buf.get();
        if (r.copy_out && src)
            std::memcpy(r.copy_out, src, r.copy_len);
        if (r.result && src)
            std::memcpy(r.result, src, 8);
    }
    if (r.bounce >= 0) {
        bounce_free_.push_back(r.bounce);
        r.bounce = -1;
    }
    r.temp_mr.reset();
    r.temp_buf.reset();
    if (!r.internal && r.wr_id != 0)
        report(q, r.wr_id, r.op, st, 1);
}

void DeviceImpl::report(const VQp& q, uint64_t wr_id, OpKind op, Status st, uint32_t n) {
    if ((wr_id & wr_id_lazy) && !cq_.empty()) {
        Completion& last = cq_.back();
        if (last.wr_id == wr_id && last.qpn == q.qpn && last.op == op && last.status == st) {
            last.count += n;   // one completion for a run of lazy ones (RcDevice's Completion)
            return;
        }
    }
    cq_.push_back(Completion{wr_id, q.qpn, op, st, n});
    cq_len_.store(cq_.size(), std::memory_order_release);
    ++events_;
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
    if (q.state != QpState::reset || q.st.sends + q.st.writes + q.st.reads + q.st.atomics)
        closed_qps_[q.peer.to_string()] += q.st;
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

// ---- posting

Status DeviceImpl::admit(uint32_t qpn, VQp*& q) {
    q = find_qp(qpn);
    if (!q || q->state == QpState::reset)
        return Status::invalid_param;
    if (q->state == QpState::error)
        return Status::canceled;
    if (q->sq.size() - q->n_internal - q->n_pieces + q->n_anon >= cfg_.sq_depth)
        return Status::no_resource;
    if (total_wrs_ + 2 > cfg_.cq_size) {
        want_lazy_tails();
        return Status::no_resource;
    }
    return Status::ok;
}

// Out of a shared resource (CQ entries, bounce slots) that lazy tails of other QPs may hold:
// the next progress() reclaims them, else a caller retrying after progress could wait forever.
void DeviceImpl::want_lazy_tails() {
    for (uint32_t qpn : tails_) {
        if (VQp* q = find_qp(qpn))
            q->lazy_wanted = true;
    }
}

int DeviceImpl::take_bounce() {
    if (bounce_free_.empty()) {
        want_lazy_tails();
        return -1;
    }
    const int s = bounce_free_.back();
    bounce_free_.pop_back();
    return s;
}

Status DeviceImpl::stage_copy(WrRec& r, const iovec* iov, size_t n, size_t total) {
    uint8_t* dst;
    uint32_t lkey;
    if (total <= cfg_.bounce_size) {
        r.bounce = take_bounce();
        if (r.bounce < 0)
            return Status::no_resource;
        dst = bounce_ptr(r.bounce);
        lkey = bounce_mr_->lkey;
        ++st_.bounce_copies;
    } else {
        r.temp_buf.reset(new (std::nothrow) uint8_t[total]);
        if (!r.temp_buf)
            return Status::no_resource;
        r.temp_mr.reset(ibv_reg_mr(pd_->pd(), r.temp_buf.get(), total, IBV_ACCESS_LOCAL_WRITE));
        if (!r.temp_mr) {
            ROCE_WARN("verbs: registering a %zu-byte copy buffer failed: %s", total, std::strerror(errno));
            r.temp_buf.reset();
            return Status::no_resource;
        }
        dst = r.temp_buf.get();
        lkey = r.temp_mr->lkey;
        ++st_.temp_regs;
    }
    size_t off = 0;
    for (size_t i = 0; i < n; ++i) {
        if (iov[i].iov_len)
            std::memcpy(dst + off, iov[i].iov_base, iov[i].iov_len);
        off += iov[i].iov_len;
    }
    r.sge[0] = {reinterpret_cast<uintptr_t>(dst), uint32_t(total), lkey};
    r.wr.num_sge = 1;
    return Status::ok;
}

Status DeviceImpl::stage_local(WrRec& r, void* local, size_t len, bool to_local, uint32_t lkey) {
    if (lkey != 0 || pd_->find_lkey(local, len, lkey)) {
        r.sge[0] = {reinterpret_cast<uintptr_t>(local), uint32_t(len), lkey};
        r.wr.num_sge = 1;
        return Status::ok;
    }
    if (len <= cfg_.bounce_size) {
        r.bounce = take_bounce();
        if (r.bounce < 0)
            return Status::no_resource;
        if (to_local) {
            r.copy_out = local;
            r.copy_len = len;
        } else {
            std::memcpy(bounce_ptr(r.bounce), local, len);
        }
        r.sge[0] = {reinterpret_cast<uintptr_t>(bounce_ptr(r.bounce)), uint32_t(len), bounce_mr_->lkey};
        r.wr.num_sge = 1;
        ++st_.bounce_copies;
        return Status::ok;
    }
    r.temp_mr.reset(ibv_reg_mr(pd_->pd(), local, len, IBV_ACCESS_LOCAL_WRITE));
    if (!r.temp_mr) {
        ROCE_WARN("verbs: registering a %zu-byte local buffer failed: %s", len, std::strerror(errno));
        return Status::no_resource;
    }
    ++st_.temp_regs;
    r.sge[0] = {reinterpret_cast<uintptr_t>(local), uint32_t(len), r.temp_mr->lkey};
    r.wr.num_sge = 1;
    return Status::ok;
}

bool DeviceImpl::post_hw(VQp& q, WrRec& r) {
    const bool lazy = (r.wr_id & wr_id_lazy) != 0;
    const bool sig = (r.wr_id != 0 && !lazy) || r.internal || r.copy_out || r.result || r.temp_mr ||
                     r.wr.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD || r.wr.opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
                     (q.signaled_inflight == 0 && !lazy) || moderation_due(q) || cc_wants_signal(q, r);
    r.wr.wr_id = ibv_wr_id(q, r.seq);
    r.wr.sg_list = r.wr.num_sge ? r.sge : nullptr;
    r.wr.next = nullptr;
    if (sig)
        r.wr.send_flags |= IBV_SEND_SIGNALED;
    ibv_send_wr* bad = nullptr;
    const int rc = r.seq == cfg_.fail_post_seq ? ENOMEM : ibv_post_send(q.qp.get(), &r.wr, &bad);
    if (rc != 0) {
        ROCE_WARN("verbs: QP %u: ibv_post_send failed: %s", q.qpn, std::strerror(rc));
        return false;
    }
    r.posted = true;
    ++q.n_posted;
    q.posted_since_progress = true;
    r.signaled = sig;
    cc_posted(q, r, cc_now());
    if (sig) {
        ++q.signaled_inflight;
        ++signaled_inflight_;
        q.unsignaled_run = 0;
        ++st_.signaled;
    } else {
        note_unsignaled(q, lazy);
    }
    return true;
}

// Every signal_every_-th WR is signaled, and one before the bounce slots run short (a signaled
// CQE is what hands them back).
bool DeviceImpl::moderation_due(const VQp& q) const {
    return q.unsignaled_run + 1 >= signal_every_ || bounce_free_.size() < signal_every_;
}

// An unsignaled WR extends its QP's tail; the first one puts the QP on the list progress()
// reclaims tails from.
void DeviceImpl::note_unsignaled(VQp& q, bool lazy) {
    if (q.unsignaled_run++ == 0) {
        tails_.push_back(q.qpn);
        q.lazy_tail = true;
    }
    q.lazy_tail &= lazy;
    ++st_.unsignaled;
}

Status DeviceImpl::submit(VQp& q) {
    WrRec* rec = &q.sq.back();
    rec->seq = q.next_seq++;
    switch (rec->op) {
    case OpKind::send: ++st_.sends; ++q.st.sends; break;
    case OpKind::write: ++st_.writes; ++q.st.writes; break;
    case OpKind::read: ++st_.reads; ++q.st.reads; break;
    default: ++st_.atomics; ++q.st.atomics; break;
    }
    for (int i = 0; i < rec->wr.num_sge; ++i)
        rec->cc_bytes += rec->sge[i].length;
    q.st.posted_bytes += rec->cc_bytes;
    if (const uint32_t chunk = cc_chunk(q); chunk && rec->cc_bytes > chunk && rec->wr.num_sge == 1 &&
        (rec->op == OpKind::write || rec->op == OpKind::read) && !(rec->wr.send_flags & IBV_SEND_INLINE)) {
        // Pieces for the window (congestion.cpp); the last one keeps the caller's completion and
        // the resources, and completes last (RC is in order). The request leaves the queue while
        // its pieces go in ahead of it.
        WrRec whole = std::move(q.sq.back());
        q.sq.pop_back();
        for (uint32_t off = 0; whole.cc_bytes - off > chunk; off += chunk) {
            WrRec& p = new_wr(q);
            p.seq = q.next_seq++;
            p.op = whole.op;
            p.wr = whole.wr;
            p.wr.wr.rdma.remote_addr += off;
            p.sge[0] = {whole.sge[0].addr + off, chunk, whole.sge[0].lkey};
            p.cc_bytes = chunk;
            p.piece = true;
            ++q.n_pieces;
            ++total_wrs_;
        }
        const uint32_t done = (whole.cc_bytes - 1) / chunk * chunk;
        whole.seq = q.next_seq++;
        whole.wr.wr.rdma.remote_addr += done;
        whole.sge[0].addr += done;
        whole.sge[0].length -= done;
        whole.cc_bytes -= done;
        q.sq.push_back(std::move(whole));
        rec = &q.sq.back();
    }
    // Goes out now unless the connection is not up yet, WRs wait ahead of it (held by congestion
    // control, or the pieces above) or the window holds this one.
    const bool behind = q.n_posted < q.sq.size() - 1;
    const bool held = q.state != QpState::rts || behind || !cc_may_post(q, *rec);
    if (held && (rec->wr.send_flags & IBV_SEND_INLINE)) {
        // An inline WR points at the caller's buffer, valid only during this call: copy it now
        // (measured: held inline AM headers posted later were garbage to UCP -> crashes).
        if (Status s = stage_inline(*rec); s != Status::ok)
            return drop_new_wr(q, s);
    }
    ++total_wrs_;
    if (held) {
        if (q.state == QpState::rts && behind)
            post_pending(q);   // what the window admits now; a failure completes them all with an error
        return Status::ok;
    }
    if (!post_hw(q, *rec)) {
        WrRec r = std::move(q.sq.back());
        q.sq.pop_back();
        --total_wrs_;
        r.wr_id = 0;   // refused: no completion
        finish(q, r, Status::no_resource);
        return Status::no_resource;
    }
    return Status::ok;
}

Status DeviceImpl::stage_inline(WrRec& r) {
    iovec iov[4];
    size_t total = 0;
    for (int i = 0; i < r.wr.num_sge; ++i) {
        iov[i] = {reinterpret_cast<void*>(r.sge[i].addr), r.sge[i].length};
        total += r.sge[i].length;
    }
    r.wr.send_flags &= ~unsigned(IBV_SEND_INLINE);
    --st_.inline_sends;
    return stage_copy(r, iov, size_t(r.wr.num_sge), total);
}

void DeviceImpl::post_pending(VQp& q) {
    while (q.n_posted < q.sq.size()) {
        if (!q.sq[q.n_posted].internal && !cc_may_post(q, q.sq[q.n_posted]))
            return;
        if (!post_hw(q, q.sq[q.n_posted])) {
            abort_qp(q, Status::io_error);
            notify();
            return;
        }
    }
}

void DeviceImpl::reclaim_tail(VQp& q) {
    WrRec r;
    r.internal = true;
    r.op = OpKind::write;
    r.wr.opcode = IBV_WR_RDMA_WRITE;   // zero length: no rkey/address checked
    r.seq = q.next_seq++;
    q.sq.push_back(std::move(r));
    ++total_wrs_;
    ++q.n_internal;
    if (!post_hw(q, q.sq.back())) {
        q.sq.pop_back();
        --total_wrs_;
        --q.n_internal;
    }
}

Status DeviceImpl::post_send(uint32_t qpn, uint64_t wr_id, const iovec* iov, size_t iovcnt,
                             const uint32_t* imm) {
    std::lock_guard lk(mu_);
    VQp* q;
    if (Status s = admit(qpn, q); s != Status::ok)
        return s;
    size_t total = 0;
    for (size_t i = 0; i < iovcnt; ++i)
        total += iov[i].iov_len;
    if (total > 0x7fffffffu)
        return Status::invalid_param;
    if ((wr_id & wr_id_lazy) && post_send_untracked(*q, wr_id, iov, iovcnt, imm, total))
        return Status::ok;
    WrRec& r = new_wr(*q);
    r.wr_id = wr_id;
    r.op = OpKind::send;
    r.wr.opcode = imm ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND;
    if (imm)
        r.wr.imm_data = htonl(*imm);
    if (total == 0) {
        r.wr.num_sge = 0;
    } else if (q->state == QpState::rts && total <= q->max_inline && iovcnt <= 4) {
        r.wr.num_sge = inline_sges(r.sge, iov, iovcnt);
        r.wr.send_flags = IBV_SEND_INLINE;   // copied by ibv_post_send
        ++st_.inline_sends;
    } else {
        if (Status s = stage_copy(r, iov, iovcnt, total); s != Status::ok)
            return drop_new_wr(*q, s);
    }
    return submit(*q);
}

Status DeviceImpl::post_write(uint32_t qpn, uint64_t wr_id, const void* local, size_t len,
                              uint64_t remote_va, uint32_t rkey, bool copy, uint32_t lkey) {
    if (len > 0x7fffffffu || (len && !local))
        return Status::invalid_param;
    std::lock_guard lk(mu_);
    VQp* q;
    if (Status s = admit(qpn, q); s != Status::ok)
        return s;
    WrRec& r = new_wr(*q);
    r.wr_id = wr_id;
    r.op = OpKind::write;
    r.wr.opcode = IBV_WR_RDMA_WRITE;
    r.wr.wr.rdma.remote_addr = remote_va;
    r.wr.wr.rdma.rkey = rkey;
    Status s = Status::ok;
    if (len == 0) {
        r.wr.num_sge = 0;
    } else if (q->state == QpState::rts && len <= q->max_inline) {
        r.sge[0] = {reinterpret_cast<uintptr_t>(local), uint32_t(len), 0};
        r.wr.num_sge = 1;
        r.wr.send_flags = IBV_SEND_INLINE;
        ++st_.inline_sends;
    } else if (copy) {
        const iovec one{const_cast<void*>(local), len};
        s = stage_copy(r, &one, 1, len);
    } else {
        s = stage_local(r, const_cast<void*>(local), len, false, lkey);
    }
    if (s != Status::ok)
        return drop_new_wr(*q, s);
    return submit(*q);
}

Status DeviceImpl::post_read(uint32_t qpn, uint64_t wr_id, void* local, size_t len,
                             uint64_t remote_va, uint32_t rkey, uint32_t lkey) {
    if (len > 0x7fffffffu || (len && !local))
        return Status::invalid_param;
    std::lock_guard lk(mu_);
    VQp* q;
    if (Status s = admit(qpn, q); s != Status::ok)
        return s;
    WrRec& r = new_wr(*q);
    r.wr_id = wr_id;
    r.op = OpKind::read;
    r.wr.opcode = IBV_WR_RDMA_READ;
    r.wr.wr.rdma.remote_addr = remote_va;
    r.wr.wr.rdma.rkey = rkey;
    if (len) {
        if (Status s = stage_local(r, local, len, true, lkey); s != Status::ok)
            return drop_new_wr(*q, s);
    }
    return submit(*q);
}

Status DeviceImpl::post_fetch_add(uint32_t qpn, uint64_t wr_id, uint64_t remote_va, uint32_t rkey,
                                  uint64_t add, uint64_t* result) {
    return post_atomic(qpn, wr_id, OpKind::fetch_add, remote_va, rkey, add, 0, result);
}

Status DeviceImpl::post_cmp_swap(uint32_t qpn, uint64_t wr_id, uint64_t remote_va, uint32_t rkey,
                                 uint64_t compare, uint64_t swap, uint64_t* result) {
    return post_atomic(qpn, wr_id, OpKind::cmp_swap, remote_va, rkey, compare, swap, result);
}

// The original value lands in a bounce slot and is copied to *result at the completion.
Status DeviceImpl::post_atomic(uint32_t qpn, uint64_t wr_id, OpKind op, uint64_t remote_va, uint32_t rkey,
                               uint64_t compare_add, uint64_t swap, uint64_t* result) {
    if (remote_va & 7)
        return Status::invalid_param;
    std::lock_guard lk(mu_);
    if (dev_attr_.atomic_cap == IBV_ATOMIC_NONE)
        return Status::unsupported;
    VQp* q;
    if (Status s = admit(qpn, q); s != Status::ok)
        return s;
    WrRec& r = new_wr(*q);
    r.wr_id = wr_id;
    r.op = op;
    r.bounce = take_bounce();
    if (r.bounce < 0)
        return drop_new_wr(*q, Status::no_resource);
    r.result = result;
    r.sge[0] = {reinterpret_cast<uintptr_t>(bounce_ptr(r.bounce)), 8, bounce_mr_->lkey};
    r.wr.num_sge = 1;
    r.wr.opcode = op == OpKind::fetch_add ? IBV_WR_ATOMIC_FETCH_AND_ADD : IBV_WR_ATOMIC_CMP_AND_SWP;
    r.wr.wr.atomic.remote_addr = remote_va;
    r.wr.wr.atomic.rkey = rkey;
    r.wr.wr.atomic.compare_add = compare_add;
    r.wr.wr.atomic.swap = swap;
    return submit(*q);
}

// ---- progress

void DeviceImpl::handle_send_wc(const ibv_wc& wc) {
    ++st_.send_cqes;
    VQp* q = find_qp(wc.qp_num);
    if (!q || (wc.wr_id >> 40) != (q->gen & wr_gen_mask))
        return;   // a QP destroyed since (its WRs were completed as canceled then)
    // The wr_id carries the low 40 bits of the 64-bit sequence number: widen them against the
    // oldest WR still posted (what is outstanding spans far less than 2^40), else after 2^40
    // work requests on one QP no CQE would retire anything any more.
    uint64_t seq = wc.wr_id & wr_seq_mask;
    {
        uint64_t oldest = UINT64_MAX;
        if (!q->sq.empty() && q->sq.front().posted)
            oldest = q->sq.front().seq;
        if (!q->anon.empty())
            oldest = std::min(oldest, q->anon.front().first_seq);
        if (oldest != UINT64_MAX) {
            const uint64_t ahead = (seq - oldest) & wr_seq_mask;
            seq = ahead < (wr_seq_mask >> 1) ? oldest + ahead : oldest - 1;   // behind: retires nothing
        }
    }
    const Status st = status_of(wc.status);
    const uint64_t now = cc_now();
    for (;;) {
        const bool rec = !q->sq.empty() && q->sq.front().posted && q->sq.front().seq <= seq;
        if (!q->anon.empty() && q->anon.front().first_seq <= seq &&
            (!rec || q->anon.front().first_seq < q->sq.front().seq)) {
            // Untracked SENDs up to the CQE's WR or the next record, whichever comes first; the
            // CQE's own WR (an error CQE) gets its status, the ones before it completed.
            AnonRun& a = q->anon.front();
            const uint64_t last = rec ? std::min(seq, q->sq.front().seq - 1) : seq;
            const uint32_t n = uint32_t(std::min<uint64_t>(a.count, last - a.first_seq + 1));
            const bool own = a.first_seq + n - 1 == seq;
            finish_anon(*q, a.wr_id, n - own, Status::ok);
            if (own)
                finish_anon(*q, a.wr_id, 1, st);
            q->n_anon -= n;
            total_wrs_ -= n;
            a.first_seq += n;
            a.count -= n;
            if (a.count == 0)
                q->anon.pop_front();
            continue;
        }
        if (!rec)
            break;
        // Finished in its slot (finish() queues a completion, nothing that touches sq): moving
        // the ~300-byte record out first cost as much as the rest of the loop.
        WrRec& r = q->sq.front();
        cc_completed(*q, r, r.seq == seq && wc.status == IBV_WC_SUCCESS, now);
        --q->n_posted;
        --total_wrs_;
        if (r.internal)
            --q->n_internal;
        if (r.piece)
            --q->n_pieces;
        if (r.signaled) {
            --q->signaled_inflight;
            --signaled_inflight_;
        }
        finish(*q, r, r.seq == seq ? st : Status::ok);
        q->sq.pop_front();
    }
    if (q->sq.empty() && q->n_anon == 0)
        q->lazy_wanted = false;   // what complete_lazy() waited for is done
    if (wc.status != IBV_WC_SUCCESS) {
        if (q->state != QpState::error && wc.status != IBV_WC_WR_FLUSH_ERR) {
            ++st_.wr_errors;
            ++q->st.wr_errors;
            ROCE_WARN("verbs: QP %u: work request failed: %s (%s); the QP is in error", q->qpn,
                      ibv_wc_status_str(wc.status), std::string(to_string(st)).c_str());
        }
        if (q->state != QpState::error)
            fail_qp(*q, Status::canceled);
    } else if (q->n_posted < q->sq.size() && q->state == QpState::rts) {
        post_pending(*q);   // the window opened
    }
}

unsigned DeviceImpl::poll_cqs(bool all) {
    const uint64_t before = events_;
    ibv_wc wc[32];
    int n;
    // The send CQ gets a CQE for a signaled WR, or for a failed one (signaled or not). With no
    // signaled WR in flight (a ping-pong of lazy sends) it is polled every 16th round only: an
    // error is still seen within 16 progress calls, and each empty poll cost ~40 instructions
    // (librxe takes the CQ's spinlock) two or three times per ping-pong iteration.
    if (all || signaled_inflight_ != 0 || ++send_poll_skips_ >= 16) {
        send_poll_skips_ = 0;
        do {
            n = ibv_poll_cq(send_cq_.get(), 32, wc);
            if (n > 0 && send_armed_)
                send_maybe_ev_ = true;
            for (int i = 0; i < n; ++i)
                handle_send_wc(wc[i]);
        } while (n == 32);
    }
    do {
        n = ibv_poll_cq(recv_cq_.get(), 32, wc);
        if (n > 0 && recv_armed_)
            recv_maybe_ev_ = true;
        for (int i = 0; i < n; ++i) {
            ++st_.recv_cqes;
            const uint32_t idx = uint32_t(wc[i].wr_id);
            if (wc[i].status != IBV_WC_SUCCESS || !(wc[i].opcode & IBV_WC_RECV)) {
                if (wc[i].status != IBV_WC_WR_FLUSH_ERR) {
                    ++st_.recv_errors;
                    ROCE_WARN("verbs: QP %u: receive failed: %s", wc[i].qp_num, ibv_wc_status_str(wc[i].status));
                }
                repost_recv(idx);
                continue;
            }
            const bool imm = wc[i].wc_flags & IBV_WC_WITH_IMM;
            rq_.push_back({idx, wc[i].byte_len, wc[i].qp_num, imm, imm ? ntohl(wc[i].imm_data) : 0});
            rq_len_.store(rq_.size(), std::memory_order_release);
            ++st_.recv_messages;
            if (VQp* q = find_qp(wc[i].qp_num)) {
                ++q->st.recv_messages;
                q->st.rx_bytes += wc[i].byte_len;
            }
            ++events_;
        }
    } while (n == 32);
    return unsigned(events_ - before);
}

unsigned DeviceImpl::progress() {
    std::lock_guard lk(mu_);
    return progress_locked();
}

unsigned DeviceImpl::progress_locked() {
    if (repost_.size() >= repost_batch_)
        flush_reposts();
    if (notified_.load(std::memory_order_relaxed) && notified_.exchange(false, std::memory_order_acquire)) {
        uint64_t v;
        (void)!read(notify_fd_.get(), &v, sizeof(v));
    }
    poll_cqs();
    if (!held_.empty())
        cc_progress();
    // Consume completion-channel events (the fd is non-blocking) only when one may be queued: a
    // CQE came while the CQ was armed. Keeps the common path free of syscalls.
    if (send_maybe_ev_ || recv_maybe_ev_) {
        ibv_cq* cq;
        void* ctx;
        unsigned ns = 0, nr = 0;
        while (ibv_get_cq_event(channel_.get(), &cq, &ctx) == 0)
            (cq == send_cq_.get() ? ns : nr)++;
        if (ns) {
            ibv_ack_cq_events(send_cq_.get(), ns);
            send_armed_ = send_maybe_ev_ = false;
        }
        if (nr) {
            ibv_ack_cq_events(recv_cq_.get(), nr);
            recv_armed_ = recv_maybe_ev_ = false;
        }
    }
    // Unsignaled tails of QPs the caller stopped posting on. A caller about to sleep on the
    // event fd (arm requested) posts nothing more: a wanted tail goes now, or no event would come.
    const bool arming = arm_requested_.load(std::memory_order_relaxed);
    for (size_t i = 0; i < tails_.size();) {
        VQp* q = find_qp(tails_[i]);
        if (!q || q->unsignaled_run == 0 || q->state != QpState::rts) {
            tails_[i] = tails_.back();
            tails_.pop_back();
            continue;
        }
        if (q->lazy_tail && !q->lazy_wanted) {
            ++i;   // nobody waits for these yet (complete_lazy)
            continue;
        }
        if (q->n_posted != q->sq.size()) {
            // WRs held back (congestion window, READ cap) sit after the tail: a reclaim posted now
            // would overtake them in the queue, and post_pending would post it again instead of
            // them. They go out signaled or not later; the tail waits for that.
            ++i;
            continue;
        }
        if (q->posted_since_progress && !arming) {
            q->posted_since_progress = false;
            ++i;
            continue;
        }
        reclaim_tail(*q);
        if (q->unsignaled_run == 0) {
            tails_[i] = tails_.back();
            tails_.pop_back();
        } else {
            ++i;
        }
    }
    // Arm for event_fd, then poll again: a completion that raced the arm is not lost.
    bool again = false;
    if (arm_requested_.load(std::memory_order_relaxed) && arm_requested_.exchange(false, std::memory_order_relaxed)) {
        if (!send_armed_)
            again |= send_armed_ = ibv_req_notify_cq(send_cq_.get(), 0) == 0;
        if (!recv_armed_)
            again |= recv_armed_ = ibv_req_notify_cq(recv_cq_.get(), 0) == 0;
    }
    if (again)
        poll_cqs(true);
    const unsigned n = unsigned(events_ - events_reported_);
    events_reported_ = events_;
    return n;
}

size_t DeviceImpl::poll_completions(Completion* out, size_t max) {
    if (cq_len_.load(std::memory_order_acquire) == 0)
        return 0;
    std::lock_guard lk(mu_);
    size_t n = 0;
    while (n < max && !cq_.empty()) {
        out[n++] = cq_.front();
        cq_.pop_front();
    }
    cq_len_.store(cq_.size(), std::memory_order_release);
    return n;
}

// fn: poll_recv's std::function or progress_round's sink.
template <typename Fn>
size_t DeviceImpl::recv_locked(Fn&& fn, size_t max) {
    size_t n = 0;
    while (n < max && !rq_.empty()) {
        const RecvEntry e = rq_.front();
        rq_.pop_front();
        rq_len_.store(rq_.size(), std::memory_order_release);
        // The buffer goes back once fn is done with it (also when fn throws): at once with
        // batches of one, else with the next batch (progress()).
        struct Repost {
            DeviceImpl* d;
            uint32_t idx;
            ~Repost() {
                if (d->repost_batch_ == 1)
                    d->repost_recv(idx);
                else
                    d->repost_.push_back(idx);
            }
        } repost{this, e.idx};
        RecvMessage m{e.qpn, recv_buf_.get() + size_t(e.idx) * cfg_.max_recv_msg, e.len, e.has_imm, e.imm};
        ++n;
        fn(m);
    }
    return n;
}

size_t DeviceImpl::poll_recv(const std::function<void(const RecvMessage&)>& fn, size_t max) {
    if (rq_len_.load(std::memory_order_acquire) == 0)
        return 0;
    std::lock_guard lk(mu_);
    return recv_locked(fn, max);
}

// The owner's whole round under one acquisition of mu_. The callbacks run under it, as poll_recv's
// always did: they may re-enter the device (post, destroy a QP), and a completion queued meanwhile
// (a refused post's pending WRs) is handed out by this same loop.
unsigned DeviceImpl::progress_round(ProgressSink& sink, size_t max_recv) {
    std::lock_guard lk(mu_);
    unsigned count = progress_locked();
    while (!cq_.empty()) {
        const Completion c = cq_.front();
        cq_.pop_front();
        cq_len_.store(cq_.size(), std::memory_order_release);
        ++count;
        sink.completion(c);
    }
    if (!rq_.empty())
        count += unsigned(recv_locked([&sink](const RecvMessage& m) { sink.message(m); }, max_recv));
    return count;
}

} // namespace roce::verbs
