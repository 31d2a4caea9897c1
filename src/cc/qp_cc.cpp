#include "cc/qp_cc.hpp"

namespace roce::cc {

QpCc::QpCc(const CcConfig& cfg, CcMode mode, double line_rate_bps, uint32_t mtu)
    : mode_(mode == CcMode::auto_ ? CcMode::off : mode),
      line_(line_rate_bps),
      pacer_(line_rate_bps, cfg.pacer_burst),
      np_(cfg.dcqcn.cnp_interval),
      read_cap_(cfg.read_cap) {
    if (mode_ == CcMode::dcqcn) rp_.emplace(cfg.dcqcn, line_rate_bps);
    if (mode_ == CcMode::delay) delay_.emplace(cfg.delay, mtu);
}

void QpCc::sync_pacer(Nanos now) {
    double r = line_;
    if (rp_) r = rp_->rate_bps();
    else if (delay_ && delay_->pacing_rate_bps() > 0) r = delay_->pacing_rate_bps();
    if (r != pacer_.rate_bps()) pacer_.set_rate(r, now);
}

Nanos QpCc::next_send_time(Nanos now, uint32_t bytes, uint64_t outstanding_bytes) {
    switch (mode_) {
    case CcMode::off:
    case CcMode::auto_:
        return now;
    case CcMode::dcqcn:
        break;
    case CcMode::delay:
        if (!delay_->can_send(outstanding_bytes)) {
            ctr_.window_blocked++;
            return never;
        }
        if (delay_->pacing_rate_bps() <= 0) return now;
        break;
    }
    if (rp_) rp_->on_timer(now);
    sync_pacer(now);
    const Nanos t = pacer_.next_send_time(now, bytes);
    if (t > now) ctr_.paced++;
    return t;
}

void QpCc::on_sent(uint32_t bytes, Nanos now) {
    if (mode_ == CcMode::off) return;
    if (rp_) {
        rp_->on_bytes_sent(bytes, now);
    }
    sync_pacer(now);
    pacer_.consume(bytes, now);
}

void QpCc::on_cnp(Nanos now) {
    if (!rp_) {
        ctr_.cnps_ignored++;
        return;
    }
    ctr_.cnps_received++;
    rp_->on_cnp(now);
    sync_pacer(now);
}

bool QpCc::on_rtt_sample(Nanos rtt, uint64_t acked_bytes, Nanos now, Nanos slack) {
    if (!delay_) return true;
    const bool used = delay_->on_rtt_sample(rtt, acked_bytes, now, slack);
    sync_pacer(now);
    return used;
}

void QpCc::on_loss(Nanos now) {
    if (rp_) rp_->on_loss(now);
    if (delay_) delay_->on_loss(now);
    sync_pacer(now);
}

void QpCc::on_timer(Nanos now) {
    if (!rp_) return;
    rp_->on_timer(now);
    sync_pacer(now);
}

bool QpCc::on_ce_packet(Nanos now) {
    ctr_.ce_packets++;
    if (mode_ != CcMode::dcqcn) return false;   // the peer's RP decides; we only answer in dcqcn mode
    const bool send = np_.on_ce_packet(now);
    ctr_.cnps_to_send += send;
    return send;
}

double QpCc::rate_bps() const {
    if (rp_) return rp_->rate_bps();
    if (delay_ && delay_->pacing_rate_bps() > 0) return delay_->pacing_rate_bps();
    return line_;
}

QpCc make_qp_cc(const CcConfig& cfg, DeviceKind dev, double line_rate_bps, uint32_t mtu) {
    return QpCc(cfg, resolve_mode(cfg.mode, dev), line_rate_bps, mtu);
}

} // namespace roce::cc
