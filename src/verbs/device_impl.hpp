// verbs::Device implementation, one file per part:
//   device.cpp    open/close, counters, QP table and QP lifecycle, receive buffers
//   post.cpp      posting: inline / bounce / registered / temporary MR, completion moderation,
//                 the software queue (connection setup, congestion window), ibv_post_send
//   completion.cpp  CQ polling, in-order retirement, unsignaled tails, event fd, progress
//   untracked.cpp lazy inline SENDs without a work-request record
//   congestion.cpp  the delay-based window before ibv_post_send (UCX_RC_ROCE_CC=delay)
//   cm.cpp        rdma_cm: listener, active connect (resolve addr/route -> REQ -> RTR/RTS ->
//                 establish), passive accept (QP created on the request), disconnects, the CM thread
//   pd.cpp, gid_choice.cpp: protection domain + MR table; local GID selection (src/gid policy)
//   ud.cpp        UdQp (ud.hpp): UD datagrams with GRH handling, independent of Device
// Locking: one recursive lock per device (DeviceLock; every public method and the CM thread take it).
// QPs are created by us (ibv_create_qp on our PD/CQs/SRQ) and moved through INIT/RTR/RTS with the
// attributes rdma_init_qp_attr derives from the rdma_cm id (path, GID, PSNs, negotiated depths).
#pragma once

#include <atomic>
#include <pthread.h>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/clock.hpp"
#include "common/recursive_lock.hpp"
#include "cc/qp_cc.hpp"
#include "verbs/device.hpp"
#include "gid/traffic_class.hpp"
#include "verbs/gid_choice.hpp"
#include "verbs/pd_impl.hpp"
#include "verbs/raii.hpp"

