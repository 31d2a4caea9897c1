// Responder (IBTA 9.7.4 / rxe_resp.c): PSN check first — the expected PSN executes, an earlier
// one is a duplicate (re-ACK, or replay a READ / atomic response), a later one is a gap (one
// PSN sequence error NAK per gap). Every remote memory access goes through the Pd with rkey,
// bounds and rights checked per packet; a failure is NAKed with remote access error and nothing
// is written.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>

#include "common/log.hpp"
#include "sw/device_impl.hpp"

namespace roce::sw {

using wire::Opcode;

namespace {
constexpr uint8_t rnr_timer_code = 10;   // 0.32 ms
}

bool DeviceImpl::send_ack(Qp& qp, uint8_t syndrome, uint32_t psn) {
    RespJob j;
    j.kind = RespJob::Kind::ack;
    j.syndrome = syndrome;
    j.psn = psn;
    j.msn = qp.msn;
    if (!respond(qp, j))
        return false;   // as if lost: still due (ack_pending), counted as resp_dropped only
    if (wire::aeth_kind(syndrome) == wire::AethKind::ack) {
        qp.ack_pending = false;
        qp.pkts_since_ack = 0;
        qp.ack_deadline_ns = 0;
    } else {
        count_nak(qp, syndrome, true);
    }
    return true;
}

void DeviceImpl::want_ack(Qp& qp, bool prompt) {
    qp.ack_pending = true;
    if (prompt || cfg_.ack_delay_us == 0) {
        if (!qp.ack_listed) {
            qp.ack_listed = true;
            ack_list_.push_back(qp.qpn);
        }
    } else if (qp.ack_deadline_ns == 0) {
        // Only packet processing asks for ACKs: the packet's arrival time, no clock read
        qp.ack_deadline_ns = qp.last_heard_ns + uint64_t(cfg_.ack_delay_us) * 1000;
    }
}

void DeviceImpl::count_nak(Qp& qp, uint8_t syndrome, bool sent) {
    uint64_t* by_type[2][4] = {
        {&st_.naks_received_seq, &st_.naks_received_rnr, &st_.naks_received_access, &st_.naks_received_invalid},
        {&st_.naks_sent_seq, &st_.naks_sent_rnr, &st_.naks_sent_access, &st_.naks_sent_invalid}};
    uint64_t* qp_by_type[2][4] = {
        {&qp.st.naks_received_seq, &qp.st.naks_received_rnr, &qp.st.naks_received_access,
         &qp.st.naks_received_invalid},
        {&qp.st.naks_sent_seq, &qp.st.naks_sent_rnr, &qp.st.naks_sent_access, &qp.st.naks_sent_invalid}};
    // Remote operational errors (code 3) and reserved codes count as invalid requests.
    unsigned t = 3;
    if (wire::aeth_kind(syndrome) == wire::AethKind::rnr_nak)
        t = 1;
    else if ((syndrome & 0x1f) == wire::nak_psn_seq_error)
        t = 0;
    else if ((syndrome & 0x1f) == wire::nak_remote_access)
        t = 2;
    ++*by_type[sent][t];
    ++*qp_by_type[sent][t];
    ++(sent ? st_.naks_sent : st_.naks_received);
}

bool DeviceImpl::respond(Qp& qp, RespJob j, bool ahead) {
    if (qp.resp_jobs.empty() || ahead) {
        // Without the progress thread an owner asleep on the event fd would send the rest only
        // when the peer's retransmissions wake it: all at once then, as a NIC would.
        size_t budget = cfg_.progress_thread ? resp_slice_bytes : SIZE_MAX;
        if (emit_response(qp, j, budget))
            return true;
    } else if (j.kind == RespJob::Kind::ack && qp.resp_jobs.back().kind == RespJob::Kind::ack &&
               wire::aeth_kind(j.syndrome) == wire::AethKind::ack &&
               wire::aeth_kind(qp.resp_jobs.back().syndrome) == wire::AethKind::ack) {
        qp.resp_jobs.back() = j;   // a newer ACK says all the older one did
        return true;
    }
    if (qp.resp_jobs.size() >= max_resp_jobs) {
        st_.resp_dropped++;
        return false;
    }
    if (ahead)
        qp.resp_jobs.push_front(j);
    else
        qp.resp_jobs.push_back(j);
    if (!qp.resp_listed) {
        qp.resp_listed = true;
        resp_list_.push_back(qp.qpn);
    }
    return true;
}

bool DeviceImpl::emit_response(Qp& qp, RespJob& j, size_t& budget) {
    wire::Packet pkt;
    pkt.bth.psn = j.psn;
    pkt.aeth.syndrome = j.kind == RespJob::Kind::ack ? j.syndrome : wire::aeth_ack_syndrome;
    pkt.aeth.msn = j.msn & wire::psn_mask;
    if (j.kind == RespJob::Kind::ack) {
        pkt.bth.opcode = uint8_t(Opcode::rc_ack);
        emit(qp, pkt, {});
        return true;
    }
    if (j.kind == RespJob::Kind::atomic) {
        pkt.bth.opcode = uint8_t(Opcode::rc_atomic_ack);
        pkt.atomic_ack.orig = j.orig;
        emit(qp, pkt, {});
        return true;
    }
    // The region stays pinned (no dereg_mr) while the responses are built, and the packets
    // may point into it until they are sent (emit_gather, tx_flush).
    const uint32_t mtu = qp.mtu;
    const auto pin = pd_->pin();
    const uint8_t* base = j.len ? pd_->lookup_pinned(j.rkey, j.va, j.len, access_remote_read) : nullptr;
    if (j.len && !base) {
        st_.tx_region_gone++;   // deregistered meanwhile: the requester asks again and gets a NAK
        return true;
    }
    pd_pinned_ = true;
    for (bool any = false; j.next < j.n && (!any || budget >= mtu); ++j.next, any = true) {
        const uint32_t i = j.next;
        const size_t off = size_t(i) * mtu;
        const size_t sz = std::min<size_t>(mtu, j.len - std::min<size_t>(j.len, off));
        const bool first = i == 0 && !j.mid_start, last = i + 1 == j.n;
        Opcode op;
        if (first)
            op = last ? Opcode::rc_read_response_only : Opcode::rc_read_response_first;
        else
            op = last ? Opcode::rc_read_response_last : Opcode::rc_read_response_middle;
        pkt.bth.opcode = uint8_t(op);
        pkt.bth.psn = wire::psn_add(j.psn, i);
        if (sz == 0)
            emit(qp, pkt, {});
        else
            emit_gather(qp, pkt, std::span<const uint8_t>(base + off, sz), j.rkey, j.va + off);
        budget -= std::min(budget, std::max<size_t>(sz, 1));
    }
    pd_pinned_ = false;
    return j.next == j.n;
}

void DeviceImpl::pump_responses() {
    for (size_t k = 0; k < resp_list_.size();) {
        Qp* qp = find_qp(resp_list_[k]);
        if (qp && qp->state != QpState::rts)
            qp->resp_jobs.clear();   // failed or closing: nobody takes them
        size_t budget = resp_slice_bytes;
        while (qp && !qp->resp_jobs.empty() && budget > 0 && emit_response(*qp, qp->resp_jobs.front(), budget))
            qp->resp_jobs.pop_front();
        if (qp && !qp->resp_jobs.empty()) {
            ++k;
            continue;
        }
        if (qp)
            qp->resp_listed = false;
        resp_list_[k] = resp_list_.back();
        resp_list_.pop_back();
    }
}

namespace {

struct Resp {
    DeviceImpl& dev;
    Qp& qp;

