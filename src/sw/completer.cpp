// Completer: ACK / NAK / RNR NAK / READ response / atomic ACK processing (IBTA 9.7.5.1) and
// in-order completion of work requests. A plain ACK (or a response at a later PSN) acknowledges
// every earlier PSN; a READ or atomic it passes without its response means the response was lost
// ("implied NAK") and the request is re-issued.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/log.hpp"
#include "sw/device_impl.hpp"

namespace roce::sw {

namespace {

// IBTA table 45: RNR NAK timer field -> microseconds.
constexpr uint32_t rnr_timer_us[32] = {
    655360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920,
    2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440, 81920, 122880,
    163840, 245760, 327680, 491520};

} // namespace

void DeviceImpl::complete_wr(Qp& qp, Status st) {
    Wr& w = qp.sq.front();
    if (w.is_rd_atomic() && w.psn_assigned && qp.rd_outstanding)
        --qp.rd_outstanding;
    if (w.wr_id)
        push_completion(Completion{w.wr_id, qp.qpn, w.op, st});
    if (w.owned.capacity())
        give_buf(std::move(w.owned));
    qp.sq.pop_front();
    if (qp.send_idx > 0)
        --qp.send_idx;
    else
        qp.send_pkt = 0;
}

void DeviceImpl::qp_fail(Qp& qp, Status st) {
    if (qp.state != QpState::error)
        ROCE_DEBUG("qp 0x%x -> error (%s), %zu WRs flushed", qp.qpn, to_string(st).data(), qp.sq.size());
    qp.state = QpState::error;
    while (!qp.sq.empty())
        complete_wr(qp, st);
    qp.send_idx = 0;
    qp.send_pkt = 0;
    qp.rd_outstanding = 0;
    qp.timer_deadline_ns = 0;
    qp.in_op = Qp::InOp::none;
    release_rbuf(qp);
}

namespace {

// Forward progress: reset retry budgets and re-arm (or stop) the retransmission timer.
// slack: how long the acknowledgement may have waited unread (DeviceImpl::rx_slack).
void made_progress(Qp& qp, const DeviceConfig& cfg, uint64_t now, uint32_t acked_pkts, double max_cwnd,
                   uint64_t slack) {
    if (qp.cwnd < qp.ssthresh)
        qp.cwnd += acked_pkts;                    // slow start
    else
        qp.cwnd += double(acked_pkts) / qp.cwnd;  // additive increase
    if (qp.cwnd > max_cwnd)
        qp.cwnd = max_cwnd;
    qp.retries_left = cfg.retry_count;
    qp.rnr_left = cfg.rnr_retry;
    qp.timer_deferred = false;
    qp.cc_acked_pkts += acked_pkts;
    if (qp.probe_active && wire::psn_diff(qp.una_psn, qp.probe_psn) > 0) {
        qp.probe_active = false;
        const double sample = double(now - qp.probe_ns);
        if (qp.cc)   // delay-based control: request -> completion round trips
            if (!qp.cc->on_rtt_sample(cc::Nanos(sample), qp.cc_acked_pkts * qp.mtu, cc::Nanos(now), cc::Nanos(slack)))
                qp.st.rtt_ambiguous++;
        qp.cc_acked_pkts = 0;
        if (qp.srtt_ns == 0) {
            qp.srtt_ns = sample;
            qp.rttvar_ns = sample / 2;
        } else {
            qp.rttvar_ns = 0.75 * qp.rttvar_ns + 0.25 * std::abs(qp.srtt_ns - sample);
            qp.srtt_ns = 0.875 * qp.srtt_ns + 0.125 * sample;
        }
    }
    qp.cur_timeout_ns = std::clamp<uint64_t>(uint64_t(qp.srtt_ns + 4 * qp.rttvar_ns),
                                             std::min(uint64_t(cfg.retransmit_timeout_us) * 1000, max_rto_ns),
                                             max_rto_ns);
    const bool busy = !qp.sq.empty() && qp.sq.front().psn_assigned;
    qp.timer_deadline_ns = busy ? now + qp.cur_timeout_ns : 0;
}

// After acknowledgements the cursor may point at packets already acknowledged: skip them.
void normalize_cursor(Qp& qp) {
    if (qp.send_idx >= qp.sq.size())
        return;
    Wr& w = qp.sq[qp.send_idx];
    if (!w.psn_assigned || (w.op != OpKind::send && w.op != OpKind::write))
        return;
    const int32_t d = wire::psn_diff(qp.una_psn, wire::psn_add(w.first_psn, qp.send_pkt));
    if (d > 0) {
        qp.send_pkt = std::min<uint32_t>(w.npkts, qp.send_pkt + uint32_t(d));
        if (qp.send_pkt == w.npkts) {
            ++qp.send_idx;
            qp.send_pkt = 0;
        }
    }
}

} // namespace

// Acknowledges every PSN up to and including `a`.
static void ack_through(DeviceImpl& dev, Qp& qp, uint32_t a, uint64_t now) {
    if (wire::psn_diff(a, qp.una_psn) < 0)
        return;   // nothing new
    uint32_t una = wire::psn_add(a, 1);
    while (!qp.sq.empty()) {
        Wr& w = qp.sq.front();
        if (!w.psn_assigned)
            break;
        if (w.op == OpKind::send || w.op == OpKind::write) {
            if (wire::psn_diff(w.last_psn(), a) > 0)
                break;
            dev.complete_wr(qp, Status::ok);
            continue;
        }
        const uint32_t missing = wire::psn_add(w.first_psn, w.op == OpKind::read ? w.resp_pkts : 0);
        if (wire::psn_diff(missing, una) < 0)
            una = missing;
        if (wire::psn_diff(w.last_psn(), a) <= 0)
            dev.goback(qp, missing, false, now);   // implied NAK
        break;
    }
    if (wire::psn_diff(una, qp.una_psn) > 0) {
        const uint32_t n = uint32_t(wire::psn_diff(una, qp.una_psn));
        qp.una_psn = una;
        made_progress(qp, dev.cfg_, now, n, dev.window_pkts_, dev.rx_slack(now));
    }
    normalize_cursor(qp);
}

void DeviceImpl::comp_packet(Qp& qp, const wire::Packet& pkt, uint64_t now) {
    const uint32_t p = pkt.bth.psn;
    // Responses must be for PSNs we have sent.
    if (wire::psn_diff(p, qp.next_psn) >= 0 || wire::psn_diff(qp.next_psn, p) > (1 << 22)) {
        st_.malformed++;
        return;
    }
    const uint32_t before = wire::psn_add(p, wire::psn_mask);   // p - 1
    const auto op = wire::Opcode(pkt.bth.opcode);
    if (op == wire::Opcode::rc_ack) {
        const uint8_t syn = pkt.aeth.syndrome;
        switch (wire::aeth_kind(syn)) {
        case wire::AethKind::ack:
            ack_through(*this, qp, p, now);
            break;
        case wire::AethKind::nak: {
            count_nak(qp, syn, false);
            // A NAK for a PSN acknowledged since is late: a sequence error the responder
            // repaired (rewinding would resend and halve the window), or a fatal one for a
            // duplicate of work that completed (failing the QP would fail healthy work).
            if (wire::psn_diff(p, qp.una_psn) < 0)
                break;
            ack_through(*this, qp, before, now);
            const uint8_t code = syn & 0x1f;
            if (code == wire::nak_psn_seq_error) {
                goback(qp, p, false, now);
            } else {
                // Fatal NAK: the WR at p fails, and with it the QP.
                ROCE_DEBUG("qp 0x%x: NAK code %u at psn 0x%x", qp.qpn, code, p);
                qp_fail(qp, code == wire::nak_remote_access ? Status::remote_access : Status::remote_invalid);
            }
            break;
        }
        case wire::AethKind::rnr_nak: {
            count_nak(qp, syn, false);
            st_.rnr_naks++;
            qp.st.rnr_naks++;
            // Late as the NAK above (a duplicated or reordered RNR NAK for work acknowledged
            // since): pausing and rewinding would spend one of rnr_retry's tries on nothing.
            if (wire::psn_diff(p, qp.una_psn) < 0)
                break;
            ack_through(*this, qp, before, now);
            if (cfg_.rnr_retry != 7) {
                if (qp.rnr_left == 0) {
                    qp_fail(qp, Status::timeout);
                    break;
                }
                --qp.rnr_left;
            }
            const uint64_t wait = uint64_t(rnr_timer_us[syn & 0x1f]) * 1000;
            qp.rnr_wait_until_ns = now + wait;
            goback(qp, p, true, now);
            qp.timer_deadline_ns = qp.rnr_wait_until_ns + qp.cur_timeout_ns;
            break;
        }
        default:
            st_.malformed++;
            break;
        }
        return;
    }
    if (op == wire::Opcode::rc_atomic_ack) {
        ack_through(*this, qp, before, now);
        if (qp.sq.empty())
            return;
        Wr& w = qp.sq.front();
        if (!w.psn_assigned || !w.is_rd_atomic() || w.op == OpKind::read || w.first_psn != p)
            return;
        if (w.result)
            *w.result = pkt.atomic_ack.orig;
        qp.una_psn = wire::psn_add(p, 1);
        complete_wr(qp, Status::ok);
        made_progress(qp, cfg_, now, 1, window_pkts_, rx_slack(now));
        return;
    }
    // READ response
    ack_through(*this, qp, before, now);
    if (qp.sq.empty())
        return;
    Wr& w = qp.sq.front();
    if (!w.psn_assigned || w.op != OpKind::read)
        return;
    const int32_t d = wire::psn_diff(p, w.first_psn);
    if (d < 0 || uint32_t(d) >= w.npkts)
        return;
    if (uint32_t(d) < w.resp_pkts) {
        st_.duplicates++;
        qp.st.duplicates++;
        return;
    }
    if (uint32_t(d) > w.resp_pkts) {
        st_.seq_errors++;
        qp.st.seq_errors++;
        goback(qp, wire::psn_add(w.first_psn, w.resp_pkts), false, now);
        return;
    }
    const size_t off = size_t(d) * qp.mtu;
    const size_t expect = std::min<size_t>(qp.mtu, w.len - std::min(w.len, off));
    if (pkt.payload.size() != expect) {
        st_.malformed++;
        return;
    }
    if (expect)
        std::memcpy(w.dst + off, pkt.payload.data(), expect);
    ++w.resp_pkts;
    qp.una_psn = wire::psn_add(p, 1);
    if (w.resp_pkts == w.npkts)
        complete_wr(qp, Status::ok);
    made_progress(qp, cfg_, now, 1, window_pkts_, rx_slack(now));
}

} // namespace roce::sw