namespace roce::verbs {

// Private data of our connection requests (REQ) and answers (REP), as rdma_cm carries it:
//    0  magic 'RVB1' (32, big endian)
//    4  version (32, big endian): 1 = magic only (no REP data); 2 = with the traffic class
//    8  traffic-class advert (gid::TcAdvert): ToS | priority | ToS source | priority source
//   12  flags (8): bit 0 = the advert is present, bit 1 = listen_port, bit 2 = mtu
//   13  listen_port (16, big endian)
//   15  mtu (8): the largest path MTU the sender's port takes (ibv_mtu)
// A version-1 peer sends no advert: the local class is used then.
struct ConnPriv {
    uint32_t magic;
    uint32_t version;
    uint8_t tc[4];
    uint8_t flags;
    uint8_t listen_port[2];   // conn_flag_port: the sender's rdma_cm listener port, big endian
    uint8_t mtu;              // conn_flag_mtu
};
static_assert(sizeof(ConnPriv) == 16, "rdma_cm private data layout");
inline constexpr uint32_t conn_magic = 0x52564231u;
inline constexpr uint32_t conn_version = 2;
inline constexpr uint8_t conn_flag_tc = 1;
// The REQ names the requester's device address (its listener port; the REQ itself comes from an
// ephemeral port), so the passive QP's peer is the device the requester's other QPs reach: one
// peer in the counters, not one per connection.
inline constexpr uint8_t conn_flag_port = 2;
// rdma_cm gives a RoCE QP the active side's netdev MTU, on both sides (the passive one takes the
// REQ's path): from a port with jumbo frames to one without, every full-size packet is dropped on
// the way. Each side says what its port takes; both use the smaller.
inline constexpr uint8_t conn_flag_mtu = 4;

// The device's lock: RecursiveLock (common/recursive_lock.hpp); callbacks run under it re-enter
// the device (an AM handler that replies posts; a completion callback may destroy its QP).
using DeviceLock = RecursiveLock;

// One work request as the device tracks it from post to completion.
struct WrRec {
    uint64_t seq = 0;
    uint64_t wr_id = 0;          // the caller's (0: no completion)
    OpKind op = OpKind::send;
    bool internal = false;       // our zero-length signaled WRITE that reclaims an unsignaled tail
    bool piece = false;          // a leading piece of a request split for the window (congestion.cpp)
    bool held = false;           // congestion control held it back once (counted once)
    int bounce = -1;             // bounce slot used for the payload / READ landing / atomic result
    MrPtr temp_mr;               // temporary registration (unregistered or oversized buffer)
    std::unique_ptr<uint8_t[]> temp_buf;
    void* copy_out = nullptr;    // READ via bounce: copy here on success
    size_t copy_len = 0;
    uint64_t* result = nullptr;  // atomic: original value goes here on success
    // Work request as built; posted when the QP reaches RTS (pending while connecting).
    ibv_send_wr wr{};
    ibv_sge sge[4]{};
    bool posted = false;
    bool signaled = false;
    uint32_t cc_bytes = 0;       // what the window counts: payload, READ length, 8 for atomics
    uint64_t post_ns = 0;        // when it went to the HCA (a signaled CQE is an RTT sample)
};

// A QP's FIFO of work requests (VQp::sq). std::deque kept one WrRec (~300 bytes) per 512-byte
// node, so every post allocated a node and every completion freed one, on the path between the
// caller's post and the doorbell. The ring keeps its slots: it starts empty (an idle QP costs
// nothing), doubles when full and never shrinks; a slot is reset when its element leaves, so
// nothing it owned (registrations, buffers) outlives the work request. Slots past the last
// element are therefore always default-constructed: push_default() hands one out to be filled in
// place (building a record elsewhere and moving it in copied it twice per post).
template <typename T>
class Ring {
public:
    size_t size() const { return n_; }
    bool empty() const { return n_ == 0; }
    T& operator[](size_t i) { return buf_[(head_ + i) & (cap_ - 1)]; }
    T& front() { return (*this)[0]; }
    T& back() { return (*this)[n_ - 1]; }
    void push_back(T&& v) { push_default() = std::move(v); }
    T& push_default() {
        if (n_ == cap_)
            grow();
        return (*this)[n_++];
    }
    void pop_front() {
        reset(front());
        head_ = (head_ + 1) & (cap_ - 1);
        --n_;
    }
    void pop_back() {
        reset(back());
        --n_;
    }

private:
    static void reset(T& slot) {
        std::destroy_at(&slot);
        std::construct_at(&slot);
    }
    void grow() {
        const size_t cap = cap_ ? 2 * cap_ : 8;
        std::unique_ptr<T[]> buf(new T[cap]);
        for (size_t i = 0; i < n_; ++i)
            buf[i] = std::move((*this)[i]);
        buf_ = std::move(buf);
        cap_ = cap;
        head_ = 0;
    }
    std::unique_ptr<T[]> buf_;
    size_t cap_ = 0, head_ = 0, n_ = 0;   // cap_: 0 or a power of two
};

// ibv wr_id of a QP's work request: the QP's generation (CQEs of a reused QPN's old QP are
// stale) and the request's sequence number.
inline constexpr uint64_t wr_seq_mask = (uint64_t(1) << 40) - 1;
inline constexpr uint64_t wr_gen_mask = 0xffffff;

// The SGEs of an inline WR: the caller's pieces, empty ones left out (at most 4, checked by the
// callers). Returns how many.
inline int inline_sges(ibv_sge* sge, const iovec* iov, size_t iovcnt) {
    int n = 0;
    for (size_t i = 0; i < iovcnt; ++i) {
        if (iov[i].iov_len)
            sge[n++] = {reinterpret_cast<uintptr_t>(iov[i].iov_base), uint32_t(iov[i].iov_len), 0};
    }
    return n;
}

// Lazy inline SENDs posted without a WrRec (DeviceImpl::post_send_untracked): consecutive ones
// with the same wr_id, by sequence number. The CQE of a later signaled WR (or their own error
// CQEs) retires them, as it retires the records in VQp::sq before it.
struct AnonRun {
    uint64_t first_seq = 0;
    uint32_t count = 0;
    uint64_t wr_id = 0;
};

// What we posted to and received from the peer on one QP (the NIC's own per-QP counters are not
// exposed by verbs; its port counters are, see DeviceImpl::counters). posted_bytes: SEND/WRITE
// payload and READ lengths asked for. One list for fields, sums and names.
#define ROCE_VERBS_QP_STATS(X) \
    X(sends) X(writes) X(reads) X(atomics) X(posted_bytes) X(recv_messages) X(rx_bytes) X(wr_errors) \
    X(cc_held) X(reads_capped) X(rtt_samples) X(rtt_ambiguous)
struct VQpStats {
#define ROCE_FIELD(f) uint64_t f = 0;
    ROCE_VERBS_QP_STATS(ROCE_FIELD)
#undef ROCE_FIELD
    VQpStats& operator+=(const VQpStats& o) {
#define ROCE_ADD(f) f += o.f;
        ROCE_VERBS_QP_STATS(ROCE_ADD)
#undef ROCE_ADD
        return *this;
    }
};

struct VQp {
    uint32_t qpn = 0;
    uint64_t gen = 0;            // ibv wr_id = gen << 40 | seq: stale CQEs of a reused QPN are dropped
    QpPtr qp;
    CmIdPtr id;
    uint64_t token = 0;          // rdma_cm id context
    bool passive = false;
    QpState state = QpState::reset;
    WireAddr peer{};
    uint32_t dest_qpn = 0;       // the peer's QPN once known (RTR)
    uint64_t connect_deadline_ns = 0;
    Ring<WrRec> sq;              // posted ones first, then pending ones
    Ring<AnonRun> anon;          // posted untracked SENDs, interleaved with sq by seq
    size_t n_anon = 0;           // their number
    size_t n_posted = 0;
    size_t n_internal = 0;
    size_t n_pieces = 0;         // leading pieces in sq: not counted against sq_depth
    uint32_t max_send_wr = 0;    // the hardware send queue as created (pieces, reclaim WRITEs and
                                 // a window grown since a split can want more than sq_depth)
    uint64_t next_seq = 1;
    uint32_t unsignaled_run = 0; // posted unsignaled WRs after the last signaled one
    bool in_tails = false;       // listed in tails_
    bool lazy_tail = false;      // ... and all of them are lazy (wr_id_lazy): nobody waits for them
    bool lazy_wanted = false;    // complete_lazy() was called; cleared when the QP has drained
    uint32_t signaled_inflight = 0;   // posted signaled WRs not completed yet
    bool posted_since_progress = false;
    uint32_t max_inline = 0;
    sockaddr_storage cm_src{}, cm_dst{};   // active side: the addresses resolution retries with
    int sgid_index = -1;         // active side: the policy's entry for this peer (-1: rdma_cm's)
    std::string sgid_ndev;       // its netdev (scope of a link-local peer)
    gid::TrafficClass tc;        // negotiated class of the connection (both directions)
    uint8_t peer_mtu = 0;        // ibv_mtu the peer's port takes (ConnPriv), 0: not said
    uint8_t own_mtu = 0;         // ibv_mtu we said (own_mtu(): our side of the GID in use)
    uint8_t rd_atomic = 0;       // READs/atomics it may have outstanding (max_rd_atomic, at RTS)
    uint8_t dest_rd_atomic = 0;  // the peer's it may answer at once (max_dest_rd_atomic, at RTR)
    VQpStats st{};
    // Congestion control (verbs/congestion.cpp): bytes of posted, not completed WRs; bytes posted
    // unsignaled since the last signaled WR.
    std::optional<cc::QpCc> cc;
    uint64_t cc_outstanding = 0;
    uint64_t cc_acked = 0;       // completed by the coming signaled CQE (unsignaled ones before it)
    uint64_t unsignaled_bytes = 0;
    bool cc_held = false;        // in DeviceImpl::held_
};

inline uint64_t ibv_wr_id(const VQp& q, uint64_t seq) { return (q.gen & wr_gen_mask) << 40 | (seq & wr_seq_mask); }

class DeviceImpl final : public Device {
public:
    DeviceImpl(const DeviceConfig& cfg, std::shared_ptr<PdImpl> pd);
    ~DeviceImpl() override;
    Status init();