    void nak(wire::NakCode code) {
        if (dev.send_ack(qp, wire::aeth_nak_syndrome(code), qp.epsn))
            qp.nak_sent = true;   // (one per gap: a dropped one may be sent for the next packet)
        if (code != wire::nak_psn_seq_error) {
            if (qp.in_op == Qp::InOp::send)
                dev.release_rbuf(qp);
            qp.in_op = Qp::InOp::none;
        }
    }

    void deliver(std::vector<uint8_t>&& data, bool has_imm, uint32_t imm) {
        // Its bytes, not its buffer's capacity: a pooled buffer that once held a large message
        // would count a small one as that large (incasts of small messages while the owner
        // computes would meet RNR NAKs long before any memory is at stake).
        const size_t charge = data.size() + sizeof(DeviceImpl::RecvEntry);
        dev.rq_bytes_ += charge;
        dev.rq_.push_back(DeviceImpl::RecvEntry{qp.qpn, std::move(data), has_imm, imm, charge});
        ++qp.undelivered;
        ++dev.new_events_;
    }

    // An in-order SEND/WRITE packet was executed.
    void accepted(const wire::Packet& pkt) {
        qp.ack_psn = qp.epsn;
        qp.epsn = wire::psn_add(qp.epsn, 1);
        qp.nak_sent = false;
        ++qp.pkts_since_ack;
        if (qp.pkts_since_ack >= dev.cfg_.ack_coalesce)
            dev.send_ack(qp, wire::aeth_ack_syndrome, qp.ack_psn);
        else
            dev.want_ack(qp, pkt.bth.ack_req);
    }

