#include "verbs/ud.hpp"

#include <arpa/inet.h>
#include <algorithm>
#include <iterator>
#include <list>
#include <cerrno>
#include <cstring>
#include <fcntl.h>

#include "common/log.hpp"
#include "verbs/mtu.hpp"
#include "verbs/pd_impl.hpp"
#include "verbs/raii.hpp"
#include "verbs/recv_chain.hpp"
#include "wire/inet_csum.hpp"

namespace roce::verbs {

namespace {
constexpr size_t grh_bytes = 40;
constexpr uint64_t recv_tag = uint64_t(1) << 63;

class UdQpImpl final : public UdQp {
public:
    UdQpImpl(const UdConfig& cfg, std::shared_ptr<PdImpl> pd) : cfg_(cfg), pd_(std::move(pd)) {}
    // The QP first: a posted send may still name an address handle or a send buffer, which go
    // after it (members are destroyed in the reverse order of their declaration).
    ~UdQpImpl() override { qp_.reset(); }
    Status init();
    uint32_t qpn() const override { return qp_->qp_num; }
    const GidChoice& gid() const override { return gid_; }
    const gid::TrafficClass& traffic_class() const override { return tc_; }
    uint8_t class_id(const gid::TrafficClass& tc) override;
    UdDest address() const override {
        UdDest d;
        std::memcpy(d.gid, gid_.gid, 16);
        d.qpn = qp_->qp_num;
        return d;
    }
    uint32_t max_msg() const override { return send_mtu_; }
    Status post_send(uint64_t wr_id, const UdDest& dest, const iovec* iov, size_t iovcnt,
                     const uint32_t* imm, uint8_t cls) override;
    unsigned progress() override;
    int event_fd() const override { return channel_->fd; }
    void arm() override {
        armed_ = ibv_req_notify_cq(cq_.get(), 0) == 0;
    }
    size_t poll_completions(Completion* out, size_t max) override;
    size_t poll_recv(FunctionRef<void(const UdMessage&)> fn, size_t max) override;
    Errors errors() const override { return {send_errors_, recv_errors_}; }
    AhStats ah_stats() const override { return {ahs_.size(), ah_cap_, ah_evicted_}; }

private:
    struct Rx {
        uint32_t idx, len, src_qp;
        bool has_imm;
        uint32_t imm;
    };
    // Address handles per destination GID and class (the class is the handle's GRH traffic
    // class and SL): key = GID bytes + class id.
    using AhKey = std::array<uint8_t, 17>;
    // In the cache's use order (lru_: most recent first); last_seq: the sq_head_ of its last
    // send. An AH may go once that send completed (rxe looks the AH up when it processes the WR).
    struct AhEntry {
        AhPtr ah;
        uint64_t last_seq = 0;
        std::list<AhKey>::iterator lru;
    };
    ibv_ah* ah_for(const uint8_t* gid, uint8_t cls);
    ibv_ah* create_ah(const AhKey& k);
    bool evict_ah();   // the least recently used one no posted send still needs; false: none
    bool gid_still_ours();
    void drain_events();
    // One CQ batch: send completions free slots; receives go to `rx` (in CQ order).
    int poll_cq(Rx* rx, int& nrx);
    void send_completed(const ibv_wc& w);
    void deliver(const Rx& r, FunctionRef<void(const UdMessage&)> fn);
    void flush_reposts(bool all = false);
    uint8_t* rbuf(uint32_t idx) { return recv_buf_.get() + size_t(idx) * (grh_bytes + mtu_); }