    const WireAddr& address() const override { return addr_; }
    const DeviceConfig& config() const override { return cfg_; }
    DeviceStats stats() const override;
    Counters counters() const override;
    std::vector<QpCounters> qp_counters() const override;
    Pd& pd() const override { return *pd_; }

    Status create_qp(uint32_t& qpn) override;
    Status connect_qp(uint32_t qpn, const WireAddr& peer) override;
    Status destroy_qp(uint32_t qpn) override;
    Status cancel_qp(uint32_t qpn) override;
    QpState qp_state(uint32_t qpn) const override;

    Status post_send(uint32_t qpn, uint64_t wr_id, const iovec* iov, size_t iovcnt,
                     const uint32_t* imm) override;
    Status post_write(uint32_t qpn, uint64_t wr_id, const void* local, size_t len,
                      uint64_t remote_va, uint32_t rkey, bool copy, uint32_t lkey = 0) override;
    Status post_read(uint32_t qpn, uint64_t wr_id, void* local, size_t len, uint64_t remote_va,
                     uint32_t rkey, uint32_t lkey = 0) override;
    Status post_fetch_add(uint32_t qpn, uint64_t wr_id, uint64_t remote_va, uint32_t rkey,
                          uint64_t add, uint64_t* result) override;
    Status post_cmp_swap(uint32_t qpn, uint64_t wr_id, uint64_t remote_va, uint32_t rkey,
                         uint64_t compare, uint64_t swap, uint64_t* result) override;
    size_t outstanding(uint32_t qpn) const override;
    void complete_lazy(uint32_t qpn) override;