    // A message that takes a receive entry (a SEND, a WRITE with immediate: IBTA consumes one
    // for each) while the owner has RX_QUEUE_LEN messages of this QP, or recv_budget bytes of
    // all, that it has not taken: RNR NAK, and the requester sends this packet again after the
    // RNR timer. Without the first a peer's WRITEs with immediate (no rkey needed at length 0)
    // queued messages without bound; without the second, strangers' passive QPs (65,536 of
    // them, RX_QUEUE_LEN messages each) did while the owner computed (found by review).
    bool receive_queue_full() {
        if (qp.undelivered < dev.cfg_.recv_queue_len) {
            if (dev.rq_bytes_ < dev.cfg_.recv_budget)
                return false;
            if (dev.give_up_overdue_sends(qp.last_heard_ns) && dev.rq_bytes_ < dev.cfg_.recv_budget)
                return false;
        }
        if (dev.send_ack(qp, wire::aeth_rnr_syndrome(rnr_timer_code), qp.epsn)) {
            dev.st_.rnr_naks++;
            qp.st.rnr_naks++;
            qp.nak_sent = true;
        }
        return true;
    }

    // A READ/atomic executed, kept to answer its duplicates. Entries it overlaps (in either
    // ring) are from 2^24 PSNs ago (the PSN space wrapped with fewer than 64 READs/atomics in
    // between): forgotten, so that a duplicate of this one cannot be answered from them.
    void remember(uint32_t psn, uint32_t npkts, bool atomic, uint64_t orig) {
        for (auto* ring : {&qp.replay_read, &qp.replay_atomic}) {
            for (ReplayEntry& e : *ring) {
                if (e.valid && uint32_t(wire::psn_diff(psn, e.psn)) < e.npkts)
                    e.valid = false;   // it covers psn
                else if (e.valid && uint32_t(wire::psn_diff(e.psn, psn)) < npkts)
                    e.valid = false;   // psn's range covers it
            }
        }
        auto& ring = atomic ? qp.replay_atomic : qp.replay_read;
        unsigned& next = atomic ? qp.replay_atomic_next : qp.replay_read_next;
        ring[next++ % ring.size()] = ReplayEntry{true, atomic, psn, npkts, orig};
    }

    // The newest entry of that kind covering `psn`, or nullptr.
    const ReplayEntry* replayed(uint32_t psn, bool atomic) const {
        const auto& ring = atomic ? qp.replay_atomic : qp.replay_read;
        const unsigned next = atomic ? qp.replay_atomic_next : qp.replay_read_next;
        const size_t n = ring.size();
        for (size_t k = 1; k <= n; ++k) {
            const ReplayEntry& e = ring[(next - k) % n];
            if (e.valid && uint32_t(wire::psn_diff(psn, e.psn)) < e.npkts)
                return &e;
        }
        return nullptr;
    }

