#include "cc/dcqcn.hpp"

#include <algorithm>
#include <cmath>

namespace roce::cc {

DcqcnRp::DcqcnRp(const DcqcnParams& p, double line_rate_bps)
    : p_(p), line_(line_rate_bps), rc_(line_rate_bps), rt_(line_rate_bps), alpha_(p.alpha_init) {
    // A floor above the line rate (MIN_RATE is set before the line rate is known) would make a
    // CNP raise the rate: the floor is the line rate at most.
    p_.min_rate_bps = std::min(p_.min_rate_bps, line_);
}

double DcqcnRp::alpha(Nanos now) const {
    if (!cnp_seen_ || now <= alpha_epoch_) return alpha_;
    const auto periods = (now - alpha_epoch_) / p_.alpha_period;
    return alpha_ * std::pow(1.0 - p_.g, static_cast<double>(periods));
}

void DcqcnRp::settle_alpha(Nanos now) {
    if (!cnp_seen_ || now <= alpha_epoch_) return;
    const auto periods = (now - alpha_epoch_) / p_.alpha_period;
    if (periods == 0) return;
    alpha_ *= std::pow(1.0 - p_.g, static_cast<double>(periods));
    alpha_epoch_ += periods * p_.alpha_period;
}

DcqcnStage DcqcnRp::stage() const {
    if (next_timer_ == never) return DcqcnStage::idle;
    if (std::max(t_, bc_) <= p_.f) return DcqcnStage::fast_recovery;
    if (std::min(t_, bc_) > p_.f) return DcqcnStage::hyper;
    return DcqcnStage::additive;
}

void DcqcnRp::on_cnp(Nanos now) {
    on_timer(now);                      // events due before the CNP happen first
    settle_alpha(now);
    ctr_.cnps++;
    rt_ = rc_;
    rc_ = std::max(rc_ * (1.0 - alpha_ / 2.0), p_.min_rate_bps);
    alpha_ = (1.0 - p_.g) * alpha_ + p_.g;
    cnp_seen_ = true;
    alpha_epoch_ = now;
    t_ = bc_ = 0;
    bytes_acc_ = 0;
    next_timer_ = now + p_.timer;
}

void DcqcnRp::on_loss(Nanos now) {
    ctr_.losses++;
    if (!p_.loss_as_cnp) return;
    on_cnp(now);
    ctr_.cnps--;
}

void DcqcnRp::increase() {
    const uint32_t hi = std::max(t_, bc_), lo = std::min(t_, bc_);
    if (hi <= p_.f) {
        ctr_.fast_recovery++;
    } else if (lo > p_.f) {
        rt_ += static_cast<double>(lo - p_.f) * p_.rhai_bps;
        ctr_.hyper++;
    } else {
        rt_ += p_.rai_bps;
        ctr_.additive++;
    }
    rt_ = std::min(rt_, line_);
    rc_ = std::min((rt_ + rc_) / 2.0, line_);
    // Back at line rate: nothing left to recover; stop the timer until the next CNP.
    if (rc_ >= line_ * (1.0 - 1e-9)) {
        rc_ = rt_ = line_;
        next_timer_ = never;
        t_ = bc_ = 0;
        bytes_acc_ = 0;
    }
}

void DcqcnRp::on_timer(Nanos now) {
    while (next_timer_ != never && next_timer_ <= now) {
        const Nanos due = next_timer_;
        next_timer_ = due + p_.timer;
        t_++;
        ctr_.timer_events++;
        increase();                       // may set next_timer_ = never
    }
}

void DcqcnRp::on_bytes_sent(uint64_t n, Nanos now) {
    on_timer(now);
    if (next_timer_ == never) return;     // idle at line rate: the byte counter is not running
    bytes_acc_ += n;
    while (bytes_acc_ >= p_.byte_counter && next_timer_ != never) {
        bytes_acc_ -= p_.byte_counter;
        bc_++;
        ctr_.byte_events++;
        increase();
    }
}

} // namespace roce::cc