    unsigned progress() override;
    size_t poll_completions(Completion* out, size_t max) override;
    size_t poll_recv(const std::function<void(const RecvMessage&)>& fn, size_t max) override;
    unsigned progress_round(ProgressSink& sink, size_t max_recv) override;
    int event_fd() const override { return epoll_fd_.get(); }
    // Arming the CQs costs syscalls (rxe: ibv_req_notify_cq is a command to the kernel), so the
    // next progress() arms them only when the owner asked.
    void arm_events() override { arm_requested_.store(true, std::memory_order_relaxed); }

    // ---- internals (mu_ held)
    unsigned progress_locked();
    template <typename Fn>
    size_t recv_locked(Fn&& fn, size_t max);
    // Most lookups (every post, every CQE) are for one of the last two QPs (a ping-pong's client
    // sends on its QP and receives on the passive one the server connected): last_qp_ answers
    // them without hashing (an unordered_map lookup was ~90 instructions per post).
    VQp* find_qp(uint32_t qpn) {
        if (last_qp_[0] && last_qp_[0]->qpn == qpn)
            return last_qp_[0];
        if (last_qp_[1] && last_qp_[1]->qpn == qpn)
            return last_qp_[1];
        VQp* q = find_qp_slow(qpn);
        if (q) {
            last_qp_[1] = last_qp_[0];
            last_qp_[0] = q;
        }
        return q;
    }
    VQp* find_qp_slow(uint32_t qpn);
    void insert_qp(std::unique_ptr<VQp> q);
    Status new_ibv_qp(VQp& q);
    Status admit(uint32_t qpn, VQp*& q);   // checks before a post
    bool post_send_untracked(VQp& q, uint64_t wr_id, const iovec* iov, size_t iovcnt,
                             const uint32_t* imm, size_t total);   // false: not eligible
    void finish_anon(VQp& q, uint64_t wr_id, uint32_t n, Status st);
    void report(const VQp& q, uint64_t wr_id, OpKind op, Status st, uint32_t n);   // to cq_
    WrRec& new_wr(VQp& q) { return q.sq.push_default(); }   // built in place at the back of sq
    Status drop_new_wr(VQp& q, Status s) { q.sq.pop_back(); return s; }   // ... not submitted after all
    WrRec& new_rdma_wr(VQp& q, uint64_t wr_id, OpKind op, uint64_t remote_va, uint32_t rkey);
    Status submit(VQp& q);                 // the new WR at the back of sq: count it, post if RTS
    Status post_atomic(uint32_t qpn, uint64_t wr_id, OpKind op, uint64_t remote_va, uint32_t rkey,
                       uint64_t compare_add, uint64_t swap, uint64_t* result);
    bool post_hw(VQp& q, WrRec& r);        // one WR to the HCA
    bool moderation_due(const VQp& q) const;   // the next WR must be signaled
    void note_unsignaled(VQp& q, bool lazy);   // an unsignaled WR went out
    void post_pending(VQp& q);
    void count_posted(VQp& q, OpKind op, uint64_t bytes);
    // The hardware send queue has no room: what comes next waits in sq (posted as completions
    // free entries) instead of an ENOMEM from ibv_post_send, which fails the QP.
    static bool hw_full(const VQp& q) { return hw_posted(q) >= q.max_send_wr; }
    // WRs in the hardware send queue (tracked and untracked), their completions not polled yet.
    static size_t hw_posted(const VQp& q) { return q.n_posted + q.n_anon; }
    void reclaim_tail(VQp& q);             // signaled zero-length WRITE after an unsignaled tail
    int take_bounce();
    void want_lazy_tails();
    uint8_t* bounce_ptr(int slot) { return bounce_buf_.get() + size_t(slot) * cfg_.bounce_size; }
    Status stage_copy(WrRec& r, const iovec* iov, size_t n, size_t total);
    Status stage_local(WrRec& r, void* local, size_t len, bool write_to_local, uint32_t lkey);
    Status stage_inline(WrRec& r);         // an inline WR that must wait: into a bounce slot
    void finish(VQp& q, WrRec& r, Status st);   // resources, result, user completion
    void fail_qp(VQp& q, Status st);   // QP -> error: pending WRs complete with st; posted ones flush
    void abort_qp(VQp& q, Status st);  // fail_qp, and the HW QP to error so that posted ones do
    void release_qp(VQp& q, Status st);          // destroy HW QP, complete everything with st
    void erase_qp(uint32_t qpn);
    unsigned poll_cqs(bool all = false);   // all: the send CQ too, whatever is in flight
    void handle_send_wc(const ibv_wc& wc);
    void notify();
    void repost_recv(uint32_t idx);
    void flush_reposts();                  // repost_ as one chain on the SRQ