    // A duplicate that cannot be answered: the requester gets a NAK naming it, and fails the
    // work request with the QP, instead of retrying while our other traffic keeps it alive.
    void nak_duplicate(uint32_t psn, wire::NakCode code) {
        dev.send_ack(qp, wire::aeth_nak_syndrome(code), psn);
    }

    // Answers a READ of [va, va+len) starting at `psn` (respond: at once, or a slice at a time).
    // mid_start: the request re-issues the tail of an earlier READ, so the first packet is a
    // MIDDLE/LAST (as rxe answers).
    void read_responses(uint32_t psn, uint64_t va, uint32_t rkey, uint32_t len, uint32_t n, bool mid_start,
                        bool ahead = false) {
        RespJob j;
        j.kind = RespJob::Kind::read;
        j.mid_start = mid_start;
        j.psn = psn;
        j.msn = qp.msn;
        j.n = n;
        j.rkey = rkey;
        j.len = len;
        j.va = va;
        dev.respond(qp, j, ahead);
    }

    // A READ re-issued from `psn` (responses lost) while the READ it continues is still being
    // sent in slices: that READ goes back to `psn` instead of being answered twice. n: the
    // packets the request asks for, which must be that READ's tail.
    bool rewind_sliced_read(uint32_t psn, uint32_t n) {
        if (qp.resp_jobs.empty() || qp.resp_jobs.front().kind != RespJob::Kind::read)
            return false;
        RespJob& f = qp.resp_jobs.front();
        const int32_t d = wire::psn_diff(psn, f.psn);
        if (d < 0 || uint32_t(d) >= f.n || uint32_t(d) + n != f.n)
            return false;
        f.next = std::min(f.next, uint32_t(d));
        return true;
    }

    // A READ/atomic from before the responses waiting here: answered ahead of them. Behind a
    // long READ, its answer came after that READ's responses, which the requester (gone back
    // to it) took as a sign of loss: it went back again and the READ restarted, for ever. What
    // waits stays: a stale duplicate (delayed on the way, not a go-back) costs nothing, and
    // after a go-back the long READ's re-issue rewinds it (rewind_sliced_read).
    bool answer_ahead(uint32_t psn) const {
        return !qp.resp_jobs.empty() && wire::psn_diff(psn, qp.resp_jobs.front().psn) < 0;
    }

    void duplicate(const wire::Packet& pkt) {
        dev.st_.duplicates++;
        qp.st.duplicates++;
        const uint32_t p = pkt.bth.psn;
        const auto op = Opcode(pkt.bth.opcode);
        const bool ahead = answer_ahead(p);
        if (op == Opcode::rc_read_request) {
            const uint32_t len = pkt.reth.dma_len;
            const uint32_t n = len ? (len + qp.mtu - 1) / qp.mtu : 1;
            if (len > (1u << 31))
                return nak_duplicate(p, wire::nak_invalid_request);
            // Checked again as a new request would be: the region may be gone since.
            if (len && !dev.pd_->lookup(pkt.reth.rkey, pkt.reth.va, len, access_remote_read))
                return nak_duplicate(p, wire::nak_remote_access);
            if (rewind_sliced_read(p, n))
                return;
            if (const ReplayEntry* e = replayed(p, false)) {
                const auto d = uint32_t(wire::psn_diff(p, e->psn));
                if (d + n > e->npkts)
                    return nak_duplicate(p, wire::nak_invalid_request);   // not a tail of that READ
                read_responses(p, pkt.reth.va, pkt.reth.rkey, len, n, d != 0, ahead);
                return;
            }
            // Older than the replay cache remembers (many small READs outstanding, re-issued
            // after heavy loss): READ is idempotent, so answer it from its own RETH, access
            // checked as for a new request. Ignoring it would leave the requester without the
            // data for good and fail the QP.
            read_responses(p, pkt.reth.va, pkt.reth.rkey, len, n, false, ahead);
            return;
        }
        if (op == Opcode::rc_fetch_add || op == Opcode::rc_cmp_swap) {
            // Executing it again would return another original value; older than the cache
            // remembers (more than 64 atomics since: beyond any requester's outstanding
            // limit, ours is MAX_RD_ATOMIC 16), it cannot be answered.
            if (const ReplayEntry* e = replayed(p, true); e && e->psn == p)
                return atomic_ack(p, e->orig, ahead);
            return nak_duplicate(p, wire::nak_invalid_request);
        }
        // SEND/WRITE: acknowledge again (coalesced to the end of the receive batch).
        dev.want_ack(qp, true);
    }

