// verbs::Device completions: the send and receive CQs, retiring work requests in order (RC: a
// signaled CQE completes every earlier WR of its QP), reclaiming unsignaled tails, arming the
// completion channel, and handing completions and received messages to the owner.
#include <algorithm>
#include <arpa/inet.h>
#include <cstring>
#include <unistd.h>

#include "common/log.hpp"
#include "verbs/device_impl.hpp"

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
} // namespace

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
        cc_completed(*q, r, r.seq == seq && wc.status == IBV_WC_SUCCESS, now, send_poll_slack_ns_);
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
        if (const uint64_t t = cc_now()) {
            // Armed: the owner slept on the event fd, which a CQE wakes; not away.
            send_poll_slack_ns_ = !send_armed_ && send_polled_ns_ ? elapsed_ns(t, send_polled_ns_) : 0;
            send_polled_ns_ = t;
        }
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
            if (q)
                q->in_tails = false;
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
            q->in_tails = false;
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