    // congestion.cpp
    cc::CcMode resolve_cc_mode() const;
    void cc_init(VQp& q);
    bool cc_may_post(VQp& q, WrRec& r);   // false: keep it pending (counted)
    // The time for cc_posted/cc_completed: only delay mode's RTT samples use it, so the other
    // modes read no clock per work request. Measured in the rxe guest (QEMU TCG, clocksource
    // hpet: every clock_gettime is a system call plus an emulated HPET read): three reads per
    // ping-pong iteration were part of rc_roce's latency gap to rc_verbs.
    uint64_t cc_now() const { return cc_mode_ == cc::CcMode::delay ? now_ns() : 0; }
    void cc_posted(VQp& q, WrRec& r, uint64_t now);
    // slack: how long the CQE may have waited unseen (send_poll_slack_ns_; cc::DelayCc).
    void cc_completed(VQp& q, const WrRec& r, bool sample, uint64_t now, uint64_t slack);
    bool cc_wants_signal(const VQp& q, const WrRec& r) const;
    void cc_progress();                               // post what the windows admit now
    uint32_t cc_chunk(const VQp& q) const;            // split WRITE/READ above this (0: never)

    // cm.cpp
    Status cm_init();
    void cm_thread_main();
    void cm_handle(int type, int status, uint64_t token, rdma_cm_id* id, const void* priv,
                   size_t priv_len, uint8_t resp_res, uint8_t init_depth);
    void cm_accept(rdma_cm_id* id, const void* priv, size_t priv_len, uint8_t resp_res,
                   uint8_t init_depth);
    bool cm_modify(VQp& q, rdma_cm_id* id, ibv_qp_state state, bool quiet = false);
    int resolve_attempt_ms() const { return int(std::max<uint32_t>(100, cfg_.connect_timeout_ms / 4)); }
    ConnPriv conn_priv(ibv_mtu own) const;        // what we send in REQ and REP
    gid::TrafficClass negotiate_tc(const void* priv, size_t priv_len);   // with the peer's advert
    ibv_mtu own_mtu(int sgid_index) const;        // UCX_RC_ROCE_MTU, the port's, the GID's netdev's
    uint8_t peer_mtu(const void* priv, size_t priv_len);          // the peer's (ConnPriv), 0: not said
    bool validate_gid(const gid::GidEntry& e, std::string& why);   // an address handle can be made
    void cm_fail_connect(VQp& q, Status st, const char* why);
    void free_passive(VQp& q);   // a passive QP whose peer left or never finished connecting
    void cm_deadlines();
    VQp* find_token(uint64_t token);