    void atomic_ack(uint32_t psn, uint64_t orig, bool ahead = false) {
        RespJob j;
        j.kind = RespJob::Kind::atomic;
        j.psn = psn;
        j.msn = qp.msn;
        j.orig = orig;
        dev.respond(qp, j, ahead);
    }

    void packet(const wire::Packet& pkt) {
        const uint32_t p = pkt.bth.psn;
        const int32_t d = wire::psn_diff(p, qp.epsn);
        if (d < 0) {
            duplicate(pkt);
            return;
        }
        if (d > 0) {
            dev.st_.seq_errors++;
            qp.st.seq_errors++;
            if (!qp.nak_sent)
                nak(wire::nak_psn_seq_error);
            return;
        }
        const auto op = Opcode(pkt.bth.opcode);
        const size_t n = pkt.payload.size();
        const uint32_t mtu = qp.mtu;
        const DeviceConfig& cfg = dev.cfg_;
        switch (op) {
        case Opcode::rc_send_first:
        case Opcode::rc_send_only:
        case Opcode::rc_send_only_imm: {
            if (qp.in_op != Qp::InOp::none)
                return nak(wire::nak_invalid_request);
            if (receive_queue_full())
                return;
            if ((op == Opcode::rc_send_first && n != mtu) || n > cfg.max_recv_msg)
                return nak(wire::nak_invalid_request);
            std::vector<uint8_t> b = dev.take_buf();
            if (op == Opcode::rc_send_first)
                b.reserve(dev.pooled_buf_max());   // no regrowth while the message reassembles
            b.assign(pkt.payload.begin(), pkt.payload.end());
            if (op == Opcode::rc_send_first) {
                qp.rbuf = std::move(b);
                qp.rbuf_first_ns = qp.last_heard_ns;   // (this packet's arrival)
                dev.charge_rbuf(qp);
                qp.in_op = Qp::InOp::send;
            } else {
                ++qp.msn;
                deliver(std::move(b), op == Opcode::rc_send_only_imm, pkt.imm);
            }
            return accepted(pkt);
        }
        case Opcode::rc_send_middle:
        case Opcode::rc_send_last:
        case Opcode::rc_send_last_imm: {
            const bool last = op != Opcode::rc_send_middle;
            if (qp.in_op != Qp::InOp::send || (!last && n != mtu) || (last && (n == 0 || n > mtu)))
                return nak(wire::nak_invalid_request);
            if (qp.rbuf.size() + n > cfg.max_recv_msg)
                return nak(wire::nak_invalid_request);   // (drops the reassembly)
            qp.rbuf.insert(qp.rbuf.end(), pkt.payload.begin(), pkt.payload.end());
            if (last) {
                qp.in_op = Qp::InOp::none;
                ++qp.msn;
                deliver(dev.take_rbuf(qp), op == Opcode::rc_send_last_imm, pkt.imm);   // (charged there)
            } else {
                dev.charge_rbuf(qp);
            }
            return accepted(pkt);
        }
        case Opcode::rc_write_first:
        case Opcode::rc_write_only:
        case Opcode::rc_write_only_imm: {
            if (qp.in_op != Qp::InOp::none)
                return nak(wire::nak_invalid_request);
            if (op == Opcode::rc_write_only_imm && receive_queue_full())
                return;
            const wire::Reth& r = pkt.reth;
            const bool only = op != Opcode::rc_write_first;
            if (only ? n != r.dma_len : (n != mtu || r.dma_len <= mtu))
                return nak(wire::nak_invalid_request);
            if (r.dma_len && !dev.pd_->lookup(r.rkey, r.va, r.dma_len, access_remote_write))
                return nak(wire::nak_remote_access);
            if (n && !dev.pd_->with_region(r.rkey, r.va, n, access_remote_write,
                                           [&](uint8_t* dst) { std::memcpy(dst, pkt.payload.data(), n); }))
                return nak(wire::nak_remote_access);
            if (only) {
                ++qp.msn;
                if (op == Opcode::rc_write_only_imm)
                    deliver(dev.take_buf(), true, pkt.imm);
            } else {
                qp.in_op = Qp::InOp::write;
                qp.w_va = r.va + n;
                qp.w_rkey = r.rkey;
                qp.w_remaining = r.dma_len - n;
            }
            return accepted(pkt);
        }
        case Opcode::rc_write_middle:
        case Opcode::rc_write_last:
        case Opcode::rc_write_last_imm: {
            const bool last = op != Opcode::rc_write_middle;
            if (qp.in_op != Qp::InOp::write || (!last && (n != mtu || n >= qp.w_remaining)) ||
                (last && n != qp.w_remaining))
                return nak(wire::nak_invalid_request);
            if (op == Opcode::rc_write_last_imm && receive_queue_full())
                return;   // the earlier packets stay placed; this one comes again
            if (!dev.pd_->with_region(qp.w_rkey, qp.w_va, n, access_remote_write,
                                      [&](uint8_t* dst) { std::memcpy(dst, pkt.payload.data(), n); }))
                return nak(wire::nak_remote_access);
            qp.w_va += n;
            qp.w_remaining -= n;
            if (last) {
                qp.in_op = Qp::InOp::none;
                ++qp.msn;
                if (op == Opcode::rc_write_last_imm)
                    deliver(dev.take_buf(), true, pkt.imm);
            }
            return accepted(pkt);
        }
        case Opcode::rc_read_request: {
            if (qp.in_op != Qp::InOp::none)
                return nak(wire::nak_invalid_request);
            const wire::Reth& r = pkt.reth;
            if (r.dma_len > (1u << 31))
                return nak(wire::nak_invalid_request);
            if (r.dma_len && !dev.pd_->lookup(r.rkey, r.va, r.dma_len, access_remote_read))
                return nak(wire::nak_remote_access);
            const uint32_t npk = r.dma_len ? (r.dma_len + mtu - 1) / mtu : 1;
            ++qp.msn;
            remember(p, npk, false, 0);
            qp.epsn = wire::psn_add(qp.epsn, npk);
            qp.nak_sent = false;
            read_responses(p, r.va, r.rkey, r.dma_len, npk, false);
            return;
        }
        case Opcode::rc_fetch_add:
        case Opcode::rc_cmp_swap: {
            if (qp.in_op != Qp::InOp::none)
                return nak(wire::nak_invalid_request);
            const wire::AtomicEth& a = pkt.atomic;
            if (a.va & 7)
                return nak(wire::nak_invalid_request);
            uint64_t orig = 0;
            const bool ok = dev.pd_->with_region(a.rkey, a.va, 8, access_remote_atomic, [&](uint8_t* dst) {
                auto* v = reinterpret_cast<uint64_t*>(dst);
                if (op == Opcode::rc_fetch_add) {
                    orig = __atomic_fetch_add(v, a.swap_add, __ATOMIC_SEQ_CST);
                } else {
                    uint64_t expected = a.compare;
                    __atomic_compare_exchange_n(v, &expected, a.swap_add, false, __ATOMIC_SEQ_CST,
                                                __ATOMIC_SEQ_CST);
                    orig = expected;
                }
            });
            if (!ok)
                return nak(wire::nak_remote_access);
            ++qp.msn;
            remember(p, 1, true, orig);
            qp.epsn = wire::psn_add(qp.epsn, 1);
            qp.nak_sent = false;
            atomic_ack(p, orig);
            return;
        }
        default:
            dev.st_.malformed++;
            return;
        }
    }
};

} // namespace

void DeviceImpl::resp_packet(Qp& qp, const wire::Packet& pkt) {
    Resp{*this, qp}.packet(pkt);
}

} // namespace roce::sw