    UdConfig cfg_;
    std::shared_ptr<PdImpl> pd_;
    GidChoice gid_;
    gid::TrafficClass tc_;                    // our own (init): class id 0
    std::vector<gid::TrafficClass> classes_;  // class_id()'s others: id i + 1
    bool warned_classes_ = false;
    uint32_t mtu_ = 0;        // the port's active MTU: receive buffer payload
    uint32_t send_mtu_ = 0;   // largest datagram we send: also the GID's netdev's (init)
    uint32_t max_inline_ = 0;   // what the QP granted
    uint32_t max_sge_ = 1;      // send gather entries the QP granted (inline sends use them)
    uint32_t signal_every_ = 1;
    size_t repost_batch_ = 1;
    CompChannelPtr channel_;
    bool armed_ = false;   // an event may be pending on channel_ (progress drains it)
    CqPtr cq_;
    QpPtr qp_;
    std::unique_ptr<uint8_t[]> recv_buf_, send_buf_;
    MrPtr recv_mr_, send_mr_;
    // Send slots form a ring in posting order: sq_head_ counts sends posted, sq_tail_ those known
    // complete. Only every signal_every_-th send (and every one whose wr_id must be reported) asks
    // for a completion; a UD send queue completes in order, so its completion retires every
    // earlier slot too (UCX's ud_verbs moderates the same way: one CQE fewer to poll per send).
    uint64_t sq_head_ = 0, sq_tail_ = 0;
    std::vector<uint64_t> slot_wr_id_;
    std::map<AhKey, AhEntry> ahs_;
    std::list<AhKey> lru_;
    size_t ah_cap_ = 1024;
    uint64_t ah_evicted_ = 0;
    std::set<AhKey> ah_failed_;           // destinations whose address handle failed (warned)
    bool gid_moved_ = false;              // our GID entry changed since init (said once)
    AhKey last_key_{};                    // the last destination and its handle: traffic
    AhEntry* last_ah_ = nullptr;          // comes in runs to one peer
    std::deque<Completion> comps_;
    std::deque<Rx> rq_;                   // received by progress(), not yet handed out
    std::vector<uint32_t> repost_;        // consumed receive buffers, posted back in chains
    uint64_t events_ = 0;
    uint64_t recv_errors_ = 0, send_errors_ = 0;   // error completions (the first of each logged)
};

Status UdQpImpl::init() {
    ibv_context* ctx = pd_->ctx();
    const char* name = cfg_.dev_name.c_str();
    ibv_port_attr pa{};
    if (ibv_query_port(ctx, cfg_.port, &pa) != 0 || pa.state != IBV_PORT_ACTIVE) {
        ROCE_ERROR("verbs: UD: %s port %u absent or not active", name, unsigned(cfg_.port));
        return Status::no_device;
    }
    mtu_ = mtu_bytes(pa.active_mtu);
    if (cfg_.max_ah) {
        ah_cap_ = cfg_.max_ah;
    } else {
        ibv_device_attr da{};
        if (ibv_query_device(ctx, &da) == 0 && da.max_ah > 0)
            ah_cap_ = std::clamp<size_t>(size_t(da.max_ah) / 4, 1, 1024);
    }
    GidContext gctx;
    std::string err;
    Status gs = load_gid_context(cfg_.dev_name, cfg_.port, cfg_.gid, gctx, err, cfg_.sysroot);
    if (gs == Status::ok) {
        gs = choose_gid(gctx, nullptr,
                        [this](const gid::GidEntry& e, const gid::PeerGid*, std::string& why) {
                            return gid_entry_sends(pd_->pd(), cfg_.port, e, why);
                        },
                        gid_, err);
    }
    if (gs != Status::ok) {
        ROCE_ERROR("verbs: UD: %s port %u: %s", name, unsigned(cfg_.port), err.c_str());
        return gs;
    }
    tc_ = gid::resolve_traffic_class(cfg_.gid, gctx.port.default_tclass);
    // Receive buffers take what the port may deliver; our datagrams (and, through our address,
    // the peers' to us) fit the GID's netdev too.
    send_mtu_ = std::min(mtu_, mtu_bytes(netdev_mtu_cap(gid::SysRoot(cfg_.sysroot), gid_.ndev,
                                                        gid_.addr.family == AF_INET6)));
    // rc_roce picks an entry per peer, one that reaches it; this one serves every peer.
    if (gid::IpAddr::from_bytes(gid_.gid).is_link_local())
        ROCE_WARN("verbs: UD: %s port %u: GID index %d is link-local (%s): only peers on %s's link are "
                  "reached", name, unsigned(cfg_.port), gid_.index, gid_.reason.c_str(), gid_.ndev.c_str());
    ROCE_INFO("verbs: UD: %s port %u: GID index %d (%s); traffic class %s; datagrams up to %u bytes", name,
              unsigned(cfg_.port), gid_.index, gid_.reason.c_str(), tc_.str().c_str(), send_mtu_);
    channel_.reset(ibv_create_comp_channel(ctx));
    if (!channel_) {
        ROCE_ERROR("verbs: UD: %s: ibv_create_comp_channel failed: %s", name, std::strerror(errno));
        return Status::io_error;
    }
    fcntl(channel_->fd, F_SETFL, fcntl(channel_->fd, F_GETFL) | O_NONBLOCK);
    cq_.reset(ibv_create_cq(ctx, int(cfg_.sq_depth + cfg_.recv_buffers + 16), nullptr, channel_.get(), 0));
    if (!cq_) {
        ROCE_ERROR("verbs: UD: %s: ibv_create_cq failed: %s", name, std::strerror(errno));
        return Status::io_error;
    }
    ibv_qp_init_attr ia{};
    ia.send_cq = ia.recv_cq = cq_.get();
    ia.qp_type = IBV_QPT_UD;
    ia.cap.max_send_wr = cfg_.sq_depth;
    ia.cap.max_recv_wr = cfg_.recv_buffers;
    // Inline sends gather straight from the caller's pieces (a header and a payload): no copy
    // into a slot first.
    ia.cap.max_send_sge = 4;
    ia.cap.max_recv_sge = 1;
    ia.cap.max_inline_data = cfg_.max_inline;
    qp_.reset(create_qp_inline_or_not(pd_->pd(), ia));
    if (!qp_) {
        ia.cap.max_send_sge = 1;
        qp_.reset(create_qp_inline_or_not(pd_->pd(), ia));
    }
    if (!qp_) {
        ROCE_ERROR("verbs: UD: %s: ibv_create_qp failed: %s", name, std::strerror(errno));
        return Status::io_error;
    }
    max_inline_ = ia.cap.max_inline_data;
    max_sge_ = std::max<uint32_t>(1, ia.cap.max_send_sge);
    signal_every_ = signal_interval(cfg_.signal_every, cfg_.sq_depth);
    repost_batch_ = std::clamp<size_t>(cfg_.recv_buffers / 4, 1, 16);
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.pkey_index = 0;
    a.port_num = cfg_.port;
    a.qkey = cfg_.qkey;
    int rc = ibv_modify_qp(qp_.get(), &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY);
    if (rc == 0) {
        a = {};
        a.qp_state = IBV_QPS_RTR;
        rc = ibv_modify_qp(qp_.get(), &a, IBV_QP_STATE);
    }
    if (rc == 0) {
        a = {};
        a.qp_state = IBV_QPS_RTS;
        a.sq_psn = 0;
        rc = ibv_modify_qp(qp_.get(), &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
    }
    if (rc != 0) {
        ROCE_ERROR("verbs: UD: %s: QP to RTS failed: %s", name, std::strerror(rc));
        return Status::io_error;
    }
    const size_t rbytes = size_t(cfg_.recv_buffers) * (grh_bytes + mtu_);
    const size_t sbytes = size_t(cfg_.sq_depth) * mtu_;
    recv_buf_.reset(new (std::nothrow) uint8_t[rbytes]);
    send_buf_.reset(new (std::nothrow) uint8_t[sbytes]);
    if (!recv_buf_ || !send_buf_)
        return Status::no_resource;
    recv_mr_.reset(ibv_reg_mr(pd_->pd(), recv_buf_.get(), rbytes, IBV_ACCESS_LOCAL_WRITE));
    send_mr_.reset(ibv_reg_mr(pd_->pd(), send_buf_.get(), sbytes, IBV_ACCESS_LOCAL_WRITE));
    if (!recv_mr_ || !send_mr_) {
        ROCE_ERROR("verbs: UD: %s: ibv_reg_mr failed: %s", name, std::strerror(errno));
        return Status::no_resource;
    }
    slot_wr_id_.resize(cfg_.sq_depth);
    for (uint32_t i = 0; i < cfg_.recv_buffers; ++i)
        repost_.push_back(i);
    flush_reposts(true);
    return Status::ok;
}

// Posts the consumed buffers back once repost_batch_ of them wait: a chain of 16 costs the
// provider about what one post does (the queue keeps 3/4 of its buffers posted at the least).
void UdQpImpl::flush_reposts(bool all) {
    if (repost_.empty() || (!all && repost_.size() < repost_batch_))
        return;
    const int rc = post_recv_chain(
            repost_, recv_tag,
            [&](uint32_t idx) {
                return ibv_sge{reinterpret_cast<uintptr_t>(rbuf(idx)), uint32_t(grh_bytes + mtu_), recv_mr_->lkey};
            },
            [&](ibv_recv_wr* wr, ibv_recv_wr** bad) { return ibv_post_recv(qp_.get(), wr, bad); });
    if (rc != 0)
        ROCE_ERROR("verbs: UD QP %u: ibv_post_recv failed: %s (receive buffers are lost)", qp_->qp_num,
                   std::strerror(rc));
    repost_.clear();
}

uint8_t UdQpImpl::class_id(const gid::TrafficClass& tc) {
    auto same = [&](const gid::TrafficClass& c) { return c.tos == tc.tos && c.priority == tc.priority; };
    if (same(tc_))
        return 0;
    for (size_t i = 0; i < classes_.size(); ++i) {
        if (same(classes_[i]))
            return uint8_t(i + 1);
    }
    if (classes_.size() == max_classes) {
        if (!warned_classes_)
            ROCE_WARN("verbs: UD QP %u: %zu traffic classes besides ours in use: peers in %s get ours (%s)",
                      qp_->qp_num, max_classes, tc.str().c_str(), tc_.str().c_str());
        warned_classes_ = true;
        return 0;
    }
    classes_.push_back(tc);
    return uint8_t(classes_.size());
}

// The QP's GID entry is read again before each new address handle: the address may have gone
// since the QP chose it and its index been reused by another (a DHCP renewal, an address moved
// between interfaces). Peers know this QP by the GID its address advertises; a datagram from
// another source would reach none of them as ours, so new destinations are refused, said once.
// (rc_roce reads its entry per connection.) Handles made before keep what the kernel gives them.
bool UdQpImpl::gid_still_ours() {
    if (gid_moved_)
        return false;
    ibv_gid now{};
    if (ibv_query_gid(pd_->ctx(), cfg_.port, gid_.index, &now) == 0 && std::memcmp(now.raw, gid_.gid, 16) == 0)
        return true;
    gid_moved_ = true;
    ROCE_ERROR("verbs: UD QP %u: GID index %d of %s port %u no longer holds %s (now %s): datagrams to new "
               "destinations are refused (peers know this QP by that address); open the interface again",
               qp_->qp_num, gid_.index, cfg_.dev_name.c_str(), unsigned(cfg_.port),
               gid::IpAddr::from_bytes(gid_.gid).str().c_str(), gid::IpAddr::from_bytes(now.raw).str().c_str());
    return false;
}

// Called by post_send for the send it is about to post as sq_head_.
ibv_ah* UdQpImpl::ah_for(const uint8_t* gid, uint8_t cls) {
    AhKey k;
    std::memcpy(k.data(), gid, 16);
    k[16] = cls <= classes_.size() ? cls : 0;   // an id this QP did not give: ours
    if (!last_ah_ || k != last_key_) {
        auto it = ahs_.find(k);
        if (it == ahs_.end()) {
            if (!gid_still_ours())
                return nullptr;
            if (ahs_.size() >= ah_cap_)
                evict_ah();   // none free: over the cap until sends complete
            AhPtr ah(create_ah(k));
            // The device's table may be full (other processes hold it too; rxe then says EINVAL,
            // like a bad attribute would): make room from ours and try once more. Not for an
            // unresolvable neighbour (EHOSTUNREACH...): a live peer's handle would go for nothing.
            if (!ah && (errno == ENOMEM || errno == EAGAIN || errno == ENOSPC || errno == EINVAL) && evict_ah())
                ah.reset(create_ah(k));
            if (!ah) {
                // Tried again at the next send (the reliability layer counts it lost); said once
                // per destination, not at every retransmission.
                if (ah_failed_.insert(k).second)
                    ROCE_WARN("verbs: UD QP %u: ibv_create_ah to %s failed: %s", qp_->qp_num,
                              gid::IpAddr::from_bytes(gid).str().c_str(), std::strerror(errno));
                return nullptr;
            }
            it = ahs_.emplace(k, AhEntry{std::move(ah), 0, {}}).first;
            try {
                lru_.push_front(k);
            } catch (...) {
                ahs_.erase(it);
                throw;
            }
            it->second.lru = lru_.begin();
        } else {
            lru_.splice(lru_.begin(), lru_, it->second.lru);
        }
        last_key_ = k;
        last_ah_ = &it->second;
    }
    last_ah_->last_seq = sq_head_;
    if (ahs_.size() > ah_cap_)
        evict_ah();   // over the cap while sends were in flight: back under it as they complete
    return last_ah_->ah.get();
}

ibv_ah* UdQpImpl::create_ah(const AhKey& k) {
    const gid::TrafficClass& tc = k[16] == 0 ? tc_ : classes_[k[16] - 1u];
    ibv_ah_attr a{};
    a.is_global = 1;
    std::memcpy(a.grh.dgid.raw, k.data(), 16);
    a.grh.sgid_index = uint8_t(gid_.index);
    a.grh.hop_limit = cfg_.hop_limit;
    a.grh.traffic_class = tc.tos;
    a.sl = tc.priority;
    a.port_num = cfg_.port;
    return ibv_create_ah(pd_->pd(), &a);
}

bool UdQpImpl::evict_ah() {
    for (auto r = lru_.rbegin(); r != lru_.rend(); ++r) {
        auto it = ahs_.find(*r);
        if (it->second.last_seq >= sq_tail_)
            continue;   // a posted send may still need it
        if (last_ah_ == &it->second)
            last_ah_ = nullptr;
        lru_.erase(it->second.lru);
        ahs_.erase(it);
        ++ah_evicted_;
        return true;
    }
    return false;
}

Status UdQpImpl::post_send(uint64_t wr_id, const UdDest& dest, const iovec* iov, size_t iovcnt,
                           const uint32_t* imm, uint8_t cls) {
    size_t total = 0;
    for (size_t i = 0; i < iovcnt; ++i)
        total += iov[i].iov_len;
    if (total > send_mtu_ || dest.qpn == 0 || dest.qpn > 0xffffff)
        return Status::invalid_param;
    if (sq_head_ - sq_tail_ == cfg_.sq_depth) {
        progress();   // retires what completed (receives wait in rq_)
        if (sq_head_ - sq_tail_ == cfg_.sq_depth)
            return Status::no_resource;
    }
    ibv_ah* ah = ah_for(dest.gid, cls);
    if (!ah)
        return Status::unreachable;
    const uint32_t slot = uint32_t(sq_head_ % cfg_.sq_depth);
    ibv_sge sge[4];
    int nsge = 0;
    const bool inline_ok = total && total <= max_inline_;
    if (inline_ok && iovcnt <= std::min<uint32_t>(max_sge_, std::size(sge))) {   // (may grant more)
        // The provider copies inline data at post time: the caller's pieces, as they are.
        for (size_t i = 0; i < iovcnt; ++i) {
            if (iov[i].iov_len)
                sge[nsge++] = {reinterpret_cast<uintptr_t>(iov[i].iov_base), uint32_t(iov[i].iov_len), 0};
        }
    } else if (total) {
        uint8_t* buf = send_buf_.get() + size_t(slot) * mtu_;
        size_t off = 0;
        for (size_t i = 0; i < iovcnt; ++i) {
            if (iov[i].iov_len)
                std::memcpy(buf + off, iov[i].iov_base, iov[i].iov_len);
            off += iov[i].iov_len;
        }
        sge[nsge++] = {reinterpret_cast<uintptr_t>(buf), uint32_t(total), send_mr_->lkey};
    }
    const bool signaled = wr_id != 0 || sq_head_ % signal_every_ == signal_every_ - 1;
    ibv_send_wr wr{};
    wr.wr_id = sq_head_;
    wr.sg_list = nsge ? sge : nullptr;
    wr.num_sge = nsge;
    wr.opcode = imm ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND;
    if (imm)
        wr.imm_data = htonl(*imm);
    wr.send_flags = (signaled ? IBV_SEND_SIGNALED : 0) | (inline_ok ? IBV_SEND_INLINE : 0);
    wr.wr.ud.ah = ah;
    wr.wr.ud.remote_qpn = dest.qpn;
    wr.wr.ud.remote_qkey = cfg_.qkey;
    ibv_send_wr* bad;
    if (const int rc = ibv_post_send(qp_.get(), &wr, &bad); rc != 0) {
        ROCE_WARN("verbs: UD QP %u: ibv_post_send failed: %s", qp_->qp_num, std::strerror(rc));
        return Status::no_resource;
    }
    slot_wr_id_[slot] = wr_id;
    ++sq_head_;
    return Status::ok;
}

// A send completion retires its send and every earlier one (in order; they were unsignaled, or
// flushed with an error completion of their own).
void UdQpImpl::send_completed(const ibv_wc& w) {
    const uint64_t done = w.wr_id;
    if (done < sq_tail_ || done >= sq_head_)
        return;
    // A send nobody waits for (wr_id 0) fails in silence otherwise; the datagram is lost, which
    // ud_roce's reliability recovers, but the cause (a bad address handle, a QP in error) is ours.
    if (w.status != IBV_WC_SUCCESS && w.status != IBV_WC_WR_FLUSH_ERR && send_errors_++ == 0)
        ROCE_WARN("verbs: UD QP %u: send failed: %s (later failures are not logged)", qp_->qp_num,
                  ibv_wc_status_str(w.status));
    for (; sq_tail_ <= done; ++sq_tail_) {
        const uint32_t slot = uint32_t(sq_tail_ % cfg_.sq_depth);
        if (slot_wr_id_[slot] != 0) {
            const bool ok = sq_tail_ < done || w.status == IBV_WC_SUCCESS;
            comps_.push_back({slot_wr_id_[slot], qp_->qp_num, OpKind::send, ok ? Status::ok : Status::io_error});
            slot_wr_id_[slot] = 0;
            ++events_;
        }
    }
}

void UdQpImpl::drain_events() {
    if (!armed_)   // (a read() on the channel: only when an arm may have produced an event)
        return;
    ibv_cq* ev_cq;
    void* ev_ctx;
    while (ibv_get_cq_event(channel_.get(), &ev_cq, &ev_ctx) == 0) {
        ibv_ack_cq_events(ev_cq, 1);
        armed_ = false;
    }
}

int UdQpImpl::poll_cq(Rx* rx, int& nrx) {
    ibv_wc wc[32];
    const int n = ibv_poll_cq(cq_.get(), 32, wc);
    nrx = 0;
    for (int i = 0; i < n; ++i) {
        const ibv_wc& w = wc[i];
        if (!(w.wr_id & recv_tag)) {
            send_completed(w);
            continue;
        }
        const uint32_t idx = uint32_t(w.wr_id & ~recv_tag);
        if (w.status != IBV_WC_SUCCESS || w.byte_len < grh_bytes) {
            // Once per QP: any sender can cause these (a datagram larger than our buffers).
            if (w.status != IBV_WC_WR_FLUSH_ERR && recv_errors_++ == 0)
                ROCE_WARN("verbs: UD QP %u: receive failed: %s (later failures are not logged)",
                          qp_->qp_num, ibv_wc_status_str(w.status));
            repost_.push_back(idx);
            continue;
        }
        const bool has_imm = w.wc_flags & IBV_WC_WITH_IMM;
        rx[nrx++] = {idx, uint32_t(w.byte_len - grh_bytes), w.src_qp, has_imm, has_imm ? ntohl(w.imm_data) : 0};
    }
    return n;
}

unsigned UdQpImpl::progress() {
    const uint64_t before = events_;
    drain_events();
    Rx rx[32];
    int n, nrx;
    do {
        n = poll_cq(rx, nrx);
        if (nrx)
            rq_.insert(rq_.end(), rx, rx + nrx);
        events_ += uint64_t(nrx);
    } while (n == 32);
    flush_reposts();
    return unsigned(events_ - before);
}

size_t UdQpImpl::poll_completions(Completion* out, size_t max) {
    size_t n = 0;
    while (n < max && !comps_.empty()) {
        out[n++] = comps_.front();
        comps_.pop_front();
    }
    return n;
}

void UdQpImpl::deliver(const Rx& r, FunctionRef<void(const UdMessage&)> fn) {
    // Back to the queue once the callback is done with it (posted with the batch's others): a
    // send from the callback may run progress(), which posts what is queued.
    struct Back {
        UdQpImpl* q;
        uint32_t idx;
        ~Back() { q->repost_.push_back(idx); }
    } back{this, r.idx};
    UdMessage m{};
    ud_source_gid(rbuf(r.idx), m.src.gid);
    m.src.qpn = r.src_qp;
    m.data = rbuf(r.idx) + grh_bytes;
    m.len = r.len;
    m.has_imm = r.has_imm;
    m.imm = r.imm;
    fn(m);
}

// Straight from the CQ (no queue in between), in arrival order: what progress() queued, which is
// older, first — also what a callback's own send queued while this batch was being handed out.
size_t UdQpImpl::poll_recv(FunctionRef<void(const UdMessage&)> fn, size_t max) {
    struct Flush {
        UdQpImpl* q;
        ~Flush() { q->flush_reposts(); }
    } flush{this};
    drain_events();
    size_t n = 0;
    while (n < max) {
        while (n < max && !rq_.empty()) {
            const Rx r = rq_.front();
            rq_.pop_front();
            ++n;
            deliver(r, fn);
        }
        if (n == max)
            break;
        Rx rx[32];
        int nrx;
        const int polled = poll_cq(rx, nrx);
        int i = 0;
        for (; i < nrx && n < max; ++i) {
            ++n;
            deliver(rx[i], fn);
        }
        if (i < nrx)
            rq_.insert(rq_.begin(), rx + i, rx + nrx);   // beyond `max`: the oldest of what waits
        if (polled < 32 && rq_.empty())
            break;
    }
    return n;
}
} // namespace

void ud_source_gid(const uint8_t* g, uint8_t gid[16]) {
    // RoCE v2 over IPv4: an IPv4 header in bytes 20..39 and, before it, 20 bytes the HCA leaves
    // undefined (kernel rxe zeroes them, and its loopback's IPv4 header has no checksum). An
    // IPv6 header or GRH starts with version 6, and its byte 20 is byte 12 of the source address
    // (0x45 in fe80::211:22ff:4512:3344, or in a RoCE v1 GID of 69.x.y.z): when byte 0 says 6,
    // only an IPv4 header whose checksum holds is believed (libibverbs decides the same way).
    const bool v6_first = (g[0] >> 4) == 6;
    const bool ipv4 = v6_first ? wire::is_ipv4_header(g + 20) : (g[20] >> 4) == 4;
    if (ipv4) {
        static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        std::memcpy(gid, prefix, 12);
        std::memcpy(gid + 12, g + 20 + 12, 4);   // IPv4 source address
        return;
    }
    std::memcpy(gid, g + 8, 16);   // GRH / IPv6 header: source GID at offset 8
}

Status UdQp::open(const UdConfig& cfg, std::shared_ptr<Pd> pd, std::unique_ptr<UdQp>& out) {
    if (cfg.sq_depth == 0 || cfg.recv_buffers == 0 || cfg.port == 0)
        return Status::invalid_param;
    if (!pd) {
        if (Status s = Pd::open(cfg.dev_name, pd); s != Status::ok)
            return s;
    }
    auto pdi = std::dynamic_pointer_cast<PdImpl>(pd);
    if (!pdi || pdi->dev_name() != cfg.dev_name)
        return Status::invalid_param;
    auto q = std::make_unique<UdQpImpl>(cfg, std::move(pdi));
    if (Status s = q->init(); s != Status::ok)
        return s;
    out = std::move(q);
    return Status::ok;
}

} // namespace roce::verbs