    DeviceConfig cfg_;
    std::shared_ptr<PdImpl> pd_;
    GidChoice gid_{};             // the interface default: our address
    GidContext gid_ctx_;          // the port's table, the net model and the settings
    std::unordered_map<unsigned, std::string> gid_checked_;   // validation results ("" = usable)
    gid::TrafficClass tc_{};      // this side's class (before negotiation)
    WireAddr addr_{};
    ibv_device_attr dev_attr_{};
    ibv_port_attr port_attr_{};
    mutable DeviceLock mu_;
    DeviceStats st_{};

    CompChannelPtr channel_;
    CqPtr send_cq_, recv_cq_;
    SrqPtr srq_;
    std::unique_ptr<uint8_t[]> recv_buf_;
    MrPtr recv_mr_;
    std::unique_ptr<uint8_t[]> bounce_buf_;
    MrPtr bounce_mr_;
    std::vector<int> bounce_free_;
    uint32_t signal_every_ = 1;

    std::unordered_map<uint32_t, std::unique_ptr<VQp>> qps_;   // changed by insert_qp/erase_qp only
    uint32_t passive_qps_ = 0;                                 // of qps_ (max_passive_qps)
    bool warned_foreign_req_ = false;                          // "not ours" is logged once
    bool warned_bad_mtu_ = false;                              // peer_mtu(): likewise
    bool warned_bad_tc_ = false, warned_tc_conflict_ = false;  // negotiate_tc(): likewise
    VQp* last_qp_[2] = {};                                     // find_qp's cache: in qps_ or null
    uint32_t signaled_inflight_ = 0;   // over all QPs (VQp::signaled_inflight)
    uint32_t send_poll_skips_ = 0;     // poll_cqs rounds without polling the send CQ
    uint64_t send_polled_ns_ = 0;      // delay mode: when the send CQ was last polled (cc_now)
    uint64_t send_poll_slack_ns_ = 0;  // ... and how long before this poll: a CQE's time unseen
    std::map<std::string, VQpStats> closed_qps_;   // erased QPs' counters, per peer address
    std::unordered_map<uint64_t, uint32_t> tokens_;   // rdma_cm id context -> qpn
    uint64_t next_token_ = 2;                          // 1 = the listener
    uint64_t next_gen_ = 1;
    size_t total_wrs_ = 0;                             // over all QPs (bounded by the send CQ)
    std::vector<uint32_t> tails_;                      // QPs that may have an unsignaled tail
    std::vector<uint32_t> held_;                       // QPs with WRs held back by congestion control
    cc::CcMode cc_mode_ = cc::CcMode::off;             // of every QP (resolve_cc_mode at init)
    double line_rate_bps_ = 0;

    // Rings, not std::deques (whose node bookkeeping was ~60 instructions per ping-pong iteration).
    Ring<Completion> cq_;
    struct RecvEntry {
        uint32_t idx, len, qpn;
        bool has_imm;
        uint32_t imm;
    };
    Ring<RecvEntry> rq_;
    // Sizes of cq_ and rq_ for the owner's poll_completions/poll_recv, read without mu_: a busy-
    // polling owner calls them after every progress(), and most calls find nothing (measured
    // in the rxe guest: the mutex was ~17% of an idle rc_roce poll loop, three round trips per
    // iteration). A completion the CM thread queues meanwhile is found by the next call.
    std::atomic<size_t> cq_len_{0}, rq_len_{0};
    // Receive buffers the owner is done with, reposted by the next progress() as one chain of
    // repost_batch_ (UCX's rc_verbs also posts receives in batches of 16): off the path between
    // a message and the reply its handler triggers, one SRQ lock per batch instead of per message.
    std::vector<uint32_t> repost_;
    uint32_t repost_batch_ = 1;
    uint64_t events_ = 0;          // completions + messages produced (also by the CM thread)
    uint64_t events_reported_ = 0; // ... of which progress() has reported
    bool send_armed_ = false, recv_armed_ = false;
    bool send_maybe_ev_ = false, recv_maybe_ev_ = false;   // a CQE came while armed: an event may be queued
    std::atomic<bool> notified_{false};
    std::atomic<bool> arm_requested_{false};

    // rdma_cm
    EventChannelPtr cm_channel_;
    CmIdPtr listen_id_;
    std::thread cm_thread_;
    Fd wake_fd_;   // eventfd: wakes the CM thread (stop, new deadline)
    Fd notify_fd_;
    Fd epoll_fd_;
    std::atomic<bool> stop_{false};
};


} // namespace roce::verbs
