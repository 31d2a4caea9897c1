// Requester: turns work requests into packets (IBTA 9.7.1). PSNs are assigned when a WR first
// goes out; go-back-N rewinds the cursor (send_idx, send_pkt) and re-sends with the same PSNs.
// SEND/WRITE are segmented at the path MTU (RETH on WRITE FIRST/ONLY, AckReq on LAST/ONLY and
// on every min(64, cwnd/2)-th packet: rxe, like other responders, acknowledges only packets that
// ask for it, so a window of packets without AckReq would stall until the retransmission timer).
// READs are issued as requests of at most read_chunk_pkts_ response packets at fixed chunk
// boundaries, so a re-issued READ (from the first missing response, at VA + offset, as rxe does)
// always lies inside one request the responder has seen. In-flight packets are limited to
// window_pkts_ so the peer's socket buffer is not overrun.
#include <algorithm>
#include <cstring>

#include "common/log.hpp"
#include "sw/device_impl.hpp"

namespace roce::sw {

using wire::Opcode;

Status DeviceImpl::post_wr(uint32_t qpn, Wr&& w) {
    std::lock_guard lk(mu_);
    Qp* qp = find_qp(qpn);
    if (!qp)
        return Status::invalid_param;
    if (qp->state == QpState::reset)
        return Status::invalid_param;
    if (qp->state == QpState::error)
        return Status::canceled;
    if (qp->sq.size() >= cfg_.sq_depth)
        return Status::no_resource;
    if (w.packets(qp->mtu) > max_wr_packets)
        return Status::invalid_param;
    w.npkts = uint32_t(w.packets(qp->mtu));
    qp->sq.push_back(std::move(w));
    if (qp->state == QpState::rts) {
        const uint64_t now = now_ns();
        req_progress(*qp, now);
        if (posts_since_progress_++ == 0)
            tx_flush();
        else
            hold_tx(now);
    }
    return Status::ok;
}

namespace {

// Bytes a packet adds on the wire besides its payload (IPv4 + UDP + BTH + ICRC + extension
// headers, roughly): what the pacer charges per packet.
constexpr uint32_t pkt_overhead = 20 + 8 + 12 + 4 + 16;

// READ response bytes asked for and not yet received, over the QP's READ work requests.
uint64_t read_bytes_outstanding(const Qp& qp) {
    uint64_t pkts = 0;
    for (size_t i = 0; i < qp.sq.size() && i <= qp.send_idx; ++i) {
        const Wr& w = qp.sq[i];
        if (w.op != OpKind::read || !w.psn_assigned)
            continue;
        const uint32_t issued = i < qp.send_idx ? w.npkts : qp.send_pkt;
        if (issued > w.resp_pkts)
            pkts += issued - w.resp_pkts;
    }
    return pkts * qp.mtu;
}

uint8_t send_opcode(uint32_t idx, uint32_t n, bool imm) {
    if (n == 1)
        return uint8_t(imm ? Opcode::rc_send_only_imm : Opcode::rc_send_only);
    if (idx == 0)
        return uint8_t(Opcode::rc_send_first);
    if (idx + 1 < n)
        return uint8_t(Opcode::rc_send_middle);
    return uint8_t(imm ? Opcode::rc_send_last_imm : Opcode::rc_send_last);
}

uint8_t write_opcode(uint32_t idx, uint32_t n) {
    if (n == 1)
        return uint8_t(Opcode::rc_write_only);
    if (idx == 0)
        return uint8_t(Opcode::rc_write_first);
    if (idx + 1 < n)
        return uint8_t(Opcode::rc_write_middle);
    return uint8_t(Opcode::rc_write_last);
}

} // namespace

// Whether the LAST/ONLY packet of a lazy SEND may go without AckReq, leaving its ACK to the
// responder's delayed ACK. Not to a peer connected by hand: rxe and RDMA NICs acknowledge only
// AckReq packets. Not under delay control: its RTT samples would measure the ACK delay. Not
// when the send queue fills up: the WRs wait for their ACK to free their slots.
bool DeviceImpl::lazy_ack_ok(const Qp& qp) const {
    return cfg_.ack_delay_us > 0 && !qp.manual && !(qp.cc && qp.cc->mode() == cc::CcMode::delay) &&
           qp.sq.size() < cfg_.sq_depth / 2;
}

void DeviceImpl::req_progress(Qp& qp, uint64_t now) {
    if (qp.state != QpState::rts)
        return;
    if (qp.rnr_wait_until_ns) {
        if (now < qp.rnr_wait_until_ns)
            return;
        qp.rnr_wait_until_ns = 0;
    }
    while (qp.send_idx < qp.sq.size()) {
        Wr& w = qp.sq[qp.send_idx];
        if (!w.psn_assigned) {
            if (w.is_rd_atomic() && qp.rd_outstanding >= cfg_.max_rd_atomic)
                return;
            // New PSNs must stay inside the window as well.
            const uint32_t first_chunk = w.op == OpKind::read ? std::min(w.npkts, read_chunk_pkts_) : 1;
            if (uint32_t(wire::psn_diff(qp.next_psn, qp.una_psn)) + first_chunk > uint32_t(qp.cwnd) &&
                wire::psn_diff(qp.next_psn, qp.una_psn) != 0)
                return;
            w.first_psn = qp.next_psn;
            w.psn_assigned = true;
            qp.next_psn = wire::psn_add(qp.next_psn, w.npkts);
            if (w.is_rd_atomic())
                ++qp.rd_outstanding;
        }
        const uint32_t psn = wire::psn_add(w.first_psn, qp.send_pkt);
        const int32_t inflight = wire::psn_diff(psn, qp.una_psn);
        wire::Packet pkt;
        pkt.bth.psn = psn;
        uint32_t end_psn = wire::psn_add(psn, 1);   // one past the last PSN this packet covers
        switch (w.op) {
        case OpKind::send:
        case OpKind::write: {
            if (inflight > 0 && uint32_t(inflight) >= uint32_t(qp.cwnd))
                return;
            const size_t off = size_t(qp.send_pkt) * qp.mtu;
            const size_t n = std::min<size_t>(qp.mtu, w.len - std::min(w.len, off));
            if (!cc_may_send(qp, uint32_t(n + pkt_overhead), now, psn))
                return;
            const bool last = qp.send_pkt + 1 == w.npkts;
            if (w.op == OpKind::send) {
                pkt.bth.opcode = send_opcode(qp.send_pkt, w.npkts, w.has_imm);
            } else {
                pkt.bth.opcode = write_opcode(qp.send_pkt, w.npkts);
                if (qp.send_pkt == 0) {
                    pkt.reth.va = w.remote_va;
                    pkt.reth.rkey = w.rkey;
                    pkt.reth.dma_len = uint32_t(w.len);
                }
            }
            pkt.imm = w.imm;
            const uint32_t ackreq_every = std::clamp<uint32_t>(uint32_t(qp.cwnd) / 2, 1, 64);
            const bool lazy_last = last && w.lazy && lazy_ack_ok(qp);
            pkt.bth.ack_req = (last && !lazy_last) || ++qp.since_ackreq >= ackreq_every;
            if (pkt.bth.ack_req)
                qp.since_ackreq = 0;
            // A zero-copy WRITE's source is the caller's until it sees the completion, which
            // poll_completions hands out only after this progress's flush: the kernel may read it
            // in place. A bcopy'd buffer goes back to the pool (or is freed) the moment its WR
            // completes, possibly before the flush (an ACK behind a queued retransmission): copy.
            const std::span<const uint8_t> payload(n ? w.src + off : nullptr, n);
            if (w.owned.capacity() == 0)
                emit_gather(qp, pkt, payload);
            else
                emit(qp, pkt, payload);
            cc_sent(qp, uint32_t(n + pkt_overhead), now);
            if (last) {
                ++qp.send_idx;
                qp.send_pkt = 0;
            } else {
                ++qp.send_pkt;
            }
            break;
        }
        case OpKind::read: {
            // Request up to the end of the chunk containing send_pkt.
            const uint32_t chunk_end =
                std::min(w.npkts, (qp.send_pkt / read_chunk_pkts_ + 1) * read_chunk_pkts_);
            const uint32_t pkts = chunk_end - qp.send_pkt;
            if (inflight > 0 && uint32_t(inflight) + pkts > uint32_t(qp.cwnd))
                return;
            const size_t off = size_t(qp.send_pkt) * qp.mtu;
            const size_t end = std::min(w.len, size_t(chunk_end) * qp.mtu);
            // UCX_RC_ROCE_MAX_RD_BYTES: response bytes in flight per QP, in every CC mode (each
            // READ makes the responder send all it asks for at once). Re-issues are not held.
            if (wire::psn_diff(psn, qp.sent_hi) >= 0) {
                const uint64_t out = read_bytes_outstanding(qp);
                if (out > 0 && out + (end - std::min(end, off)) > cfg_.cc.read_cap.max_bytes) {
                    st_.reads_capped++;
                    return;
                }
            }
            // The reader paces the responses it asks for (congestion.cpp).
            const uint32_t resp_bytes = uint32_t(end - std::min(end, off)) + pkts * pkt_overhead;
            if (!cc_may_send(qp, resp_bytes, now, psn))
                return;
            pkt.bth.opcode = uint8_t(Opcode::rc_read_request);
            pkt.bth.ack_req = true;
            pkt.reth.va = w.remote_va + off;
            pkt.reth.rkey = w.rkey;
            pkt.reth.dma_len = uint32_t(end - std::min(end, off));
            emit(qp, pkt, {});
            cc_sent(qp, resp_bytes, now);
            end_psn = wire::psn_add(w.first_psn, chunk_end);
            if (chunk_end == w.npkts) {
                ++qp.send_idx;
                qp.send_pkt = 0;
            } else {
                qp.send_pkt = chunk_end;
            }
            break;
        }
        case OpKind::fetch_add:
        case OpKind::cmp_swap:
            if (inflight > 0 && uint32_t(inflight) >= uint32_t(qp.cwnd))
                return;
            if (!cc_may_send(qp, pkt_overhead + 28, now, psn))
                return;
            pkt.bth.opcode = uint8_t(w.op == OpKind::fetch_add ? Opcode::rc_fetch_add : Opcode::rc_cmp_swap);
            pkt.bth.ack_req = true;
            pkt.atomic.va = w.remote_va;
            pkt.atomic.rkey = w.rkey;
            pkt.atomic.swap_add = w.swap_add;
            pkt.atomic.compare = w.compare;
            emit(qp, pkt, {});
            cc_sent(qp, pkt_overhead + 28, now);
            ++qp.send_idx;
            qp.send_pkt = 0;
            break;
        }
        if (wire::psn_diff(psn, qp.sent_hi) >= 0) {   // new data, not a retransmission
            if (!qp.probe_active) {
                qp.probe_active = true;
                qp.probe_psn = psn;
                qp.probe_ns = now;
            }
            qp.sent_hi = end_psn;
        }
        if (qp.timer_deadline_ns == 0)
            qp.timer_deadline_ns = now + qp.cur_timeout_ns;
    }
}

// Rewinds the cursor to `psn` (go-back-N). Repeated requests for the same PSN within half a
// retransmission timeout are ignored (one gap produces many out-of-order arrivals).
void DeviceImpl::goback(Qp& qp, uint32_t psn, bool force, uint64_t now) {
    if (!force && psn == qp.last_goback_psn && now - qp.last_goback_ns < qp.cur_timeout_ns / 2)
        return;
    for (size_t i = 0; i < qp.sq.size(); ++i) {
        Wr& w = qp.sq[i];
        if (!w.psn_assigned)
            break;
        const int32_t d = wire::psn_diff(psn, w.first_psn);
        if (d < 0 || uint32_t(d) >= w.npkts)
            continue;
        uint32_t pkt = 0;
        if (w.op == OpKind::send || w.op == OpKind::write)
            pkt = uint32_t(d);
        else if (w.op == OpKind::read)
            pkt = w.resp_pkts;
        // Only rewind (never skip ahead of packets not yet sent).
        if (i < qp.send_idx || (i == qp.send_idx && pkt < qp.send_pkt)) {
            const uint32_t cur = qp.send_idx < qp.sq.size() && qp.sq[qp.send_idx].psn_assigned
                                     ? wire::psn_add(qp.sq[qp.send_idx].first_psn, qp.send_pkt)
                                     : qp.next_psn;
            const auto again = uint32_t(std::max(0, wire::psn_diff(cur, psn)));
            st_.retransmits += again;
            qp.st.retransmits += again;
            if (!force) {   // loss signal: multiplicative decrease
                qp.ssthresh = std::max(min_cwnd, qp.cwnd / 2);
                qp.cwnd = qp.ssthresh;
                cc_loss(qp, now);
            }
            qp.send_idx = i;
            qp.send_pkt = pkt;
            qp.probe_active = false;   // Karn: no RTT samples across a retransmission
        }
        qp.last_goback_psn = psn;
        qp.last_goback_ns = now;
        return;
    }
}

void DeviceImpl::goback_head(Qp& qp, uint64_t now) {
    if (qp.sq.empty() || !qp.sq.front().psn_assigned)
        return;
    const Wr& w = qp.sq.front();
    uint32_t psn = w.first_psn;
    if (w.op == OpKind::read)
        psn = wire::psn_add(w.first_psn, w.resp_pkts);
    else if ((w.op == OpKind::send || w.op == OpKind::write) && wire::psn_diff(qp.una_psn, w.first_psn) > 0)
        psn = qp.una_psn;
    goback(qp, psn, true, now);
}

} // namespace roce::sw
