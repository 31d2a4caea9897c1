// verbs::Device posting: admission, staging a payload, completion moderation, the QP's
// software queue (held by connection setup or congestion control) and ibv_post_send.
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

#include "common/log.hpp"
#include "verbs/device_impl.hpp"

namespace roce::verbs {

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
                     (q.signaled_inflight == 0 && !lazy) || moderation_due(q) || cc_wants_signal(q, r) ||
                     hw_posted(q) + 1 >= q.max_send_wr;   // the last free slot: a CQE will free them
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
        // Once: a QP whose run restarted before progress() saw it end is still listed (a list
        // entry per run grew without bound under steady lazy sends).
        if (!q.in_tails) {
            tails_.push_back(q.qpn);
            q.in_tails = true;
        }
        q.lazy_tail = true;
    }
    q.lazy_tail &= lazy;
    ++st_.unsignaled;
}

// Counted once the request is taken (posted or queued): a refused one is posted again by its
// caller and would count twice.
void DeviceImpl::count_posted(VQp& q, OpKind op, uint64_t bytes) {
    switch (op) {
    case OpKind::send: ++st_.sends; ++q.st.sends; break;
    case OpKind::write: ++st_.writes; ++q.st.writes; break;
    case OpKind::read: ++st_.reads; ++q.st.reads; break;
    default: ++st_.atomics; ++q.st.atomics; break;
    }
    q.st.posted_bytes += bytes;
}

Status DeviceImpl::submit(VQp& q) {
    WrRec* rec = &q.sq.back();
    rec->seq = q.next_seq++;
    for (int i = 0; i < rec->wr.num_sge; ++i)
        rec->cc_bytes += rec->sge[i].length;
    const OpKind op = rec->op;
    const uint64_t bytes = rec->cc_bytes;
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
    const bool held = q.state != QpState::rts || behind || hw_full(q) || !cc_may_post(q, *rec);
    if (held && (rec->wr.send_flags & IBV_SEND_INLINE)) {
        // An inline WR points at the caller's buffer, valid only during this call: copy it now
        // (measured: held inline AM headers posted later were garbage to UCP -> crashes).
        if (Status s = stage_inline(*rec); s != Status::ok)
            return drop_new_wr(q, s);
    }
    ++total_wrs_;
    if (held) {
        count_posted(q, op, bytes);
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
    count_posted(q, op, bytes);
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
        if (hw_full(q) || (!q.sq[q.n_posted].internal && !cc_may_post(q, q.sq[q.n_posted])))
            return;
        if (!post_hw(q, q.sq[q.n_posted])) {
            abort_qp(q, Status::io_error);
            notify();
            return;
        }
    }
}

void DeviceImpl::reclaim_tail(VQp& q) {
    if (hw_full(q))
        return;   // (signaled WRs are ahead in the queue: their completions come, then this)
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

// A WRITE or READ record at the back of the QP's queue, its payload not yet staged.
WrRec& DeviceImpl::new_rdma_wr(VQp& q, uint64_t wr_id, OpKind op, uint64_t remote_va, uint32_t rkey) {
    WrRec& r = new_wr(q);
    r.wr_id = wr_id;
    r.op = op;
    r.wr.opcode = op == OpKind::write ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_READ;
    r.wr.wr.rdma.remote_addr = remote_va;
    r.wr.wr.rdma.rkey = rkey;
    return r;
}

Status DeviceImpl::post_write(uint32_t qpn, uint64_t wr_id, const void* local, size_t len,
                              uint64_t remote_va, uint32_t rkey, bool copy, uint32_t lkey) {
    if (len > 0x7fffffffu || (len && !local))
        return Status::invalid_param;
    std::lock_guard lk(mu_);
    VQp* q;
    if (Status s = admit(qpn, q); s != Status::ok)
        return s;
    WrRec& r = new_rdma_wr(*q, wr_id, OpKind::write, remote_va, rkey);
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
    WrRec& r = new_rdma_wr(*q, wr_id, OpKind::read, remote_va, rkey);
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

} // namespace roce::verbs
