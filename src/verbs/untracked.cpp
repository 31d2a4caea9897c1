// Lazy inline SENDs without a work-request record: DeviceImpl::post_send_untracked posts them,
// VQp::anon keeps their sequence numbers as runs, handle_send_wc (completion.cpp) retires them with
// the CQE that retires the records around them, finish_anon reports them.
#include <arpa/inet.h>

#include "verbs/device_impl.hpp"

namespace roce::verbs {

// The common case of UCX's short active messages: a lazy (nobody waits), inline, unsignaled SEND
// on a connected QP with nothing queued in software. Such a WR needs none of a WrRec's state
// (buffers, registrations, results, congestion window), only its place in the sequence for the
// CQE that will retire it, so it goes out without one: a run-length entry in VQp::anon. Measured
// (callgrind, rxe guest, UCP tag_lat client): the send 846 -> 717 instructions per iteration, and
// retiring the records (handle_send_wc's loop, finish: ~260) gone. Anything else takes the normal
// path: not connected or WRs held (ordering), congestion control in delay mode (its window counts
// bytes per WR), a WR that would be signaled (moderation, bounce slots), a full queue or CQ.
bool DeviceImpl::post_send_untracked(VQp& q, uint64_t wr_id, const iovec* iov, size_t iovcnt,
                                     const uint32_t* imm, size_t total) {
    if (q.state != QpState::rts || q.n_posted != q.sq.size() || cc_mode_ == cc::CcMode::delay ||
        total == 0 || total > q.max_inline || iovcnt > 4 || moderation_due(q) ||
        hw_posted(q) + 1 >= q.max_send_wr)   // (the queue's last slot goes signaled: post_hw)
        return false;   // (admit() has checked the queue depth and the CQ)
    ibv_sge sge[4];
    ibv_send_wr wr{};
    const uint64_t seq = q.next_seq;
    wr.wr_id = ibv_wr_id(q, seq);
    wr.sg_list = sge;
    wr.num_sge = inline_sges(sge, iov, iovcnt);
    wr.opcode = imm ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND;
    if (imm)
        wr.imm_data = htonl(*imm);
    wr.send_flags = IBV_SEND_INLINE;
    ibv_send_wr* bad = nullptr;
    if (ibv_post_send(q.qp.get(), &wr, &bad) != 0)
        return false;   // the normal path posts again and reports the failure
    ++q.next_seq;
    if (!q.anon.empty() && q.anon.back().wr_id == wr_id && q.anon.back().first_seq + q.anon.back().count == seq)
        ++q.anon.back().count;
    else
        q.anon.push_default() = AnonRun{seq, 1, wr_id};
    ++q.n_anon;
    ++total_wrs_;
    q.posted_since_progress = true;
    note_unsignaled(q, true);
    ++st_.sends;
    ++q.st.sends;
    q.st.posted_bytes += total;
    ++st_.inline_sends;
    ++st_.untracked_sends;
    return true;
}

void DeviceImpl::finish_anon(VQp& q, uint64_t wr_id, uint32_t n, Status st) {
    if (n != 0)
        report(q, wr_id, OpKind::send, st, n);
}

} // namespace roce::verbs
