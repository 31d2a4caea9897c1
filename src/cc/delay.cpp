#include "cc/delay.hpp"

#include <algorithm>

namespace roce::cc {

DelayCc::DelayCc(const DelayParams& p, uint32_t mtu) : p_(p), mtu_(mtu), cwnd_(p.init_cwnd) {}

bool DelayCc::on_rtt_sample(Nanos rtt, uint64_t acked_bytes, Nanos now, Nanos slack) {
    if (rtt <= 0) return true;
    ctr_.samples++;
    ctr_.acked_bytes += acked_bytes;
    if (rtt >= p_.target && slack > 0) {
        if (rtt - slack < p_.target) {
            ctr_.ambiguous++;
            return false;
        }
        rtt -= slack;
    }
    srtt_ = srtt_ == 0 ? rtt : srtt_ + (rtt - srtt_) / 8;
    if (rtt < p_.target) {
        const double acked = static_cast<double>(acked_bytes);
        cwnd_ += cwnd_ >= mtu_ ? p_.ai_bytes * acked / cwnd_ : p_.ai_bytes * acked / mtu_;
        ctr_.increases++;
    } else if (!decreased_ || now - last_decrease_ >= srtt_) {
        const double x = static_cast<double>(rtt - p_.target) / static_cast<double>(rtt);
        cwnd_ *= std::max(1.0 - p_.beta * x, 1.0 - p_.max_mdf);
        decreased_ = true;
        last_decrease_ = now;
        ctr_.decreases++;
    }
    cwnd_ = std::clamp(cwnd_, p_.min_cwnd, p_.max_cwnd);
    return true;
}

void DelayCc::on_loss(Nanos now) {
    ctr_.losses++;
    if (!p_.loss_decrease) return;
    if (decreased_ && now - last_decrease_ < srtt_) return;
    cwnd_ = std::clamp(cwnd_ * (1.0 - p_.max_mdf), p_.min_cwnd, p_.max_cwnd);
    decreased_ = true;
    last_decrease_ = now;
    ctr_.decreases++;
}

double DelayCc::pacing_rate_bps() const {
    if (cwnd_ >= mtu_ || srtt_ <= 0) return 0;
    return cwnd_ * 8e9 / static_cast<double>(srtt_);
}

} // namespace roce::cc
