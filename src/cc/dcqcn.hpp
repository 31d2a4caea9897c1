// DCQCN (Zhu et al., "Congestion Control for Large-Scale RDMA Deployments", SIGCOMM 2015):
// the reaction point (sender rate control) and the notification point (receiver CNP generation).
// The congestion point (switch RED/ECN marking) is in the simulator.
//
// RP, per QP (paper, Algorithm 1 and section 4):
//   on CNP:     R_T = R_C;  R_C = R_C * (1 - alpha/2);  alpha = (1-g)*alpha + g;
//               timer, byte counter and the stage counters T, BC restart.
//   no CNP for K: alpha = (1-g)*alpha (applied lazily, exactly once per whole period K).
//   increase event (timer period T expired: T++; B bytes sent: BC++):
//     max(T, BC) <= F      fast recovery   R_C = (R_T + R_C)/2
//     min(T, BC) >  F      hyper increase  R_T += (min(T,BC) - F) * R_HAI; R_C = (R_T + R_C)/2
//     otherwise            additive        R_T += R_AI;            R_C = (R_T + R_C)/2
//   Rates are clamped to [min_rate, line_rate]; once R_C reaches the line rate the RP goes idle
//   (no timer) until the next CNP.
// NP, per flow: a CE-marked packet triggers a CNP unless one was sent for the flow within N.
#pragma once
#include <cstdint>
#include <unordered_map>

#include "cc/cc_time.hpp"
#include "cc/config.hpp"

namespace roce::cc {

enum class DcqcnStage : uint8_t { idle, fast_recovery, additive, hyper };
constexpr const char* to_string(DcqcnStage s) {
    return s == DcqcnStage::idle ? "idle" : s == DcqcnStage::fast_recovery ? "fast_recovery"
         : s == DcqcnStage::additive ? "additive" : "hyper";
}

struct DcqcnRpCounters {
    uint64_t cnps = 0, losses = 0;
    uint64_t timer_events = 0;
    uint64_t byte_events = 0;
    uint64_t fast_recovery = 0, additive = 0, hyper = 0;
};

class DcqcnRp {
public:
    DcqcnRp(const DcqcnParams& p, double line_rate_bps);

    void on_cnp(Nanos now);
    // A loss (sequence NAK or retransmission timeout). The paper assumes a lossless (PFC) fabric
    // and has no loss reaction; without PFC a flow whose packets are all dropped never gets a CNP,
    // so loss is treated as a CNP (counted separately) when DcqcnParams::loss_as_cnp is set.
    void on_loss(Nanos now);
    void on_bytes_sent(uint64_t n, Nanos now);
    // Runs every increase event due at or before now (cheap when none is). Call it when
    // now >= next_timer(), or simply before each send decision.
    void on_timer(Nanos now);
    Nanos next_timer() const { return next_timer_; }   // `never` while idle

    double rate_bps() const { return rc_; }
    double target_bps() const { return rt_; }
    // alpha as of `now` (includes the lazy decay; const).
    double alpha(Nanos now) const;
    // Stage of the counters now (that of the last increase event; fast_recovery right after a CNP).
    DcqcnStage stage() const;
    const DcqcnRpCounters& counters() const { return ctr_; }
    double line_rate_bps() const { return line_; }

private:
    void settle_alpha(Nanos now);
    void increase();

    DcqcnParams p_;
    double line_;
    double rc_, rt_;
    double alpha_;
    Nanos alpha_epoch_ = 0;       // alpha is exact as of this time
    bool cnp_seen_ = false;       // alpha only decays after the first CNP started its timer
    Nanos next_timer_ = never;
    uint64_t bytes_acc_ = 0;      // bytes towards the next byte-counter event
    uint32_t t_ = 0, bc_ = 0;     // stage counters since the last CNP
    DcqcnRpCounters ctr_;
};

// CNP limiter for one flow (one per QP in the device: the QP is the flow).
class CnpLimiter {
public:
    explicit CnpLimiter(Nanos interval) : interval_(interval) {}
    // A CE-marked packet of this flow arrived at `now`: true when a CNP must be sent now.
    bool on_ce_packet(Nanos now) {
        if (sent_ && now - last_ < interval_) return false;
        sent_ = true;
        last_ = now;
        return true;
    }
private:
    Nanos interval_;
    Nanos last_ = 0;
    bool sent_ = false;
};

// Notification point for many flows keyed by an opaque id (e.g. (src GID hash, dest QPN)).
class DcqcnNp {
public:
    explicit DcqcnNp(const DcqcnParams& p) : interval_(p.cnp_interval) {}
    bool on_ce_packet(uint64_t flow, Nanos now) {
        auto it = flows_.try_emplace(flow, interval_).first;
        const bool send = it->second.on_ce_packet(now);
        ce_packets_++;
        cnps_ += send;
        return send;
    }
    void forget(uint64_t flow) { flows_.erase(flow); }
    uint64_t ce_packets() const { return ce_packets_; }
    uint64_t cnps_sent() const { return cnps_; }
private:
    Nanos interval_;
    std::unordered_map<uint64_t, CnpLimiter> flows_;
    uint64_t ce_packets_ = 0, cnps_ = 0;
};

} // namespace roce::cc
